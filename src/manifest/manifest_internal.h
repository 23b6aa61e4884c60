// Pieces shared by the manifest parsers: every format produces entries with
// the line each came from, and one place validates fields and finishes the
// manifest (url resolution, duplicates, emptiness).
#ifndef SHARDSTREAM_SRC_MANIFEST_MANIFEST_INTERNAL_H_
#define SHARDSTREAM_SRC_MANIFEST_MANIFEST_INTERNAL_H_

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

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

// The 1-based line of byte `offset` in `text`.
size_t LineOf(std::string_view text, size_t offset);

Result<ParsedEntries> ParseJsonl(std::string_view text, const std::string& url);
Result<ParsedEntries> ParseCsv(std::string_view text, const std::string& url);
Result<ParsedEntries> ParseJsonDocument(std::string_view text, const std::string& url);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_SRC_MANIFEST_MANIFEST_INTERNAL_H_
