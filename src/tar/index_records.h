// Walking a sample index's records without building a SampleIndex. The
// loader's direct reads keep a few numbers of one field per sample; a whole
// SampleIndex (a vector entry and a string per field) cost them more per
// document than the rest of opening the shard. The walk is a template so
// that a sink's calls inline: it runs once per sample and field each epoch.
#ifndef SHARDSTREAM_TAR_INDEX_RECORDS_H_
#define SHARDSTREAM_TAR_INDEX_RECORDS_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "shardstream/dtype.h"
#include "shardstream/export.h"
#include "shardstream/status.h"

namespace shardstream::internal {

struct IndexHeader {
  uint32_t version = 0;
  bool compressed = false;
  uint64_t shard_size = 0;
  uint64_t samples = 0;
};

// Views into the walked data: valid during the call only.
struct IndexSampleRecord {
  uint64_t offset = 0, length = 0;
  uint32_t nfields = 0;
  std::string_view key;
};

struct IndexFieldRecord {
  std::string_view name;
  uint64_t offset = 0, size = 0;
  int32_t ndim = -1;
  DType dtype = DType::kUint8;
  uint64_t payload = 0, count = 0, header_hash = 0;
};

// kCorrupt for the index file at `url` (redacted), at byte `at`.
SHARDSTREAM_EXPORT Status IndexRecordError(const std::string& url, const std::string& why,
                                           size_t at);
// The checks on the file as a whole (magic, checksum, version, count): its
// header, and its records (the rest of `data` before the checksum).
SHARDSTREAM_EXPORT Status OpenIndexRecords(std::string_view data, const std::string& url,
                                           IndexHeader* h, std::string_view* records);

// Little-endian fields off the front of a view; false when too short.
// Inlined: the walk reads every field of every record through these.
#if defined(__GNUC__)
#define SHARDSTREAM_CURSOR_INLINE inline __attribute__((always_inline))
#else
#define SHARDSTREAM_CURSOR_INLINE inline
#endif

class IndexCursor {
 public:
  explicit IndexCursor(std::string_view d) : d_(d) {}
  SHARDSTREAM_CURSOR_INLINE bool Get32(uint32_t* v) { return GetLE(v); }
  SHARDSTREAM_CURSOR_INLINE bool Get64(uint64_t* v) { return GetLE(v); }
  SHARDSTREAM_CURSOR_INLINE bool Get8(uint8_t* v) {
    if (d_.empty()) return false;
    *v = static_cast<uint8_t>(d_[0]);
    d_.remove_prefix(1);
    return true;
  }
  SHARDSTREAM_CURSOR_INLINE bool GetView(size_t n, std::string_view* out) {
    if (d_.size() < n) return false;
    *out = d_.substr(0, n);
    d_.remove_prefix(n);
    return true;
  }
  size_t left() const { return d_.size(); }

 private:
  template <typename T>
  SHARDSTREAM_CURSOR_INLINE bool GetLE(T* v) {
    if (d_.size() < sizeof(T)) return false;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    std::memcpy(v, d_.data(), sizeof(T));
#else
    T x = 0;
    for (size_t i = 0; i < sizeof(T); ++i)
      x |= static_cast<T>(T{static_cast<unsigned char>(d_[i])} << (8 * i));
    *v = x;
#endif
    d_.remove_prefix(sizeof(T));
    return true;
  }
  std::string_view d_;
};

// Verifies `data` (the index file at `url`), then hands each record to
// `sink` once it has passed the checks on its place (kCorrupt naming the
// redacted url and byte offset otherwise). The sink has:
//   Status Header(const IndexHeader&);  // before any record; an error ends the walk
//   bool Sample(uint64_t i, const IndexSampleRecord&);  // false: stop here, successfully
//   void Field(uint64_t i, uint32_t j, const IndexFieldRecord&);  // sample i's, version 2
template <class Sink>
Status WalkSampleIndex(std::string_view data, const std::string& url, Sink* sink) {
  IndexHeader h;
  std::string_view records;
  SHARDSTREAM_RETURN_IF_ERROR(OpenIndexRecords(data, url, &h, &records));
  SHARDSTREAM_RETURN_IF_ERROR(sink->Header(h));
  const size_t end = data.size() - 8;  // where the records end, in the file
  IndexCursor c(records);
  uint64_t prev_end = 0;
  for (uint64_t i = 0; i < h.samples; ++i) {
    IndexSampleRecord e;
    uint32_t keylen = 0;
    size_t at = end - c.left();
    if (!c.Get64(&e.offset) || !c.Get64(&e.length) || !c.Get32(&e.nfields) ||
        !c.Get32(&keylen) || !c.GetView(keylen, &e.key))
      return IndexRecordError(url, "truncated at sample " + std::to_string(i), at);
    if (e.offset < prev_end || e.length > h.shard_size || e.offset > h.shard_size - e.length)
      return IndexRecordError(
          url, "sample " + std::to_string(i) + " out of order or past the shard's end", at);
    prev_end = e.offset + e.length;
    if (!sink->Sample(i, e)) return Status::OK();
    if (h.version == 1) continue;
    for (uint32_t j = 0; j < e.nfields; ++j) {
      at = end - c.left();
      IndexFieldRecord f;
      uint32_t namelen = 0;
      uint8_t ndim = 0, dtype = 0, pad = 0;
      if (c.left() < 48 || !c.Get32(&namelen) || !c.GetView(namelen, &f.name) ||
          !c.Get64(&f.offset) || !c.Get64(&f.size) || !c.Get8(&ndim) || !c.Get8(&dtype) ||
          !c.Get8(&pad) || !c.Get8(&pad) || !c.Get64(&f.payload) || !c.Get64(&f.count) ||
          !c.Get64(&f.header_hash))
        return IndexRecordError(url, "truncated at a field of sample " + std::to_string(i), at);
      f.ndim = ndim == 0xff ? -1 : ndim;
      f.dtype = static_cast<DType>(dtype);
      const bool inside =
          f.offset >= e.offset && f.offset <= prev_end && f.size <= prev_end - f.offset;
      bool ok = inside && (f.ndim == -1 || f.ndim <= kMaxDims);
      if (ok && f.ndim >= 0) {
        // The values fill the field's data after the header, exactly. (A
        // multiplication, not a division: this runs for every field.)
        uint64_t bytes = 0;
        ok = dtype <= static_cast<uint8_t>(DType::kFloat64) && f.payload >= f.offset &&
             f.payload <= f.offset + f.size &&
             !__builtin_mul_overflow(f.count, uint64_t{DTypeSize(f.dtype)}, &bytes) &&
             bytes == f.offset + f.size - f.payload;
      }
      if (!ok)
        return IndexRecordError(url,
                                "field " + std::to_string(j) + " of sample " + std::to_string(i) +
                                    " lies outside the sample or does not add up",
                                at);
      sink->Field(i, j, f);
    }
  }
  if (c.left() != 0) return IndexRecordError(url, "trailing bytes", end - c.left());
  return Status::OK();
}

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_TAR_INDEX_RECORDS_H_
