// manifest.json of a checkpoint, checkpoint names, and the read-only side:
// listing, verifying, the `latest` pointer.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "checkpoint/internal.h"
#include "common/log.h"
#include "shardstream/checkpoint.h"
#include "shardstream/checksum.h"
#include "shardstream/url.h"

namespace shardstream {

using json = nlohmann::json;

uint64_t CheckpointManifest::total_bytes() const {
  uint64_t n = 0;
  for (const auto& f : files) n += f.size;
  return n;
}

const CheckpointFile* CheckpointManifest::Find(std::string_view file_name) const {
  for (const auto& f : files)
    if (f.name == file_name) return &f;
  return nullptr;
}

std::string CheckpointName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "ckpt-%06" PRId64, step);
  return buf;
}

std::optional<int64_t> ParseCheckpointName(std::string_view name) {
  constexpr std::string_view kPrefix = "ckpt-";
  if (name.size() < kPrefix.size() + 6 || name.substr(0, kPrefix.size()) != kPrefix)
    return std::nullopt;
  std::string_view digits = name.substr(kPrefix.size());
  if (digits.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (CheckpointName(v) != name) return std::nullopt;  // canonical form only
  return v;
}

std::string FormatCheckpointManifest(const CheckpointManifest& m) {
  json files = json::array();
  for (const auto& f : m.files)
    files.push_back({{"name", f.name}, {"size", f.size}, {"checksum", f.checksum}});
  json meta = json::parse(m.metadata_json, nullptr, false);
  if (meta.is_discarded()) meta = json::object();
  json doc = {{"format", "shardstream-checkpoint"},
              {"version", internal::kCheckpointFormatVersion},
              {"name", m.name},
              {"step", m.step},
              {"time_unix_ms", m.time_unix_ms},
              {"files", files},
              {"metadata", meta}};
  return doc.dump(1) + "\n";
}

Result<CheckpointManifest> ParseCheckpointManifest(std::string_view text, const std::string& url) {
  auto bad = [&](const std::string& what) {
    return Status(StatusCode::kCorrupt, "checkpoint manifest " + RedactUrl(url) + ": " + what,
                  RedactUrl(url));
  };
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return bad("not a JSON object");
  if (doc.value("format", "") != "shardstream-checkpoint") return bad("missing format tag");
  if (!doc.contains("version") || !doc["version"].is_number_integer() ||
      doc["version"].get<int>() != internal::kCheckpointFormatVersion)
    return bad("unsupported version");
  CheckpointManifest m;
  if (!doc.contains("step") || !doc["step"].is_number_integer()) return bad("missing step");
  m.step = doc["step"].get<int64_t>();
  m.name = doc.value("name", "");
  if (ParseCheckpointName(m.name) || m.name.rfind("ckpt-", 0) == 0) {
    if (m.name != CheckpointName(m.step)) return bad("name does not match step");
  } else if (!internal::ValidFileName(m.name) || m.name[0] == '.' || m.step != 0) {
    // A single checkpoint (CommitSingleCheckpoint) is named after its directory.
    return bad("name '" + m.name + "' is neither ckpt-<step> nor a single checkpoint's at step 0");
  }
  m.time_unix_ms = doc.value("time_unix_ms", int64_t{0});
  if (!doc.contains("files") || !doc["files"].is_array()) return bad("missing files");
  for (const auto& f : doc["files"]) {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("size") ||
        !f["size"].is_number_unsigned() || !f.contains("checksum") || !f["checksum"].is_string())
      return bad("bad file entry");
    CheckpointFile cf{f["name"].get<std::string>(), f["size"].get<uint64_t>(),
                      f["checksum"].get<std::string>()};
    if (!internal::ValidFileName(cf.name)) return bad("bad file name '" + cf.name + "'");
    if (!ParseChecksum(cf.checksum).ok()) return bad("bad checksum of " + cf.name);
    m.files.push_back(std::move(cf));
  }
  if (doc.contains("metadata")) {
    if (!doc["metadata"].is_object()) return bad("metadata is not an object");
    m.metadata_json = doc["metadata"].dump();
  }
  return m;
}

Result<CheckpointManifest> ReadCheckpointManifest(Source& source, const std::string& ckpt_url) {
  std::string url = JoinUrl(ckpt_url, internal::kManifestName);
  SHARDSTREAM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(source, url));
  SHARDSTREAM_ASSIGN_OR_RETURN(CheckpointManifest m, ParseCheckpointManifest(text, url));
  if (m.name != UrlBasename(ckpt_url))
    return Status(StatusCode::kCorrupt,
                  "checkpoint manifest " + RedactUrl(url) + " names " + m.name, RedactUrl(url));
  return m;
}

