// The sidecar index format (docs/index_format.md): little-endian binary,
// a header, one record per sample, and an xxh3_64 of everything before it.
#include "shardstream/shard_index.h"

#include <xxhash.h>

#include <cstring>

#include "shardstream/url.h"

namespace shardstream {
namespace {

constexpr char kMagic[8] = {'S', 'S', 'T', 'A', 'R', 'I', 'D', 'X'};
constexpr uint32_t kVersion = 1;

void Put32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void Put64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

class Cursor {
 public:
  explicit Cursor(std::string_view d) : d_(d) {}
  bool Get32(uint32_t* v) {
    if (d_.size() < 4) return false;
    *v = 0;
    for (int i = 0; i < 4; ++i) *v |= uint32_t{static_cast<unsigned char>(d_[i])} << (8 * i);
    d_.remove_prefix(4);
    return true;
  }
  bool Get64(uint64_t* v) {
    if (d_.size() < 8) return false;
    *v = 0;
    for (int i = 0; i < 8; ++i) *v |= uint64_t{static_cast<unsigned char>(d_[i])} << (8 * i);
    d_.remove_prefix(8);
    return true;
  }
  bool GetBytes(size_t n, std::string* out) {
    if (d_.size() < n) return false;
    out->assign(d_.data(), n);
    d_.remove_prefix(n);
    return true;
  }
  size_t left() const { return d_.size(); }

 private:
  std::string_view d_;
};

}  // namespace

std::string IndexUrlFor(const std::string& shard_url) { return shard_url + ".idx"; }

std::string SerializeSampleIndex(const SampleIndex& index) {
  std::string out(kMagic, sizeof(kMagic));
  Put32(&out, kVersion);
  Put32(&out, index.compressed ? 1u : 0u);
  Put64(&out, index.shard_size);
  Put64(&out, index.samples.size());
  for (const auto& e : index.samples) {
    Put64(&out, e.offset);
    Put64(&out, e.length);
    Put32(&out, e.nfields);
    Put32(&out, static_cast<uint32_t>(e.key.size()));
    out += e.key;
  }
  Put64(&out, XXH3_64bits(out.data(), out.size()));
  return out;
}

Result<SampleIndex> ParseSampleIndex(std::string_view data, const std::string& url) {
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
  uint32_t version = 0, flags = 0;
  uint64_t n = 0;
  SampleIndex index;
  if (!c.Get32(&version) || !c.Get32(&flags) || !c.Get64(&index.shard_size) || !c.Get64(&n))
    return bad("truncated header", sizeof(kMagic));
  if (version != kVersion) return bad("unsupported version " + std::to_string(version), 8);
  index.compressed = (flags & 1) != 0;
  if (n > c.left() / 24) return bad("sample count " + std::to_string(n) + " exceeds the file", 24);
  index.samples.resize(n);
  uint64_t prev_end = 0;
  for (uint64_t i = 0; i < n; ++i) {
    auto& e = index.samples[i];
    uint32_t keylen = 0;
    size_t at = body.size() - c.left();
    if (!c.Get64(&e.offset) || !c.Get64(&e.length) || !c.Get32(&e.nfields) ||
        !c.Get32(&keylen) || !c.GetBytes(keylen, &e.key))
      return bad("truncated at sample " + std::to_string(i), at);
    if (e.offset < prev_end || e.length > index.shard_size ||
        e.offset > index.shard_size - e.length)
      return bad("sample " + std::to_string(i) + " out of order or past the shard's end", at);
    prev_end = e.offset + e.length;
  }
  if (c.left() != 0) return bad("trailing bytes", body.size() - c.left());
  return index;
}

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
