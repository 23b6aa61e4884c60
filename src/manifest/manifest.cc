// Manifest reading and writing. JSON Lines is the native format.
#include "shardstream/manifest.h"

#include <nlohmann/json.hpp>

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
  for (const auto& s : shards) {
    std::string line = s.url + '\t' + std::to_string(s.size) + '\t' +
                       std::to_string(s.nsamples) + '\t' + s.checksum + '\n';
    (*h)->Update(line);
  }
  return (*h)->Finish();
}

namespace {

Status LineError(const std::string& url, size_t line, const std::string& what) {
  return Status(StatusCode::kConfig,
                "manifest " + RedactUrl(url) + " line " + std::to_string(line) + ": " + what,
                RedactUrl(url));
}

Result<ShardEntry> EntryFromJson(const json& obj, const std::string& url, size_t line) {
  if (!obj.is_object()) return LineError(url, line, "expected a JSON object");
  ShardEntry e;
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "url") {
      if (!v.is_string() || v.get<std::string>().empty())
        return LineError(url, line, "'url' must be a non-empty string");
      e.url = v.get<std::string>();
    } else if (k == "size" || k == "nsamples") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0)
        return LineError(url, line, "'" + k + "' must be a non-negative integer");
      (k == "size" ? e.size : e.nsamples) = v.get<int64_t>();
    } else if (k == "checksum") {
      if (!v.is_string()) return LineError(url, line, "'checksum' must be a string");
      e.checksum = v.get<std::string>();
      if (!e.checksum.empty()) {
        auto algo = ParseChecksum(e.checksum);
        if (!algo.ok()) return LineError(url, line, algo.status().message());
      }
    } else {
      e.extra[k] = v.dump();
    }
  }
  if (e.url.empty()) return LineError(url, line, "missing 'url'");
  return e;
}

}  // namespace

Result<Manifest> ParseManifest(std::string_view text, const std::string& url) {
  Manifest m;
  m.url = url;
  std::string base = UrlDirname(url);
  size_t line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty()) continue;
    json obj = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded()) return LineError(url, line_no, "not valid JSON");
    SHARDSTREAM_ASSIGN_OR_RETURN(ShardEntry e, EntryFromJson(obj, url, line_no));
    e.resolved = JoinUrl(base, e.url);
    m.shards.push_back(std::move(e));
  }
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

std::string FormatManifestJsonl(const Manifest& manifest) {
  std::string out;
  for (const auto& s : manifest.shards) {
    // Fixed key order: build the line by hand.
    out += "{\"url\": " + json(s.url).dump();
    if (s.size >= 0) out += ", \"size\": " + std::to_string(s.size);
    if (s.nsamples >= 0) out += ", \"nsamples\": " + std::to_string(s.nsamples);
    if (!s.checksum.empty()) out += ", \"checksum\": " + json(s.checksum).dump();
    for (const auto& [k, v] : s.extra) out += ", " + json(k).dump() + ": " + v;
    out += "}\n";
  }
  return out;
}

Status WriteManifest(const Manifest& manifest, const std::string& url, Source* source) {
  Source* src = source ? source : DefaultSource().get();
  return WriteFileAtomic(*src, url, FormatManifestJsonl(manifest));
}

}  // namespace shardstream
