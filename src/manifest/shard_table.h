// ShardTable: a data set's shards as the loader keeps them for a run, in
// columns rather than one ShardEntry (three strings and a map) per shard, so
// a manifest of a million shards costs tens of MiB, not hundreds:
//   - urls as written, front-coded in blocks of 16 (consecutive shard names
//     share all but their last digits), resolved on demand against the base
//     of the manifest they came from;
//   - sizes and sample counts as int64 columns;
//   - "xxh3_128:<hex>" checksums as 16 bytes; any other text, and extra
//     fields, kept per entry on the side (rare: MDS and JSON Lines sets).
// An entry read back (operator[]) is the ShardEntry that was appended, with
// `resolved` filled in. Thread-safety: const methods may run concurrently.
#ifndef SHARDSTREAM_SRC_MANIFEST_SHARD_TABLE_H_
#define SHARDSTREAM_SRC_MANIFEST_SHARD_TABLE_H_

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardstream/export.h"
#include "shardstream/manifest.h"

namespace shardstream::internal {

// An int64 column of values >= -1 kept in 32 bits while every value fits
// (sizes under 4 GiB, counts under 4 billion): 4 bytes a shard, not 8.
class IntColumn {
 public:
  int64_t operator[](size_t i) const {
    return wide_ ? big_[i] : static_cast<int64_t>(small_[i]) - 1;
  }
  void push_back(int64_t v) {
    if (!wide_ && (v < -1 || v > kMaxSmall)) Widen();
    if (wide_) {
      big_.push_back(v);
    } else {
      small_.push_back(static_cast<uint32_t>(v + 1));
    }
  }
  void set(size_t i, int64_t v) {
    if (!wide_ && (v < -1 || v > kMaxSmall)) Widen();
    if (wide_) {
      big_[i] = v;
    } else {
      small_[i] = static_cast<uint32_t>(v + 1);
    }
  }
  size_t size() const { return wide_ ? big_.size() : small_.size(); }
  bool empty() const { return size() == 0; }
  size_t capacity() const { return wide_ ? big_.capacity() : small_.capacity(); }
  size_t bytes() const { return small_.capacity() * 4 + big_.capacity() * 8; }
  void reserve(size_t n) { wide_ ? big_.reserve(n) : small_.reserve(n); }
  void shrink_to_fit() { wide_ ? big_.shrink_to_fit() : small_.shrink_to_fit(); }

 private:
  static constexpr int64_t kMaxSmall = int64_t{0xFFFFFFFF} - 1;
  void Widen() {
    big_.reserve(small_.capacity());
    for (uint32_t v : small_) big_.push_back(static_cast<int64_t>(v) - 1);
    std::vector<uint32_t>().swap(small_);
    wide_ = true;
  }
  std::vector<uint32_t> small_;
  std::vector<int64_t> big_;
  bool wide_ = false;
};

class SHARDSTREAM_EXPORT ShardTable {
 public:
  ShardTable() = default;
  // Every entry of `m` (m.url becomes url()).
  static ShardTable FromManifest(Manifest m);

  // Appends an entry. `base` is the folder its relative url resolves
  // against (JoinUrl); entries whose `resolved` differs from JoinUrl(base,
  // url) keep it as given.
  void Append(const ShardEntry& e, std::string_view base = {});
  // The common case without building a ShardEntry: `checksum` is empty or
  // "algorithm:hex", validated by the caller.
  void Append(std::string_view url, std::string_view base, int64_t bytes, int64_t nsamples,
              std::string_view checksum);
  // Appends every entry of `other`.
  void AppendTable(const ShardTable& other);

