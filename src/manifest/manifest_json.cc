// JSON document manifests: {"shards": [{...}, ...]} (other top-level keys are
// ignored) or a bare array of shard objects. nlohmann::json keeps no
// positions, so a small scanner finds where each shard object starts to give
// errors a line number.
#include "manifest/manifest_internal.h"

namespace shardstream::internal {
namespace {

// Byte offsets of the objects that are elements of the shard array: the
// top-level array, or the array under the top-level key "shards".
std::vector<size_t> ShardObjectOffsets(std::string_view text) {
  std::vector<size_t> offsets;
  // Per open container: is it an array, and is it the shard array?
  std::vector<std::pair<bool, bool>> stack;
  std::string last_key;  // last string seen at depth 1 followed by ':'
  std::string last_string;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') {
      size_t start = ++i;
      while (i < text.size() && text[i] != '"') i += text[i] == '\\' ? 2 : 1;
      last_string = std::string(text.substr(start, std::min(i, text.size()) - start));
      continue;
    }
    if (c == ':' && stack.size() == 1) last_key = last_string;
    if (c == '{' || c == '[') {
      bool in_shards = !stack.empty() && stack.back().second;
      if (c == '{' && in_shards) offsets.push_back(i);
      bool is_array = c == '[';
      bool shard_array = is_array && ((stack.empty()) ||
                                      (stack.size() == 1 && !stack[0].first &&
                                       last_key == "shards"));
      stack.emplace_back(is_array, shard_array);
    } else if ((c == '}' || c == ']') && !stack.empty()) {
      stack.pop_back();
    }
  }
  return offsets;
}

}  // namespace

Result<ParsedEntries> ParseJsonDocument(std::string_view text, const std::string& url) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return ManifestLineError(url, LineOf(text, e.byte > 0 ? e.byte - 1 : 0),
                             "not valid JSON (" + std::string(e.what()) + ")");
  } catch (const nlohmann::json::exception& e) {  // e.g. a number too large for a double
    return ManifestLineError(url, 1, "not valid JSON (" + std::string(e.what()) + ")");
  }
  const nlohmann::json* shards = &doc;
  if (doc.is_object()) {
    auto it = doc.find("shards");
    if (it == doc.end()) return ManifestLineError(url, 1, "JSON manifest has no \"shards\" key");
    shards = &*it;
  }
  if (!shards->is_array())
    return ManifestLineError(url, 1, "\"shards\" must be an array of shard objects");
  std::vector<size_t> offsets = ShardObjectOffsets(text);
  ParsedEntries out;
  out.entries.reserve(shards->size());
  size_t line = 1;
  size_t prev_offset = 0;
  for (size_t i = 0; i < shards->size(); ++i) {
    // Count newlines incrementally: LineOf per entry would be quadratic.
    if (i < offsets.size()) {
      line += static_cast<size_t>(std::count(text.begin() + prev_offset,
                                             text.begin() + offsets[i], '\n'));
      prev_offset = offsets[i];
    }
    SHARDSTREAM_ASSIGN_OR_RETURN(ShardEntry e, EntryFromJson((*shards)[i], url, line));
    out.entries.push_back(std::move(e));
    out.lines.push_back(line);
  }
  return out;
}

}  // namespace shardstream::internal
