// Manifest reading and writing: format dispatch, the checks shared by every
// format, and the JSON Lines writer (the native format).
#include "shardstream/manifest.h"

#include <xxhash.h>

#include <algorithm>
#include <numeric>

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
  internal::FingerprintBuilder b;
  for (const auto& s : shards) b.Add(s.url, s.nsamples);
  return b.Finish();
}

std::string Manifest::LegacyFingerprint() const {
  internal::LegacyFingerprintBuilder b;
  for (const auto& s : shards) b.Add(s.url, s.size, s.nsamples, s.checksum);
  return b.Finish();
}

namespace internal {

FingerprintBuilder::FingerprintBuilder() : h_(std::move(Hasher::Create("xxh3_128")).value()) {}
FingerprintBuilder::~FingerprintBuilder() = default;

void FingerprintBuilder::Add(std::string_view url, int64_t nsamples) {
  // One reused buffer: a million shards would otherwise mean millions of
  // small allocations.
  if (UrlScheme(url) == "pipe") {
    line_.assign(url);
  } else {
    line_.assign(UrlBasename(url));
  }
  line_ += '\t';
  line_ += std::to_string(nsamples);
  line_ += '\n';
  h_->Update(line_);
  ++shards_;
  samples_ = samples_ < 0 || nsamples < 0 ? -1 : samples_ + nsamples;
}

std::string FingerprintBuilder::Finish() {
  return h_->Finish() + ";shards=" + std::to_string(shards_) + ";samples=" + std::to_string(samples_);
}

LegacyFingerprintBuilder::LegacyFingerprintBuilder()
    : h_(std::move(Hasher::Create("xxh3_128")).value()) {}
LegacyFingerprintBuilder::~LegacyFingerprintBuilder() = default;

void LegacyFingerprintBuilder::Add(std::string_view url, int64_t size, int64_t nsamples,
                                   std::string_view checksum) {
  // "url\tsize\tnsamples\tchecksum\n" per shard.
  line_.assign(url);
  line_ += '\t';
  line_ += std::to_string(size);
  line_ += '\t';
  line_ += std::to_string(nsamples);
  line_ += '\t';
  line_ += checksum;
  line_ += '\n';
  h_->Update(line_);
}

std::string LegacyFingerprintBuilder::Finish() { return h_->Finish(); }

uint64_t UrlHash(std::string_view resolved) { return XXH3_64bits(resolved.data(), resolved.size()); }

std::optional<std::pair<size_t, size_t>> FirstDuplicate(
    const std::vector<uint64_t>& hash, const std::function<bool(size_t, size_t)>& same) {
  const size_t n = hash.size();
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return hash[a] != hash[b] ? hash[a] < hash[b] : a < b; });
  std::optional<std::pair<size_t, size_t>> best;
  for (size_t k = 0; k < n;) {
    size_t end = k + 1;
    while (end < n && hash[order[end]] == hash[order[k]]) ++end;
    // A run of equal hashes (in index order): the first later entry that
    // equals an earlier one.
    for (size_t a = k + 1; a < end; ++a)
      for (size_t b = k; b < a; ++b)
        if (same(order[a], order[b])) {
          if (!best || order[a] < best->first) best = std::pair<size_t, size_t>(order[a], order[b]);
          break;
        }
    k = end;
  }
  return best;
}

Status DuplicateUrlError(const std::string& url, const std::string& shard_url, size_t line,
                         size_t first_line) {
  return ManifestLineError(url, line,
                           "duplicate url " + RedactUrl(shard_url) + " (first on line " +
                               std::to_string(first_line) + ")");
}

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

namespace {

// The simple shape of a JSON Lines entry, or false (then the full parser
// decides: it may still be valid, or say what is wrong).
class SimpleScanner {
 public:
  explicit SimpleScanner(std::string_view s) : s_(s) {}

  bool Scan(SimpleLine* out) {
    bool has_url = false, has_size = false, has_count = false, has_sum = false;
    Skip();
    if (!Eat('{')) return false;
    Skip();
    if (Peek() == '}') return false;  // no url: the full parser says so
    for (;;) {
      std::string_view key;
      if (!String(&key)) return false;
      Skip();
      if (!Eat(':')) return false;
      Skip();
      if (key == "url" && !has_url) {
        if (!String(&out->url) || out->url.empty()) return false;
        has_url = true;
      } else if (key == "checksum" && !has_sum) {
        if (!String(&out->checksum)) return false;
        has_sum = true;
      } else if (key == "size" && !has_size) {
        if (!Integer(&out->size)) return false;
        has_size = true;
      } else if (key == "nsamples" && !has_count) {
        if (!Integer(&out->nsamples)) return false;
        has_count = true;
      } else {
        return false;  // another key (an extra), or one given twice
      }
      Skip();
      if (Eat('}')) break;
      if (!Eat(',')) return false;
      Skip();
    }
    Skip();
    return i_ == s_.size() && has_url && has_count;
  }

