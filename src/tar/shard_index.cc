// The sidecar index format (docs/sample_index_format.md): little-endian binary,
// a header, one record per sample, and an xxh3_64 of everything before it.
#include "shardstream/shard_index.h"

#include <optional>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

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
      out.push_back(static_cast<char>(f.flags & 0xff));
      out.push_back(static_cast<char>(f.flags >> 8));
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
  struct Builder {
    SampleIndex index;
    bool v2 = false;
    Status Header(const internal::IndexHeader& h) {
      index.shard_size = h.shard_size;
      index.compressed = h.compressed;
      index.samples.resize(h.samples);
      v2 = h.version > 1;
      if (v2) index.fields.reserve(h.samples);
      return Status::OK();
    }
    bool Sample(uint64_t i, const internal::IndexSampleRecord& r) {
      SampleIndexEntry& e = index.samples[i];
      e.offset = r.offset;
      e.length = r.length;
      e.nfields = r.nfields;
      e.key.assign(r.key.data(), r.key.size());
      if (v2) e.first_field = index.fields.size();
      return true;
    }
    void Field(uint64_t, uint32_t, const internal::IndexFieldRecord& r) {
      SampleIndexField f;
      f.name.assign(r.name.data(), r.name.size());
      f.offset = r.offset;
      f.size = r.size;
      f.ndim = r.ndim;
      f.dtype = r.dtype;
      f.payload = r.payload;
      f.count = r.count;
      f.header_hash = r.header_hash;
      f.flags = r.flags;
      index.fields.push_back(std::move(f));
    }
  } b;
  SHARDSTREAM_RETURN_IF_ERROR(internal::WalkSampleIndex(data, url, &b));
  return std::move(b.index);
}

namespace internal {

Status IndexRecordError(const std::string& url, const std::string& why, size_t at) {
  const std::string u = RedactUrl(url);
  return Status(StatusCode::kCorrupt, "sample index " + u + ": " + why, u, static_cast<int64_t>(at));
}

namespace {

// The header (magic, version, flags, shard size, sample count) of an index
// of `file_size` bytes from its first bytes `head`; the records start at
// *records_at.
Status ParseIndexHead(std::string_view head, uint64_t file_size, const std::string& url,
                      IndexHeader* h, size_t* records_at) {
  if (file_size < sizeof(kMagic) + 32 || head.size() < sizeof(kMagic) + 24 ||
      std::memcmp(head.data(), kMagic, sizeof(kMagic)) != 0)
    return IndexRecordError(url, "not a shardstream sample index (bad magic or too short)", 0);
  IndexCursor c(head.substr(sizeof(kMagic)));
  uint32_t flags = 0;
  (void)(c.Get32(&h->version) && c.Get32(&flags) && c.Get64(&h->shard_size) &&
         c.Get64(&h->samples));
  if (h->version != 1 && h->version != kVersion)
    return IndexRecordError(url, "unsupported version " + std::to_string(h->version), 8);
  h->compressed = (flags & 1) != 0;
  *records_at = sizeof(kMagic) + 24;
  if (h->samples > (file_size - 8 - *records_at) / 24)
    return IndexRecordError(url, "sample count " + std::to_string(h->samples) + " exceeds the file",
                            24);
  return Status::OK();
}

Status ChecksumMismatch(const std::string& url, uint64_t file_size) {
  return IndexRecordError(url, "checksum mismatch (damaged file)", file_size - 8);
}

}  // namespace

Status OpenIndexRecords(std::string_view data, const std::string& url, IndexHeader* h,
                        std::string_view* records) {
  size_t at = 0;
  SHARDSTREAM_RETURN_IF_ERROR(ParseIndexHead(data, data.size(), url, h, &at));
  std::string_view body = data.substr(0, data.size() - 8);
  IndexCursor tail(data.substr(data.size() - 8));
  uint64_t stored = 0;
  (void)tail.Get64(&stored);
  if (stored != XXH3_64bits(body.data(), body.size())) return ChecksumMismatch(url, data.size());
  *records = body.substr(at);
  return Status::OK();
}

Status CheckIndexFile(RandomAccessFile& file, const std::string& url, IndexHeader* h,
                      uint64_t* records_begin, uint64_t* records_end) {
  SHARDSTREAM_ASSIGN_OR_RETURN(const uint64_t size, file.Size());
  // Hashed a piece at a time: what it holds does not grow with the index.
  std::unique_ptr<char[]> buf(new char[kIndexReadChunk]);
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state(XXH3_createState(),
                                                                       &XXH3_freeState);
  if (state == nullptr) return Status::Io("out of memory hashing " + url);
  (void)XXH3_64bits_reset(state.get());
  const uint64_t body = size >= 8 ? size - 8 : 0;
  size_t records_at = 0;
  for (uint64_t at = 0; at < body || at == 0;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kIndexReadChunk, body - at));
    SHARDSTREAM_ASSIGN_OR_RETURN(const size_t got, file.ReadAt(at, n, buf.get()));
    if (got < n)
      return IndexRecordError(url, "ends at byte " + std::to_string(at + got) + " of " +
                                       std::to_string(size) + " (cut short while read?)",
                              at + got);
    if (at == 0)
      SHARDSTREAM_RETURN_IF_ERROR(
          ParseIndexHead(std::string_view(buf.get(), got), size, url, h, &records_at));
    (void)XXH3_64bits_update(state.get(), buf.get(), got);
    at += got;
    if (n == 0) break;
  }
  char tail[8];
  SHARDSTREAM_ASSIGN_OR_RETURN(const size_t got, file.ReadAt(body, 8, tail));
  IndexCursor c(std::string_view(tail, got));
  uint64_t stored = 0;
  if (!c.Get64(&stored) || stored != XXH3_64bits_digest(state.get()))
    return ChecksumMismatch(url, size);
  *records_begin = records_at;
  *records_end = body;
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
  out->flags = 0;
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

