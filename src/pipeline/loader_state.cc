// LoaderState serialization and merging, and the stats line.
#include <cstdio>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "shardstream/loader.h"

namespace shardstream {

std::string LoaderState::ToJson() const {
  nlohmann::json j;
  j["format"] = "shardstream-loader-state";
  j["version"] = 1;
  j["resume"] = nlohmann::json::parse(resume.ToJson());
  nlohmann::json parts = nlohmann::json::array();
  for (const Partial& p : partial) parts.push_back({p.shard, p.sample, p.tokens});
  j["partial"] = parts;
  if (batches_left >= 0) j["batches_left"] = batches_left;
  return j.dump();
}

Result<LoaderState> LoaderState::FromJson(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::Corrupt("loader state: not a JSON object");
  if (j.value("format", "") != "shardstream-loader-state")
    return Status::Corrupt("loader state: missing format \"shardstream-loader-state\"");
  if (!j.contains("version") || !j["version"].is_number_integer())
    return Status::Corrupt("loader state: missing version");
  if (j["version"].get<int>() != 1)
    return Status::Config("loader state: unsupported version " + j["version"].dump());
  if (!j.contains("resume") || !j["resume"].is_object())
    return Status::Corrupt("loader state: missing resume");
  LoaderState s;
  SHARDSTREAM_ASSIGN_OR_RETURN(s.resume, ResumeState::FromJson(j["resume"].dump()));
  if (j.contains("partial")) {
    if (!j["partial"].is_array()) return Status::Corrupt("loader state: partial is not a list");
    for (const auto& p : j["partial"]) {
      if (!p.is_array() || p.size() != 3 || !p[0].is_number_integer() ||
          !p[1].is_number_integer() || !p[2].is_number_integer() || p[2].get<int64_t>() < 0)
        return Status::Corrupt("loader state: a partial entry is not [shard, sample, tokens]");
      s.partial.push_back(Partial{p[0].get<int64_t>(), p[1].get<int64_t>(), p[2].get<int64_t>()});
    }
  }
  if (j.contains("batches_left")) {
    if (!j["batches_left"].is_number_integer() || j["batches_left"].get<int64_t>() < 0)
      return Status::Corrupt("loader state: batches_left is not a count");
    s.batches_left = j["batches_left"].get<int64_t>();
  }
  return s;
}

Result<LoaderState> MergeLoaderStates(const std::vector<LoaderState>& states) {
  std::vector<ResumeState> rs;
  for (const LoaderState& s : states) rs.push_back(s.resume);
  LoaderState out;
  SHARDSTREAM_ASSIGN_OR_RETURN(out.resume, MergeResumeStates(rs));
  for (const LoaderState& s : states)
    out.partial.insert(out.partial.end(), s.partial.begin(), s.partial.end());
  return out;
}

Result<LoaderState> MergeOwnLoaderStates(const std::vector<LoaderState>& states) {
  std::vector<ResumeState> rs;
  for (const LoaderState& s : states) rs.push_back(s.resume);
  LoaderState out;
  SHARDSTREAM_ASSIGN_OR_RETURN(out.resume, IntersectResumeStates(rs));
  std::map<std::pair<int64_t, int64_t>, size_t> seen;  // (shard, sample) -> index in out.partial
  for (const LoaderState& s : states) {
    for (const LoaderState::Partial& p : s.partial) {
      auto [it, fresh] = seen.emplace(std::make_pair(p.shard, p.sample), out.partial.size());
      // Progress only grows: a consumer that restored a partial document
      // it does not own still carries the older count.
      if (fresh)
        out.partial.push_back(p);
      else if (p.tokens > out.partial[it->second].tokens)
        out.partial[it->second] = p;
    }
  }
  return out;
}

std::string LoaderStats::ToString() const {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "loader: epoch %lld, %llu batches, %.1f batches/s, %.0f samples/s, %.1f MB/s, "
                "wait p50 %.0f us p99 %.0f us (%.2f s total), queue %lld/%lld, shuffle %lld/%lld",
                static_cast<long long>(epoch), static_cast<unsigned long long>(batches),
                batches_per_s, samples_per_s, bytes_per_s / 1e6, wait_p50_us, wait_p99_us,
                wait_seconds, static_cast<long long>(queue_depth),
                static_cast<long long>(queue_capacity), static_cast<long long>(shuffle_fill),
                static_cast<long long>(shuffle_capacity));
  std::string s = buf;
  if (cache_hit_rate >= 0) {
    std::snprintf(buf, sizeof(buf), ", cache hits %.0f%%", 100 * cache_hit_rate);
    s += buf;
  }
  if (skipped_samples + skipped_shards > 0)
    s += ", skipped " + std::to_string(skipped_samples) + " samples " +
         std::to_string(skipped_shards) + " shards";
  if (cut_samples > 0)
    s += ", equal batches cut " + std::to_string(cut_samples) + " documents (" +
         std::to_string(cut_tokens) + " tokens)";
  std::snprintf(buf, sizeof(buf), ", pipeline waited %.2f s for readers, %.2f s for the caller",
                reader_wait_seconds, caller_wait_seconds);
  s += buf;
  s += ", ";
  s += HostMemoryKindName(memory_kind);
  return s;
}

}  // namespace shardstream