 private:
  char Peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  bool Eat(char c) {
    if (Peek() != c) return false;
    ++i_;
    return true;
  }
  void Skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t')) ++i_;
  }
  // A string of printable ASCII without escapes.
  bool String(std::string_view* out) {
    if (!Eat('"')) return false;
    const size_t begin = i_;
    for (; i_ < s_.size(); ++i_) {
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        *out = s_.substr(begin, i_ - begin);
        ++i_;
        return true;
      }
      if (c == '\\' || c < 0x20 || c >= 0x80) return false;
    }
    return false;
  }
  // A non-negative integer of at most 18 digits, no leading zero.
  bool Integer(int64_t* out) {
    const size_t begin = i_;
    int64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') v = v * 10 + (s_[i_++] - '0');
    const size_t n = i_ - begin;
    if (n == 0 || n > 18 || (n > 1 && s_[begin] == '0')) return false;
    if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) return false;
    *out = v;
    return true;
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

Result<bool> ParseJsonlLine(std::string_view line, const std::string& url, size_t line_no,
                            SimpleLine* simple, ShardEntry* entry) {
  *simple = SimpleLine();
  if (SimpleScanner(line).Scan(simple)) {
    // Checksum syntax and algorithm: the one check the scan leaves.
    if (simple->checksum.empty() ||
        (simple->checksum.size() == 41 && simple->checksum.substr(0, 9) == "xxh3_128:" &&
         simple->checksum.find_first_not_of("0123456789abcdef", 9) == std::string_view::npos))
      return true;
  }
  json obj = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded()) return ManifestLineError(url, line_no, "not valid JSON");
  SHARDSTREAM_ASSIGN_OR_RETURN(*entry, EntryFromJson(obj, url, line_no));
  return false;
}

Result<ParsedEntries> ParseJsonl(std::string_view text, const std::string& url) {
  ParsedEntries out;
  size_t line_no = 0;
  size_t pos = 0;
  SimpleLine simple;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.remove_suffix(1);
    if (line.empty()) continue;
    ShardEntry e;
    SHARDSTREAM_ASSIGN_OR_RETURN(bool is_simple, ParseJsonlLine(line, url, line_no, &simple, &e));
    if (is_simple) {
      e.url.assign(simple.url);
      e.size = simple.size;
      e.nsamples = simple.nsamples;
      e.checksum.assign(simple.checksum);
    }
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

}  // namespace

namespace internal {
ManifestFormat ManifestFormatByName(const std::string& url) {
  std::string name = UrlBasename(url);
  if (EndsWith(name, ".jsonl") || EndsWith(name, ".ndjson")) return ManifestFormat::kJsonl;
  if (EndsWith(name, ".csv")) return ManifestFormat::kCsv;
  if (EndsWith(name, ".json")) return ManifestFormat::kJson;
  return ManifestFormat::kAuto;
}

ManifestFormat DetectManifestFormat(std::string_view text, const std::string& url) {
  if (ManifestFormat f = ManifestFormatByName(url); f != ManifestFormat::kAuto) return f;
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
}  // namespace internal

Result<Manifest> ParseManifest(std::string_view text, const std::string& url,
                               ManifestFormat format) {
  if (format == ManifestFormat::kAuto) format = internal::DetectManifestFormat(text, url);
  Result<internal::ParsedEntries> result =
      format == ManifestFormat::kCsv    ? internal::ParseCsv(text, url)
      : format == ManifestFormat::kJson ? internal::ParseJsonDocument(text, url)
                                        : internal::ParseJsonl(text, url);
  if (!result.ok()) return result.status();
  internal::ParsedEntries parsed = std::move(result).value();
  Manifest m;
  m.url = url;
  std::string base = UrlDirname(url);
  std::vector<uint64_t> hash(parsed.entries.size());
  for (size_t i = 0; i < parsed.entries.size(); ++i) {
    ShardEntry& e = parsed.entries[i];
    e.resolved = JoinUrl(base, e.url);
    hash[i] = internal::UrlHash(e.resolved);
  }
  const std::vector<ShardEntry>& entries = parsed.entries;
  if (auto dup = internal::FirstDuplicate(
          hash, [&](size_t a, size_t b) { return entries[a].resolved == entries[b].resolved; }))
    return internal::DuplicateUrlError(url, entries[dup->first].url, parsed.lines[dup->first],
                                       parsed.lines[dup->second]);
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
