// The sidecar index format (docs/index_format.md): little-endian binary,
// a header, one record per sample, and an xxh3_64 of everything before it.
#include "shardstream/shard_index.h"

#include <xxhash.h>

#include <cstring>

#include "shardstream/decode.h"
#include "shardstream/url.h"
#include "tar/index_field.h"
#include "tar/index_records.h"

namespace shardstream {
namespace {

constexpr char kMagic[8] = {'S', 'S', 'T', 'A', 'R', 'I', 'D', 'X'};
constexpr uint32_t kVersion = 2;  // 1: no field records; still read

void Put32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void Put64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

// The walk reads every field of every record through these: inlined, they
// leave the walk a few loads and compares per record.
#if defined(__GNUC__)
#define SHARDSTREAM_CURSOR_INLINE inline __attribute__((always_inline))
#else
#define SHARDSTREAM_CURSOR_INLINE inline
#endif

class Cursor {
 public:
  explicit Cursor(std::string_view d) : d_(d) {}
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
  // An index of a million samples loads each epoch: whole words, not bytes.
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

}  // namespace

std::string IndexUrlFor(const std::string& shard_url) { return shard_url + ".idx"; }

std::string SerializeSampleIndex(const SampleIndex& index) {
  std::string out(kMagic, sizeof(kMagic));
  // Without field records (an index made by hand) it is a version 1 file.
  bool v2 = !index.fields.empty();
  for (const auto& e : index.samples)
    v2 = v2 && e.first_field <= index.fields.size() &&
         e.nfields <= index.fields.size() - e.first_field;
  Put32(&out, v2 ? kVersion : 1u);
  Put32(&out, index.compressed ? 1u : 0u);
  Put64(&out, index.shard_size);
  Put64(&out, index.samples.size());
  for (const auto& e : index.samples) {
    Put64(&out, e.offset);
    Put64(&out, e.length);
    Put32(&out, e.nfields);
    Put32(&out, static_cast<uint32_t>(e.key.size()));
    out += e.key;
    for (uint64_t j = e.first_field; v2 && j < e.first_field + e.nfields; ++j) {
      const SampleIndexField& f = index.fields[j];
      Put32(&out, static_cast<uint32_t>(f.name.size()));
      out += f.name;
      Put64(&out, f.offset);
      Put64(&out, f.size);
      out.push_back(static_cast<char>(f.ndim < 0 ? 0xff : f.ndim));
      out.push_back(static_cast<char>(f.dtype));
      out.append(2, '\0');
      Put64(&out, f.payload);
      Put64(&out, f.count);
      Put64(&out, f.header_hash);
    }
  }
  Put64(&out, XXH3_64bits(out.data(), out.size()));
  return out;
}

Result<SampleIndex> ParseSampleIndex(std::string_view data, const std::string& url) {
  // Builds the whole index from the walk.
  struct Builder : internal::IndexSink {
    SampleIndex index;
    bool v2 = false;
    Status Header(const internal::IndexHeader& h) override {
      index.shard_size = h.shard_size;
      index.compressed = h.compressed;
      index.samples.resize(h.samples);
      v2 = h.version > 1;
      if (v2) index.fields.reserve(h.samples);
      return Status::OK();
    }
    bool Sample(uint64_t i, const internal::IndexSampleRecord& r) override {
      SampleIndexEntry& e = index.samples[i];
      e.offset = r.offset;
      e.length = r.length;
      e.nfields = r.nfields;
      e.key.assign(r.key.data(), r.key.size());
      if (v2) e.first_field = index.fields.size();
      return true;
    }
    void Field(uint64_t, uint32_t, const internal::IndexFieldRecord& r) override {
      SampleIndexField f;
      f.name.assign(r.name.data(), r.name.size());
      f.offset = r.offset;
      f.size = r.size;
      f.ndim = r.ndim;
      f.dtype = r.dtype;
      f.payload = r.payload;
      f.count = r.count;
      f.header_hash = r.header_hash;
      index.fields.push_back(std::move(f));
    }
  } b;
  SHARDSTREAM_RETURN_IF_ERROR(internal::WalkSampleIndex(data, url, &b));
  return std::move(b.index);
}

namespace internal {

Status WalkSampleIndex(std::string_view data, const std::string& url, IndexSink* sink) {
  std::string u = RedactUrl(url);
  auto bad = [&](const std::string& why, size_t at) {
    return Status(StatusCode::kCorrupt, "sample index " + u + ": " + why, u,
                  static_cast<int64_t>(at));
  };
  if (data.size() < sizeof(kMagic) + 32 || std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0)
    return bad("not a shardstream sample index (bad magic or too short)", 0);
  std::string_view body = data.substr(0, data.size() - 8);
  Cursor tail(data.substr(data.size() - 8));
  uint64_t stored = 0;
  (void)tail.Get64(&stored);
  if (stored != XXH3_64bits(body.data(), body.size()))
    return bad("checksum mismatch (damaged file)", data.size() - 8);
  Cursor c(body.substr(sizeof(kMagic)));
  IndexHeader h;
  uint32_t flags = 0;
  if (!c.Get32(&h.version) || !c.Get32(&flags) || !c.Get64(&h.shard_size) || !c.Get64(&h.samples))
    return bad("truncated header", sizeof(kMagic));
  if (h.version != 1 && h.version != kVersion)
    return bad("unsupported version " + std::to_string(h.version), 8);
  h.compressed = (flags & 1) != 0;
  const uint64_t n = h.samples;
  if (n > c.left() / 24) return bad("sample count " + std::to_string(n) + " exceeds the file", 24);
  SHARDSTREAM_RETURN_IF_ERROR(sink->Header(h));
  uint64_t prev_end = 0;
  for (uint64_t i = 0; i < n; ++i) {
    IndexSampleRecord e;
    uint32_t keylen = 0;
    size_t at = body.size() - c.left();
    if (!c.Get64(&e.offset) || !c.Get64(&e.length) || !c.Get32(&e.nfields) ||
        !c.Get32(&keylen) || !c.GetView(keylen, &e.key))
      return bad("truncated at sample " + std::to_string(i), at);
    if (e.offset < prev_end || e.length > h.shard_size || e.offset > h.shard_size - e.length)
      return bad("sample " + std::to_string(i) + " out of order or past the shard's end", at);
    prev_end = e.offset + e.length;
    if (!sink->Sample(i, e)) return Status::OK();
    if (h.version == 1) continue;
    for (uint32_t j = 0; j < e.nfields; ++j) {
      at = body.size() - c.left();
      if (c.left() < 48) return bad("truncated at a field of sample " + std::to_string(i), at);
      IndexFieldRecord f;
      uint32_t namelen = 0;
      uint8_t ndim = 0, dtype = 0, pad = 0;
      if (!c.Get32(&namelen) || !c.GetView(namelen, &f.name) || !c.Get64(&f.offset) ||
          !c.Get64(&f.size) || !c.Get8(&ndim) || !c.Get8(&dtype) || !c.Get8(&pad) ||
          !c.Get8(&pad) || !c.Get64(&f.payload) || !c.Get64(&f.count) || !c.Get64(&f.header_hash))
        return bad("truncated at a field of sample " + std::to_string(i), at);
      f.ndim = ndim == 0xff ? -1 : ndim;
      f.dtype = static_cast<DType>(dtype);
      const bool inside = f.offset >= e.offset && f.offset <= prev_end &&
                          f.size <= prev_end - f.offset;
      bool ok = inside && (f.ndim == -1 || f.ndim <= kMaxDims);
      if (ok && f.ndim >= 0) {
        // The values fill the field's data after the header, exactly.
        ok = dtype <= static_cast<uint8_t>(DType::kFloat64) && f.payload >= f.offset &&
             f.payload <= f.offset + f.size &&
             f.count <= (f.offset + f.size - f.payload) / DTypeSize(f.dtype) &&
             f.count * DTypeSize(f.dtype) == f.offset + f.size - f.payload;
      }
      if (!ok) return bad("field " + std::to_string(j) + " of sample " + std::to_string(i) +
                              " lies outside the sample or does not add up", at);
      sink->Field(i, j, f);
    }
  }
  if (c.left() != 0) return bad("trailing bytes", body.size() - c.left());
  return Status::OK();
}

void MakeIndexField(std::string_view name, uint64_t offset, std::string_view data,
                    SampleIndexField* out) {
  out->name.assign(name.data(), name.size());
  out->offset = offset;
  out->size = data.size();
  out->ndim = -1;
  out->dtype = DType::kUint8;
  out->payload = 0;
  out->count = 0;
  out->header_hash = 0;
  // Every member of every sample comes here when a reader builds its
  // index: rule the others out by their last four bytes first.
  if (name.size() < 4 || name[name.size() - 4] != '.' || (name[name.size() - 3] | 0x20) != 'n' ||
      DecodeForName(name) != FieldDecode::kNpy)
    return;
  size_t payload = 0;
  auto h = DecodeNpyHeader(data, data.size(), FieldContext{}, &payload);
  if (!h.ok()) return;
  uint64_t count = 1;
  for (int i = 0; i < h->ndim; ++i) count *= static_cast<uint64_t>(h->shape[i]);
  out->ndim = h->ndim;
  out->dtype = h->dtype;
  out->payload = offset + payload;
  out->count = count;
  out->header_hash = XXH3_64bits(data.data(), payload);
}

}  // namespace internal

Result<SampleIndex> ReadSampleIndex(const std::string& shard_url, Source* source) {
  Source* src = source ? source : DefaultSource().get();
  std::string idx_url = IndexUrlFor(shard_url);
  SHARDSTREAM_ASSIGN_OR_RETURN(std::string data, ReadFileToString(*src, idx_url));
  SHARDSTREAM_ASSIGN_OR_RETURN(SampleIndex index, ParseSampleIndex(data, idx_url));
  auto info = src->Stat(shard_url);
  if (info.ok() && info->size != index.shard_size)
    return Status(StatusCode::kCorrupt,
                  "sample index " + RedactUrl(idx_url) + " is stale: it describes " +
                      std::to_string(index.shard_size) + " bytes, the shard has " +
                      std::to_string(info->size),
                  RedactUrl(shard_url));
  return index;
}

Status WriteSampleIndex(const SampleIndex& index, const std::string& shard_url, Source* source) {
  Source* src = source ? source : DefaultSource().get();
  return WriteFileAtomic(*src, IndexUrlFor(shard_url), SerializeSampleIndex(index));
}

}  // namespace shardstream
