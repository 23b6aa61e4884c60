// Manifest reading and writing: format dispatch, the checks shared by every
// format, and the JSON Lines writer (the native format).
#include "shardstream/manifest.h"

#include <algorithm>
#include <unordered_map>

#include "manifest/manifest_internal.h"
#include "shardstream/checksum.h"
#include "shardstream/url.h"

namespace shardstream {

using json = nlohmann::json;

int64_t Manifest::TotalSamples() const {
  int64_t total = 0;
  for (const auto& s : shards) {
    if (s.nsamples < 0) return -1;
    total += s.nsamples;
  }
  return total;
}

std::string Manifest::Fingerprint() const {
  auto h = Hasher::Create("xxh3_128");
  std::string line;
  int64_t samples = 0;
  for (const auto& s : shards) {
    line.assign(UrlScheme(s.url) == "pipe" ? s.url : UrlBasename(s.url));
    line += '\t';
    line += std::to_string(s.nsamples);
    line += '\n';
    (*h)->Update(line);
    samples = samples < 0 || s.nsamples < 0 ? -1 : samples + s.nsamples;
  }
  return (*h)->Finish() + ";shards=" + std::to_string(shards.size()) +
         ";samples=" + std::to_string(samples);
}

std::string Manifest::LegacyFingerprint() const {
  // Hashes "url\tsize\tnsamples\tchecksum\n" per shard. One reused buffer:
  // a million shards would otherwise mean millions of small allocations.
  auto h = Hasher::Create("xxh3_128");
  std::string line;
  for (const auto& s : shards) {
    line.assign(s.url);
    line += '\t';
    line += std::to_string(s.size);
    line += '\t';
    line += std::to_string(s.nsamples);
    line += '\t';
    line += s.checksum;
    line += '\n';
    (*h)->Update(line);
  }
  return (*h)->Finish();
}

namespace internal {

Status ManifestLineError(const std::string& url, size_t line, const std::string& what) {
  return Status(StatusCode::kConfig,
                "manifest " + RedactUrl(url) + " line " + std::to_string(line) + ": " + what,
                RedactUrl(url));
}

size_t LineOf(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + offset, '\n'));
}

Status ValidateEntry(const ShardEntry& e, const std::string& url, size_t line) {
  if (e.url.empty()) return ManifestLineError(url, line, "missing 'url'");
  if (e.nsamples < 0)
    return ManifestLineError(url, line, "missing 'nsamples' for " + RedactUrl(e.url));
  if (!e.checksum.empty()) {
    auto algo = ParseChecksum(e.checksum);
    if (!algo.ok()) return ManifestLineError(url, line, algo.status().message());
  }
  return Status::OK();
}

Result<ShardEntry> EntryFromJson(const json& obj, const std::string& url, size_t line) {
  if (!obj.is_object()) return ManifestLineError(url, line, "expected a JSON object");
  ShardEntry e;
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "url") {
      if (!v.is_string() || v.get<std::string>().empty())
        return ManifestLineError(url, line, "'url' must be a non-empty string");
      e.url = v.get<std::string>();
    } else if (k == "size" || k == "nsamples") {
      if (!v.is_number_integer() || (v.is_number_integer() && v.get<int64_t>() < 0))
        return ManifestLineError(url, line, "'" + k + "' must be a non-negative integer, got " +
                                                v.dump());
      (k == "size" ? e.size : e.nsamples) = v.get<int64_t>();
    } else if (k == "checksum") {
      if (!v.is_string()) return ManifestLineError(url, line, "'checksum' must be a string");
      e.checksum = v.get<std::string>();
    } else {
      e.extra[k] = v.dump();
    }
  }
  SHARDSTREAM_RETURN_IF_ERROR(ValidateEntry(e, url, line));
  return e;
}

Result<ParsedEntries> ParseJsonl(std::string_view text, const std::string& url) {
  ParsedEntries out;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.remove_suffix(1);
    if (line.empty()) continue;
    json obj = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded()) return ManifestLineError(url, line_no, "not valid JSON");
    SHARDSTREAM_ASSIGN_OR_RETURN(ShardEntry e, EntryFromJson(obj, url, line_no));
    out.entries.push_back(std::move(e));
    out.lines.push_back(line_no);
  }
  return out;
}

}  // namespace internal

namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

ManifestFormat DetectFormat(std::string_view text, const std::string& url) {
  std::string name = UrlBasename(url);
  if (EndsWith(name, ".jsonl") || EndsWith(name, ".ndjson")) return ManifestFormat::kJsonl;
  if (EndsWith(name, ".csv")) return ManifestFormat::kCsv;
  if (EndsWith(name, ".json")) return ManifestFormat::kJson;
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return ManifestFormat::kJsonl;
  if (text[first] == '[') return ManifestFormat::kJson;
  if (text[first] != '{') return ManifestFormat::kCsv;
  // '{' starts both JSON Lines and a document: a first line that is a whole
  // object with a "url" is JSON Lines.
  size_t nl = text.find('\n', first);
  json obj = json::parse(text.substr(first, nl == std::string_view::npos ? nl : nl - first),
                         nullptr, false);
  if (!obj.is_discarded() && obj.is_object() && obj.contains("url")) return ManifestFormat::kJsonl;
  return ManifestFormat::kJson;
}

}  // namespace

Result<Manifest> ParseManifest(std::string_view text, const std::string& url,
                               ManifestFormat format) {
  if (format == ManifestFormat::kAuto) format = DetectFormat(text, url);
  Result<internal::ParsedEntries> result =
      format == ManifestFormat::kCsv    ? internal::ParseCsv(text, url)
      : format == ManifestFormat::kJson ? internal::ParseJsonDocument(text, url)
                                        : internal::ParseJsonl(text, url);
  if (!result.ok()) return result.status();
  internal::ParsedEntries parsed = std::move(result).value();
  Manifest m;
  m.url = url;
  std::string base = UrlDirname(url);
  std::unordered_map<std::string, size_t> seen;  // resolved url -> line
  seen.reserve(parsed.entries.size());
  for (size_t i = 0; i < parsed.entries.size(); ++i) {
    ShardEntry& e = parsed.entries[i];
    e.resolved = JoinUrl(base, e.url);
    auto [it, inserted] = seen.emplace(e.resolved, parsed.lines[i]);
    if (!inserted)
      return internal::ManifestLineError(url, parsed.lines[i],
                                         "duplicate url " + RedactUrl(e.url) +
                                             " (first on line " + std::to_string(it->second) + ")");
  }
  m.shards = std::move(parsed.entries);
  if (m.shards.empty())
    return Status(StatusCode::kConfig, "manifest " + RedactUrl(url) + " lists no shards",
                  RedactUrl(url));
  return m;
}

Result<Manifest> ReadManifest(const std::string& url, Source* source) {
  Source* src = source ? source : DefaultSource().get();
  SHARDSTREAM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(*src, url));
  return ParseManifest(text, url);
}

Result<Manifest> LoadManifest(const std::string& manifest_or_pattern, Source* source) {
  if (IsBracePattern(manifest_or_pattern)) return ManifestFromPattern(manifest_or_pattern);
  return ReadManifest(manifest_or_pattern, source);
}

namespace {
// A JSON string literal. Invalid UTF-8 (a url built in memory from raw file
// names) becomes U+FFFD rather than an exception escaping the library.
std::string Quote(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}
}  // namespace

std::string FormatManifestJsonl(const Manifest& manifest) {
  std::string out;
  for (const auto& s : manifest.shards) {
    // Fixed key order: build the line by hand.
    out += "{\"url\": " + Quote(s.url);
    if (s.size >= 0) out += ", \"size\": " + std::to_string(s.size);
    if (s.nsamples >= 0) out += ", \"nsamples\": " + std::to_string(s.nsamples);
    if (!s.checksum.empty()) out += ", \"checksum\": " + Quote(s.checksum);
    for (const auto& [k, v] : s.extra) out += ", " + Quote(k) + ": " + v;
    out += "}\n";
  }
  return out;
}

Status WriteManifest(const Manifest& manifest, const std::string& url, Source* source) {
  Source* src = source ? source : DefaultSource().get();
  return WriteFileAtomic(*src, url, FormatManifestJsonl(manifest));
}

}  // namespace shardstream
