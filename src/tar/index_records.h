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
#include "shardstream/shard_index.h"
#include "shardstream/source.h"
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
  uint16_t flags = 0;
};

// kCorrupt for the index file at `url` (redacted), at byte `at`.
SHARDSTREAM_EXPORT Status IndexRecordError(const std::string& url, const std::string& why,
                                           size_t at);
// The checks on the file as a whole (magic, checksum, version, count): its
// header, and its records (the rest of `data` before the checksum).
SHARDSTREAM_EXPORT Status OpenIndexRecords(std::string_view data, const std::string& url,
                                           IndexHeader* h, std::string_view* records);
// The same checks on an index read through a Source, a piece of at most
// kIndexReadChunk bytes at a time; its records lie in the file's bytes
// [*records_begin, *records_end).
constexpr size_t kIndexReadChunk = size_t{1} << 20;
SHARDSTREAM_EXPORT Status CheckIndexFile(RandomAccessFile& file, const std::string& url,
                                         IndexHeader* h, uint64_t* records_begin,
                                         uint64_t* records_end);

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

// Walks an index's records in order, in as many steps as its user likes
// (the loader's direct reads take a chunk of records at a time, so what
// they keep does not grow with the shard). Each record is handed to a sink
// once it has passed the checks on its place (kCorrupt naming the redacted
// url and byte offset otherwise). A sink has:
//   bool Sample(uint64_t i, const IndexSampleRecord&);  // false: stop before sample i
//   void Field(uint64_t i, uint32_t j, const IndexFieldRecord&);  // sample i's, version 2
//
// The records are given whole (Open) or a window at a time (OpenWindowed,
// then SetWindow): a walk in a window stops before a record that the
// window does not hold whole, and needs_window() then asks for the next
// window, from position() on.
class IndexWalker {
 public:
  // Checks the file as a whole (OpenIndexRecords). `data` must outlive the walk.
  Status Open(std::string_view data, const std::string& url) {
    url_ = url;
    std::string_view records;
    SHARDSTREAM_RETURN_IF_ERROR(OpenIndexRecords(data, url, &h_, &records));
    end_ = data.size() - 8;
    c_ = IndexCursor(records);
    last_ = true;
    return Status::OK();
  }
  // Records from a file checked by CheckIndexFile; no window yet.
  void OpenWindowed(const IndexHeader& h, uint64_t records_begin, uint64_t records_end,
                    const std::string& url) {
    url_ = url;
    h_ = h;
    end_ = static_cast<size_t>(records_begin);
    records_end_ = records_end;
    c_ = IndexCursor(std::string_view());
    last_ = records_begin == records_end;
  }
  // The file's bytes from position() on (`data` outlives the walk in it).
  void SetWindow(std::string_view data) {
    end_ = position() + data.size();
    c_ = IndexCursor(data);
    last_ = end_ >= records_end_;
    need_window_ = false;
  }
  bool needs_window() const { return need_window_; }
  const IndexHeader& header() const { return h_; }
  uint64_t next() const { return i_; }           // the next sample to walk
  size_t position() const { return end_ - c_.left(); }  // its record's byte offset

