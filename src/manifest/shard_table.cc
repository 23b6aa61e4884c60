// ShardTable: columns, front-coded names, and the read-back of an entry.
#include "manifest/shard_table.h"

#include <algorithm>

#include "manifest/manifest_internal.h"
#include "shardstream/url.h"

namespace shardstream::internal {

namespace {

constexpr std::string_view kXxh3Prefix = "xxh3_128:";

void PutVarint(std::string* out, size_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

size_t GetVarint(const std::string& in, size_t* pos) {
  size_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto b = static_cast<uint8_t>(in[(*pos)++]);
    v |= static_cast<size_t>(b & 0x7f) << shift;
    if (b < 0x80) return v;
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// "xxh3_128:" and 32 lowercase hex digits, as the writer formats them: then
// the digest round-trips exactly.
bool ParseXxh3(std::string_view text, std::array<uint8_t, 16>* out) {
  if (text.size() != kXxh3Prefix.size() + 32 || text.substr(0, kXxh3Prefix.size()) != kXxh3Prefix)
    return false;
  text.remove_prefix(kXxh3Prefix.size());
  for (size_t k = 0; k < 16; ++k) {
    const int hi = HexValue(text[2 * k]), lo = HexValue(text[2 * k + 1]);
    if (hi < 0 || lo < 0) return false;
    (*out)[k] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

std::string FormatXxh3(const std::array<uint8_t, 16>& d) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(kXxh3Prefix);
  for (uint8_t b : d) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

}  // namespace

ShardTable ShardTable::FromManifest(Manifest m) {
  ShardTable t;
  t.source_url_ = m.url;
  const std::string base = m.url.empty() ? std::string() : UrlDirname(m.url);
  for (const ShardEntry& e : m.shards) t.Append(e, base);
  t.ShrinkToFit();
  return t;
}

void ShardTable::AppendName(std::string_view url) {
  const size_t i = size();
  if (i % kBlock == 0) {
    blocks_.push_back(names_.size());
    PutVarint(&names_, 0);
  } else {
    const size_t n = std::min(url.size(), last_name_.size());
    size_t shared = 0;
    while (shared < n && url[shared] == last_name_[shared]) ++shared;
    PutVarint(&names_, shared);
    url.remove_prefix(shared);
    last_name_.resize(shared);
  }
  PutVarint(&names_, url.size());
  names_.append(url);
  if (i % kBlock == 0) last_name_.clear();
  last_name_.append(url);
}

void ShardTable::Append(std::string_view url, std::string_view base, int64_t bytes, int64_t nsamples,
                        std::string_view checksum) {
  const size_t i = size();
  if (bases_.empty() || bases_.back().second != base) bases_.emplace_back(i, std::string(base));
  AppendName(url);
  sizes_.push_back(bytes);
  nsamples_.push_back(nsamples);
  uint8_t kind = 0;
  if (!checksum.empty()) {
    std::array<uint8_t, 16> d{};
    if (ParseXxh3(checksum, &d)) {
      if (sums_.empty()) sums_.reserve(nsamples_.capacity());
      if (sums_.size() < i + 1) sums_.resize(i + 1);
      sums_[i] = d;
      kind = 1;
    } else {
      other_sums_.emplace(i, std::string(checksum));
      kind = 2;
    }
  }
  sum_kind_.push_back(kind);
}

void ShardTable::Append(const ShardEntry& e, std::string_view base) {
  const size_t i = size();
  std::string folder;
  if (!e.resolved.empty() && JoinUrl(base, e.url) != e.resolved) {
    // Resolved elsewhere (a listing names a shard by its name and full
    // url): its own folder, when that gives it back, keeps it in columns.
    folder = UrlDirname(e.resolved);
    if (JoinUrl(folder, e.url) == e.resolved) base = folder;
  }
  Append(e.url, base, e.size, e.nsamples, e.checksum);
  if (!e.resolved.empty() && e.resolved != JoinUrl(base, e.url)) resolved_as_given_.emplace(i, e.resolved);
  if (!e.extra.empty()) extras_.emplace(i, e.extra);
}

void ShardTable::AppendTable(const ShardTable& other) {
  for (size_t i = 0; i < other.size(); ++i) Append(other[i], other.BaseOf(i));
}

void ShardTable::DecodeAt(size_t* pos, std::string* name) const {
  const size_t shared = GetVarint(names_, pos), n = GetVarint(names_, pos);
  name->resize(shared);
  name->append(names_, *pos, n);
  *pos += n;
}

std::string ShardTable::url(size_t i) const {
  std::string name;
  size_t pos = blocks_[i / kBlock];
  for (size_t k = i - i % kBlock; k <= i; ++k) DecodeAt(&pos, &name);
  return name;
}

std::string_view ShardTable::BaseOf(size_t i) const {
  auto it = std::upper_bound(bases_.begin(), bases_.end(), i,
                             [](size_t v, const std::pair<size_t, std::string>& b) { return v < b.first; });
  return it == bases_.begin() ? std::string_view() : std::string_view(std::prev(it)->second);
}

std::string ShardTable::resolved(size_t i) const {
  if (!resolved_as_given_.empty())
    if (auto it = resolved_as_given_.find(i); it != resolved_as_given_.end()) return it->second;
  return JoinUrl(BaseOf(i), url(i));
}

const std::map<std::string, std::string>* ShardTable::extra(size_t i) const {
  if (extras_.empty()) return nullptr;
  auto it = extras_.find(i);
  return it == extras_.end() ? nullptr : &it->second;
}

ShardEntry ShardTable::operator[](size_t i) const {
  ShardEntry e;
  e.url = url(i);
  auto given = resolved_as_given_.find(i);
  e.resolved = given != resolved_as_given_.end() ? given->second : JoinUrl(BaseOf(i), e.url);
  e.size = sizes_[i];
  e.nsamples = nsamples_[i];
  if (sum_kind_[i] == 1) e.checksum = FormatXxh3(sums_[i]);
  if (sum_kind_[i] == 2) e.checksum = other_sums_.at(i);
  if (const auto* x = extra(i)) e.extra = *x;
  return e;
}

int64_t ShardTable::TotalSamples() const {
  int64_t total = 0;
  for (size_t i = 0; i < size(); ++i) {
    const int64_t n = nsamples_[i];
    if (n < 0) return -1;
    total += n;
  }
  return total;
}

std::string ShardTable::Fingerprint() const {
  FingerprintBuilder b;
  ForEachUrl([&](size_t i, std::string_view u) { b.Add(u, nsamples_[i]); });
  return b.Finish();
}

std::string ShardTable::LegacyFingerprint() const {
  LegacyFingerprintBuilder b;
  std::string sum;
  ForEachUrl([&](size_t i, std::string_view u) {
    sum.clear();
    if (sum_kind_[i] == 1) sum = FormatXxh3(sums_[i]);
    if (sum_kind_[i] == 2) sum = other_sums_.at(i);
    b.Add(u, sizes_[i], nsamples_[i], sum);
  });
  return b.Finish();
}

Manifest ShardTable::ToManifest() const {
  Manifest m;
  m.url = source_url_;
  m.shards.reserve(size());
  for (size_t i = 0; i < size(); ++i) m.shards.push_back((*this)[i]);
  return m;
}

std::optional<std::pair<size_t, size_t>> ShardTable::FirstDuplicate() const {
  std::vector<uint64_t> hash(size());
  std::string joined;
  ForEachUrl([&](size_t i, std::string_view u) {
    if (!resolved_as_given_.empty()) {
      if (auto r = resolved_as_given_.find(i); r != resolved_as_given_.end()) {
        hash[i] = UrlHash(r->second);
        return;
      }
    }
    joined = JoinUrl(BaseOf(i), u);
    hash[i] = UrlHash(joined);
  });
  return internal::FirstDuplicate(hash,
                                  [&](size_t a, size_t b) { return resolved(a) == resolved(b); });
}

size_t ShardTable::MemoryBytes() const {
  size_t b = names_.capacity() + blocks_.capacity() * 8 + sizes_.bytes() + nsamples_.bytes() +
             sums_.capacity() * 16 + sum_kind_.capacity();
  for (const auto& [i, s] : other_sums_) b += s.capacity() + 64;
  for (const auto& [i, s] : resolved_as_given_) b += s.capacity() + 64;
  for (const auto& [i, x] : extras_) {
    b += 64;
    for (const auto& [k, v] : x) b += k.capacity() + v.capacity() + 64;
  }
  return b;
}

void ShardTable::Reserve(size_t entries, size_t name_bytes) {
  const size_t n = size() + entries;
  names_.reserve(names_.size() + name_bytes);
  blocks_.reserve(n / kBlock + 1);
  sizes_.reserve(n);
  nsamples_.reserve(n);
  sum_kind_.reserve(n);
  if (!sums_.empty()) sums_.reserve(n);
}

void ShardTable::ShrinkToFit() {
  // Only a real surplus is worth a copy of the columns.
  if (nsamples_.capacity() - size() < size() / 8 + 64 && names_.capacity() - names_.size() < names_.size() / 8 + 1024)
    return;
  names_.shrink_to_fit();
  blocks_.shrink_to_fit();
  sizes_.shrink_to_fit();
  nsamples_.shrink_to_fit();
  if (sums_.size() > size()) sums_.resize(size());
  sums_.shrink_to_fit();
  sum_kind_.shrink_to_fit();
}

}  // namespace shardstream::internal
