// One JSON Lines row split into its top-level members without building a
// document: each value is validated (nesting bounded, so hostile input cannot
// exhaust the stack) and handed out as a span of the line.
#ifndef SHARDSTREAM_ROWS_JSON_ROW_H_
#define SHARDSTREAM_ROWS_JSON_ROW_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "shardstream/rows.h"

namespace shardstream::internal {

struct JsonMember {
  std::string_view key;    // between its quotes, still escaped when key_escaped
  std::string_view value;  // a string's body (between its quotes), or the value's text
  size_t value_at = 0;     // offset of `value` in the line
  JsonKind kind = JsonKind::kString;
  bool key_escaped = false;
  bool value_escaped = false;  // a string holding escapes
};

// Parses `line` as one JSON object (surrounding whitespace allowed). On
// failure returns false with *what and *at (the byte in the line) set.
bool ParseJsonRow(std::string_view line, std::vector<JsonMember>* members, std::string* what,
                  size_t* at);

// Appends the UTF-8 text of a validated string body (escapes resolved; a
// lone surrogate becomes U+FFFD).
void UnescapeJson(std::string_view body, std::string* out);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_ROWS_JSON_ROW_H_