std::string IndexCacheUrl(const std::string& index_dir, const std::string& shard_url) {
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx",
                static_cast<unsigned long long>(XXH3_64bits(shard_url.data(), shard_url.size())));
  std::string dir = index_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir + "/" + UrlBasename(shard_url) + "." + hash + ".idx";
}

Result<SampleIndex> ReadSampleIndex(const std::string& shard_url, Source* source,
                                    const std::string& index_dir, int64_t shard_size) {
  Source* src = source ? source : DefaultSource().get();
  std::string idx_url = IndexUrlFor(shard_url);
  Result<std::string> read = ReadFileToString(*src, idx_url);
  if (!read.ok() && read.status().code() == StatusCode::kNotFound && !index_dir.empty()) {
    // The copy a loader kept in its folder of indexes.
    idx_url = IndexCacheUrl(index_dir, shard_url);
    read = ReadFileToString(*src, idx_url);
  }
  SHARDSTREAM_ASSIGN_OR_RETURN(std::string data, std::move(read));
  SHARDSTREAM_ASSIGN_OR_RETURN(SampleIndex index, ParseSampleIndex(data, idx_url));
  std::optional<uint64_t> size;
  if (shard_size >= 0) {
    size = static_cast<uint64_t>(shard_size);
  } else if (auto info = src->Stat(shard_url); info.ok()) {
    size = info->size;
  }
  if (size && *size != index.shard_size)
    return Status(StatusCode::kCorrupt,
                  "sample index " + RedactUrl(idx_url) + " is stale: it describes " +
                      std::to_string(index.shard_size) + " bytes, the shard has " +
                      std::to_string(*size),
                  RedactUrl(shard_url));
  return index;
}

Status WriteSampleIndex(const SampleIndex& index, const std::string& shard_url, Source* source,
                        const std::string& index_dir) {
  Source* src = source ? source : DefaultSource().get();
  if (!index_dir.empty()) {
    Status made = src->CreateDir(index_dir);
    if (!made.ok()) return made.WithContext("index_dir " + RedactUrl(index_dir), index_dir, -1);
    return WriteFileAtomic(*src, IndexCacheUrl(index_dir, shard_url), SerializeSampleIndex(index));
  }
  return WriteFileAtomic(*src, IndexUrlFor(shard_url), SerializeSampleIndex(index));
}

}  // namespace shardstream