  size_t size() const { return nsamples_.size(); }
  bool empty() const { return nsamples_.empty(); }
  int64_t nsamples(size_t i) const { return nsamples_[i]; }
  void set_nsamples(size_t i, int64_t n) { nsamples_.set(i, n); }
  int64_t bytes(size_t i) const { return sizes_[i]; }
  void set_bytes(size_t i, int64_t n) { sizes_.set(i, n); }
  // The url as written, and resolved against its manifest's folder.
  std::string url(size_t i) const;
  std::string resolved(size_t i) const;
  // Entry i whole (allocates: for the shards a consumer opens, not loops
  // over every shard).
  ShardEntry operator[](size_t i) const;
  ShardEntry front() const { return (*this)[0]; }
  // True when some entry has extra fields (MDS layouts, JSON Lines rows).
  bool has_extras() const { return !extras_.empty(); }
  // Every entry's extra fields, by index (only entries that have some).
  const std::map<size_t, std::map<std::string, std::string>>& extras() const { return extras_; }
  // Entry i's extra fields, or null.
  const std::map<std::string, std::string>* extra(size_t i) const;

  // Calls f(i, url as written) for every entry in order (cheaper than
  // url(i) in a loop).
  template <class F>
  void ForEachUrl(F&& f) const {
    std::string name;
    size_t pos = 0;
    for (size_t i = 0; i < size(); ++i) {
      DecodeAt(&pos, &name);
      f(i, std::string_view(name));
    }
  }

  // Where it was read from ("" when assembled in memory).
  const std::string& source_url() const { return source_url_; }
  void set_source_url(std::string u) { source_url_ = std::move(u); }

  // As Manifest's: the same values for the same entries.
  int64_t TotalSamples() const;
  bool SampleCountsKnown() const { return TotalSamples() >= 0; }
  std::string Fingerprint() const;
  std::string LegacyFingerprint() const;

  Manifest ToManifest() const;
  // The first entry whose resolved url an earlier entry has too, with that
  // earlier entry: {later, earlier}; nullopt when all differ.
  std::optional<std::pair<size_t, size_t>> FirstDuplicate() const;
  // Heap bytes held (for the startup benchmark and tests).
  size_t MemoryBytes() const;
  // Room for `entries` more entries and `name_bytes` more bytes of names
  // (a manifest's reader estimates both from its first chunk), so the
  // columns are not copied as they grow.
  void Reserve(size_t entries, size_t name_bytes);
  size_t name_bytes() const { return names_.size(); }
  // Frees spare capacity once the table is complete.
  void ShrinkToFit();

  // A minimal iterator yielding entries by value, so read-only loops written
  // for std::vector<ShardEntry> keep working.
  class const_iterator {
   public:
    const_iterator(const ShardTable* t, size_t i) : t_(t), i_(i) {}
    ShardEntry operator*() const { return (*t_)[i_]; }
    const_iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator!=(const const_iterator& o) const { return i_ != o.i_; }

   private:
    const ShardTable* t_;
    size_t i_;
  };
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size()}; }

 private:
  static constexpr size_t kBlock = 16;
  // Decodes the url at *pos into *name, which holds the url before it (the
  // first of a block shares nothing), and moves *pos past it.
  void DecodeAt(size_t* pos, std::string* name) const;
  void AppendName(std::string_view url);
  std::string_view BaseOf(size_t i) const;

  std::string source_url_;
  std::string names_;               // front-coded urls as written
  std::vector<uint64_t> blocks_;    // offset in names_ of each block of kBlock
  std::string last_name_;           // the last url appended (for front coding)
  IntColumn sizes_, nsamples_;
  // Bases by run: entries from first on resolve against base.
  std::vector<std::pair<size_t, std::string>> bases_;
  std::vector<std::array<uint8_t, 16>> sums_;  // xxh3_128 digests
  std::vector<uint8_t> sum_kind_;              // 0 none, 1 in sums_, 2 in other_sums_
  std::map<size_t, std::string> other_sums_;
  std::map<size_t, std::string> resolved_as_given_;
  std::map<size_t, std::map<std::string, std::string>> extras_;
};

// Reads the manifest at `url` (through `source`, DefaultSource() when null)
// into a table. JSON Lines is read a chunk at a time and never held whole;
// CSV and JSON documents go through ParseManifest. The errors are
// ParseManifest's: the line and what is wrong, a duplicate url, no shards.
SHARDSTREAM_EXPORT Result<ShardTable> ReadManifestTable(const std::string& url, Source* source);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_SRC_MANIFEST_SHARD_TABLE_H_