  // Samples [next(), until) while the sink's Sample() says so (and, in a
  // window, while the window holds their records).
  template <class Sink>
  Status Walk(Sink* sink, uint64_t until) {
    const std::string& url = url_;
    if (until > h_.samples) until = h_.samples;
    for (; i_ < until; ++i_) {
      if (!last_ && !WholeRecord()) {
        need_window_ = true;
        return Status::OK();
      }
      const IndexCursor at_record = c_;
      const uint64_t prev_end = prev_end_;
      IndexSampleRecord e;
      uint32_t keylen = 0;
      size_t at = end_ - c_.left();
      if (!c_.Get64(&e.offset) || !c_.Get64(&e.length) || !c_.Get32(&e.nfields) ||
          !c_.Get32(&keylen) || !c_.GetView(keylen, &e.key))
        return IndexRecordError(url, "truncated at sample " + std::to_string(i_), at);
      // A compressed shard's offsets are into its decompressed bytes, which
      // its file size (shard_size) does not bound.
      if (e.offset < prev_end_ ||
          (!h_.compressed && (e.length > h_.shard_size || e.offset > h_.shard_size - e.length)))
        return IndexRecordError(
            url, "sample " + std::to_string(i_) + " out of order or past the shard's end", at);
      prev_end_ = e.offset + e.length;
      if (!sink->Sample(i_, e)) {
        c_ = at_record;  // it stays the next one
        prev_end_ = prev_end;
        return Status::OK();
      }
      if (h_.version == 1) continue;
      for (uint32_t j = 0; j < e.nfields; ++j) {
        at = end_ - c_.left();
        IndexFieldRecord f;
        uint32_t namelen = 0;
        uint8_t ndim = 0, dtype = 0, flags0 = 0, flags1 = 0;
        if (c_.left() < 48 || !c_.Get32(&namelen) || !c_.GetView(namelen, &f.name) ||
            !c_.Get64(&f.offset) || !c_.Get64(&f.size) || !c_.Get8(&ndim) || !c_.Get8(&dtype) ||
            !c_.Get8(&flags0) || !c_.Get8(&flags1) || !c_.Get64(&f.payload) ||
            !c_.Get64(&f.count) || !c_.Get64(&f.header_hash))
          return IndexRecordError(url, "truncated at a field of sample " + std::to_string(i_), at);
        f.ndim = ndim == 0xff ? -1 : ndim;
        f.dtype = static_cast<DType>(dtype);
        f.flags = static_cast<uint16_t>(flags0 | (flags1 << 8));
        const bool inside =
            f.offset >= e.offset && f.offset <= prev_end_ && f.size <= prev_end_ - f.offset;
        bool ok = inside && (f.ndim == -1 || f.ndim <= kMaxDims);
        // A grouped document's field is its values alone (tar/doc_group.h).
        if (f.flags != 0)
          ok = ok && (f.flags & ~(kIndexFieldGrouped | kIndexFieldGroupStart)) == 0 &&
               (f.flags & kIndexFieldGrouped) != 0 && f.ndim == 1 &&
               ((f.flags & kIndexFieldGroupStart) != 0 || f.payload == f.offset);
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
                                  "field " + std::to_string(j) + " of sample " +
                                      std::to_string(i_) +
                                      " lies outside the sample or does not add up",
                                  at);
        sink->Field(i_, j, f);
      }
    }
    if (i_ == h_.samples && (!last_ || c_.left() != 0))
      return IndexRecordError(url, "trailing bytes", end_ - c_.left());
    return Status::OK();
  }

 private:
  // Whether the window holds the next record whole (the walk's checks
  // then find a truncated record only at the file's end).
  bool WholeRecord() const {
    IndexCursor c = c_;
    uint64_t skip64 = 0;
    uint32_t nfields = 0, len = 0;
    std::string_view v;
    if (!c.Get64(&skip64) || !c.Get64(&skip64) || !c.Get32(&nfields) || !c.Get32(&len) ||
        !c.GetView(len, &v))
      return false;
    if (h_.version == 1) return true;
    for (uint32_t j = 0; j < nfields; ++j)
      if (c.left() < 48 || !c.Get32(&len) || !c.GetView(len, &v) || !c.GetView(44, &v))
        return false;
    return true;
  }

  std::string url_;
  IndexHeader h_;
  IndexCursor c_{std::string_view()};
  size_t end_ = 0;  // where the records in c_ end, in the file
  uint64_t records_end_ = 0;  // where the records end, in the file (windowed)
  bool last_ = true;          // c_ reaches the records' end
  bool need_window_ = false;
  uint64_t i_ = 0, prev_end_ = 0;
};

// The whole index at once: the sink also has
//   Status Header(const IndexHeader&);  // before any record; an error ends the walk
template <class Sink>
Status WalkSampleIndex(std::string_view data, const std::string& url, Sink* sink) {
  IndexWalker w;
  SHARDSTREAM_RETURN_IF_ERROR(w.Open(data, url));
  SHARDSTREAM_RETURN_IF_ERROR(sink->Header(w.header()));
  return w.Walk(sink, w.header().samples);
}

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_TAR_INDEX_RECORDS_H_
