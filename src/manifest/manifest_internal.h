// Pieces shared by the manifest parsers: every format produces entries with
// the line each came from, and one place validates fields and finishes the
// manifest (url resolution, duplicates, emptiness).
#ifndef SHARDSTREAM_SRC_MANIFEST_MANIFEST_INTERNAL_H_
#define SHARDSTREAM_SRC_MANIFEST_MANIFEST_INTERNAL_H_

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardstream/checksum.h"
#include "shardstream/manifest.h"

namespace shardstream::internal {

struct ParsedEntries {
  std::vector<ShardEntry> entries;
  std::vector<size_t> lines;  // 1-based line of each entry, for later errors
};

// kConfig "manifest <url> line <n>: <what>" (url redacted).
Status ManifestLineError(const std::string& url, size_t line, const std::string& what);

// One entry from a JSON object (JSON Lines and JSON document).
Result<ShardEntry> EntryFromJson(const nlohmann::json& obj, const std::string& url, size_t line);

// Checks the fields every format shares: url present, nsamples present,
// checksum syntax and algorithm.
Status ValidateEntry(const ShardEntry& e, const std::string& url, size_t line);

// kAuto resolved: by extension (.jsonl/.ndjson, .csv, .json), else by the
// text's start (a first line that is an object with "url" is JSON Lines).
ManifestFormat DetectManifestFormat(std::string_view text, const std::string& url);
// By the extension alone; kAuto when it says nothing.
ManifestFormat ManifestFormatByName(const std::string& url);

// The 1-based line of byte `offset` in `text`.
size_t LineOf(std::string_view text, size_t offset);

Result<ParsedEntries> ParseJsonl(std::string_view text, const std::string& url);

// One JSON Lines line (trailing blanks removed, not empty). The common shape
// (string url and checksum without escapes, integer size and nsamples, no
// other keys) is read without building a JSON value: *simple gets its
// fields, as views into `line`, and true is returned. Anything else goes
// through EntryFromJson into *entry (false returned), so every rule and
// error message has one home.
struct SimpleLine {
  std::string_view url, checksum;
  int64_t size = -1, nsamples = -1;
};
Result<bool> ParseJsonlLine(std::string_view line, const std::string& url, size_t line_no,
                            SimpleLine* simple, ShardEntry* entry);

// The first entry whose resolved url an earlier entry has too, with the
// first such earlier entry: {later, earlier}; nullopt when all differ.
// hash[i]: entry i's resolved url's XXH3 (UrlHash); same(a, b): whether
// entries a and b have the same resolved url, asked only where hashes are
// equal. Sorts hashes rather than building a set of the urls: a manifest of
// a million shards builds no million strings.
uint64_t UrlHash(std::string_view resolved);
std::optional<std::pair<size_t, size_t>> FirstDuplicate(
    const std::vector<uint64_t>& hash, const std::function<bool(size_t, size_t)>& same);

// The "duplicate url" error of entry `later` (its line), naming the first.
Status DuplicateUrlError(const std::string& url, const std::string& shard_url, size_t line,
                         size_t first_line);

// Manifest::Fingerprint and LegacyFingerprint, entry by entry.
class FingerprintBuilder {
 public:
  FingerprintBuilder();
  ~FingerprintBuilder();
  void Add(std::string_view url, int64_t nsamples);
  std::string Finish();

 private:
  std::unique_ptr<Hasher> h_;
  std::string line_;
  int64_t shards_ = 0, samples_ = 0;
};
class LegacyFingerprintBuilder {
 public:
  LegacyFingerprintBuilder();
  ~LegacyFingerprintBuilder();
  void Add(std::string_view url, int64_t size, int64_t nsamples, std::string_view checksum);
  std::string Finish();

 private:
  std::unique_ptr<Hasher> h_;
  std::string line_;
};
Result<ParsedEntries> ParseCsv(std::string_view text, const std::string& url);
Result<ParsedEntries> ParseJsonDocument(std::string_view text, const std::string& url);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_SRC_MANIFEST_MANIFEST_INTERNAL_H_