Result<std::vector<CheckpointManifest>> ListCheckpoints(Source& source, const std::string& dir) {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto entries, source.List(dir));
  std::vector<CheckpointManifest> out;
  for (const auto& e : entries) {
    if (!ParseCheckpointName(UrlBasename(e.url))) continue;
    auto m = ReadCheckpointManifest(source, e.url);
    if (!m.ok()) {
      internal::Log().warn("skipping checkpoint {}: {}", RedactUrl(e.url), m.status().ToString());
      continue;
    }
    out.push_back(std::move(*m));
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

Status VerifyCheckpointFile(Source& source, const std::string& url, const CheckpointFile& f,
                            const std::atomic<bool>* cancel) {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto in, source.OpenInputStream(url, 0));
  SHARDSTREAM_ASSIGN_OR_RETURN(auto hasher, Hasher::Create(internal::kChecksumAlgorithm));
  std::string buf(1 << 20, '\0');
  uint64_t total = 0;
  while (true) {
    if (cancel && cancel->load()) return Status::Cancelled("verification of " + RedactUrl(url));
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t got, in->Read(buf.size(), buf.data()));
    if (got == 0) break;
    hasher->Update(buf.data(), got);
    total += got;
  }
  if (total != f.size)
    return Status(StatusCode::kChecksum,
                  RedactUrl(url) + ": size " + std::to_string(total) + ", manifest says " +
                      std::to_string(f.size),
                  RedactUrl(url), static_cast<int64_t>(std::min(total, f.size)));
  std::string sum = hasher->Finish();
  if (sum != f.checksum)
    return Status(StatusCode::kChecksum,
                  RedactUrl(url) + ": checksum " + sum + ", manifest says " + f.checksum,
                  RedactUrl(url), 0);
  return Status::OK();
}

Status VerifyCheckpoint(Source& source, const std::string& ckpt_url, const CheckpointManifest& m) {
  for (const auto& f : m.files)
    SHARDSTREAM_RETURN_IF_ERROR(VerifyCheckpointFile(source, JoinUrl(ckpt_url, f.name), f, nullptr));
  return Status::OK();
}

Result<CheckpointManifest> MakeCheckpointManifest(std::string name, int64_t step,
                                                  std::vector<CheckpointFile> files,
                                                  std::string metadata_json) {
  CheckpointManifest m;
  m.name = std::move(name);
  m.step = step;
  m.time_unix_ms = internal::NowUnixMs();
  m.files = std::move(files);
  m.metadata_json = metadata_json.empty() ? "{}" : std::move(metadata_json);
  auto back = ParseCheckpointManifest(FormatCheckpointManifest(m), m.name);
  if (!back.ok()) return Status::Config(back.status().message());
  return m;
}

Result<CheckpointManifest> CheckIntactCheckpoint(Source& source, const std::string& ckpt_url,
                                                 bool verify, const std::string& required_file) {
  SHARDSTREAM_ASSIGN_OR_RETURN(CheckpointManifest m, ReadCheckpointManifest(source, ckpt_url));
  if (!required_file.empty() && m.Find(required_file) == nullptr)
    return Status(StatusCode::kCorrupt,
                  "checkpoint " + RedactUrl(ckpt_url) + " has no " + required_file,
                  RedactUrl(ckpt_url));
  for (const CheckpointFile& f : m.files) {
    const std::string url = JoinUrl(ckpt_url, f.name);
    SHARDSTREAM_ASSIGN_OR_RETURN(FileInfo info, source.Stat(url));
    if (static_cast<uint64_t>(info.size) != f.size)
      return Status(StatusCode::kChecksum,
                    RedactUrl(url) + ": size " + std::to_string(info.size) +
                        ", manifest says " + std::to_string(f.size),
                    RedactUrl(url));
  }
  if (verify) SHARDSTREAM_RETURN_IF_ERROR(VerifyCheckpoint(source, ckpt_url, m));
  return m;
}

Result<NewestCheckpoint> FindNewestIntact(Source& source, const std::string& dir, bool verify,
                                          const std::string& required_file) {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto entries, source.List(dir));
  std::vector<std::pair<int64_t, std::string>> steps;
  for (const auto& e : entries)
    if (auto step = ParseCheckpointName(UrlBasename(e.url)); step && e.is_dir)
      steps.emplace_back(*step, e.url);
  std::sort(steps.rbegin(), steps.rend());
  NewestCheckpoint out;
  for (const auto& [step, url] : steps) {
    auto m = CheckIntactCheckpoint(source, url, verify, required_file);
    if (!m.ok()) {
      out.skipped.push_back(UrlBasename(url) + ": " + m.status().ToString());
      continue;
    }
    out.url = url;
    out.manifest = std::move(*m);
    break;
  }
  return out;
}

Result<std::string> ReadLatestPointer(Source& source, const std::string& dir) {
  std::string url = JoinUrl(dir, internal::kLatestName);
  SHARDSTREAM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(source, url));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (!ParseCheckpointName(text))
    return Status(StatusCode::kCorrupt, RedactUrl(url) + " does not name a checkpoint",
                  RedactUrl(url), 0);
  return text;
}

}  // namespace shardstream
