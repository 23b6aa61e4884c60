// CSV manifests: a header row naming the columns (url and nsamples required;
// size and checksum optional; any other column kept as an extra string
// field), then one shard per row. Quoting follows RFC 4180.
#include <limits>

#include "manifest/manifest_internal.h"
#include "shardstream/url.h"

namespace shardstream::internal {
namespace {

struct Record {
  std::vector<std::string> fields;
  size_t line = 0;  // line where the record starts
};

// Splits the next record off `text` at `pos`. Quoted fields may hold commas,
// quotes ("") and newlines, so records are not lines.
Result<bool> NextRecord(std::string_view text, size_t& pos, size_t& line, const std::string& url,
                        Record* rec) {
  rec->fields.clear();
  // Skip blank lines.
  while (pos < text.size() && (text[pos] == '\n' || text[pos] == '\r')) {
    if (text[pos] == '\n') ++line;
    ++pos;
  }
  if (pos >= text.size()) return false;
  rec->line = line;
  std::string field;
  bool quoted = false;
  bool was_quoted = false;
  while (pos < text.size()) {
    char c = text[pos++];
    if (quoted) {
      if (c == '"') {
        if (pos < text.size() && text[pos] == '"') {
          field.push_back('"');
          ++pos;
        } else {
          quoted = false;
        }
      } else {
        if (c == '\n') ++line;
        field.push_back(c);
      }
      continue;
    }
    if (c == '"') {
      if (!field.empty() || was_quoted)
        return ManifestLineError(url, line, "a quote inside an unquoted CSV field");
      quoted = was_quoted = true;
    } else if (c == ',') {
      rec->fields.push_back(std::move(field));
      field.clear();
      was_quoted = false;
    } else if (c == '\n') {
      ++line;
      break;
    } else if (c == '\r') {
      // part of \r\n
    } else {
      if (was_quoted) return ManifestLineError(url, line, "text after a closing quote in CSV");
      field.push_back(c);
    }
  }
  if (quoted) return ManifestLineError(url, rec->line, "unterminated quoted CSV field");
  rec->fields.push_back(std::move(field));
  return true;
}

std::string Trim(std::string s) {
  size_t b = s.find_first_not_of(" \t");
  size_t e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// A non-negative decimal integer; anything else (sign, spaces, overflow) fails.
Result<int64_t> ParseCount(const std::string& cell, const std::string& column,
                           const std::string& url, size_t line) {
  auto bad = [&] {
    return ManifestLineError(url, line, "'" + column + "' must be a non-negative integer, got '" +
                                            cell + "'");
  };
  if (cell.empty()) return bad();
  int64_t v = 0;
  for (char c : cell) {
    if (c < '0' || c > '9') return bad();
    if (v > (std::numeric_limits<int64_t>::max() - (c - '0')) / 10) return bad();
    v = v * 10 + (c - '0');
  }
  return v;
}

bool ValidUtf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

}  // namespace

Result<ParsedEntries> ParseCsv(std::string_view text, const std::string& url) {
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // UTF-8 BOM
  size_t pos = 0;
  size_t line = 1;
  Record rec;
  SHARDSTREAM_ASSIGN_OR_RETURN(bool any, NextRecord(text, pos, line, url, &rec));
  ParsedEntries out;
  if (!any) return out;
  std::vector<std::string> header;
  int url_col = -1, nsamples_col = -1;
  for (size_t i = 0; i < rec.fields.size(); ++i) {
    std::string name = Trim(rec.fields[i]);
    if (name.empty()) return ManifestLineError(url, rec.line, "empty CSV column name");
    if (!ValidUtf8(name)) return ManifestLineError(url, rec.line, "CSV header is not valid UTF-8");
    for (const auto& h : header)
      if (h == name) return ManifestLineError(url, rec.line, "CSV column '" + name + "' twice");
    if (name == "url") url_col = static_cast<int>(i);
    if (name == "nsamples") nsamples_col = static_cast<int>(i);
    header.push_back(std::move(name));
  }
  if (url_col < 0 || nsamples_col < 0)
    return ManifestLineError(url, rec.line,
                             std::string("CSV header lacks the '") +
                                 (url_col < 0 ? "url" : "nsamples") +
                                 "' column (expected url,size,nsamples,checksum)");
  while (true) {
    SHARDSTREAM_ASSIGN_OR_RETURN(bool more, NextRecord(text, pos, line, url, &rec));
    if (!more) break;
    if (rec.fields.size() != header.size())
      return ManifestLineError(url, rec.line,
                               "expected " + std::to_string(header.size()) + " CSV fields, got " +
                                   std::to_string(rec.fields.size()));
    ShardEntry e;
    for (size_t i = 0; i < header.size(); ++i) {
      const std::string& name = header[i];
      // Everything must survive being written back as JSON Lines.
      if (!ValidUtf8(rec.fields[i]))
        return ManifestLineError(url, rec.line, "CSV field '" + name + "' is not valid UTF-8");
      std::string cell = Trim(rec.fields[i]);
      if (name == "url") {
        e.url = cell;
      } else if (name == "nsamples") {
        if (cell.empty()) continue;  // reported as missing below
        SHARDSTREAM_ASSIGN_OR_RETURN(e.nsamples, ParseCount(cell, name, url, rec.line));
      } else if (name == "size") {
        if (cell.empty()) continue;  // unknown
        SHARDSTREAM_ASSIGN_OR_RETURN(e.size, ParseCount(cell, name, url, rec.line));
      } else if (name == "checksum") {
        e.checksum = cell;
      } else {
        e.extra[name] = nlohmann::json(rec.fields[i]).dump();
      }
    }
    SHARDSTREAM_RETURN_IF_ERROR(ValidateEntry(e, url, rec.line));
    out.entries.push_back(std::move(e));
    out.lines.push_back(rec.line);
  }
  return out;
}

}  // namespace shardstream::internal
