#include "shardstream/dataset_inputs.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "common/log.h"
#include "shardstream/shard_index.h"
#include "shardstream/tar_reader.h"
#include "shardstream/url.h"

namespace shardstream {
namespace {

std::string LowerPath(std::string_view url) {
  std::string path(url.substr(0, url.find('?')));
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  for (char& c : path) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return path;
}

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Source& SourceOf(const ResolveOptions& o) { return o.source ? *o.source : *DefaultSource(); }

// The manifest url is the shard's name, so a data set's fingerprint (which
// resume states carry) does not depend on where it is mounted.
ShardEntry EntryFor(const std::string& url) {
  ShardEntry e;
  e.url = UrlScheme(url) == "pipe" ? url : UrlBasename(url);
  e.resolved = url;
  return e;
}

// Sidecar indexes are looked for only where "<url>.idx" names one: files,
// http(s) and s3 without a query (a pipe: command must not be run again, a
// presigned url would be broken).
bool MayHaveIndex(const std::string& url) {
  const std::string scheme = UrlScheme(url);
  return url.find('?') == std::string::npos &&
         (scheme == "file" || scheme == "http" || scheme == "https" || scheme == "s3");
}

// The shards of a directory (or an object store prefix), in name order.
Result<std::vector<ShardEntry>> ListShards(const std::string& dir, const ResolveOptions& o) {
  SHARDSTREAM_ASSIGN_OR_RETURN(std::vector<FileInfo> files, SourceOf(o).List(dir));
  std::vector<ShardEntry> out;
  for (const FileInfo& f : files) {
    if (f.is_dir || !IsShardUrl(f.url)) continue;
    // The size stays unknown (the index gives it): a listed symlink's size
    // is its own, not its target's.
    out.push_back(EntryFor(f.url));
  }
  std::sort(out.begin(), out.end(),
            [](const ShardEntry& a, const ShardEntry& b) { return a.resolved < b.resolved; });
  return out;
}

// One input's shards.
Status AddInput(const std::string& input, const ResolveOptions& o, std::vector<ShardEntry>* out) {
  if (input.empty()) return Status::Config("data set: an input is empty");
  if (IsBracePattern(input)) {
    SHARDSTREAM_ASSIGN_OR_RETURN(Manifest m, ManifestFromPattern(input));
    out->insert(out->end(), m.shards.begin(), m.shards.end());
    return Status::OK();
  }
  if (IsShardUrl(input) || UrlScheme(input) == "pipe") {
    out->push_back(EntryFor(input));
    return Status::OK();
  }
  if (!IsManifestUrl(input)) {
    // A directory (or a prefix of an object store), or a manifest without
    // its usual extension.
    auto st = SourceOf(o).Stat(input);
    if (!st.ok() || st->is_dir) {
      auto listed = ListShards(input, o);
      if (listed.ok() && !listed->empty()) {
        out->insert(out->end(), listed->begin(), listed->end());
        return Status::OK();
      }
      // A listing that failed says why (permission, credentials), unless
      // there is simply nothing at that name.
      if (!listed.ok() && (st.ok() || listed.status().code() != StatusCode::kNotFound))
        return listed.status();
      if (st.ok())
        return Status(StatusCode::kNotFound,
                      "data set: no shards (.tar, .tar.zst, .tar.gz, .tgz) in directory " +
                          RedactUrl(input),
                      RedactUrl(input));
      return st.status();
    }
  }
  SHARDSTREAM_ASSIGN_OR_RETURN(Manifest m, ReadManifest(input, o.source));
  out->insert(out->end(), m.shards.begin(), m.shards.end());
  return Status::OK();
}

// Sample counts from sidecar indexes, built for local shards that lack one.
Status LearnCounts(Manifest* m, const ResolveOptions& o) {
  std::vector<size_t> todo;
  for (size_t i = 0; i < m->shards.size(); ++i)
    if (m->shards[i].nsamples < 0) todo.push_back(i);
  if (todo.empty()) return Status::OK();
  std::atomic<size_t> next{0}, built{0}, unknown{0};
  std::mutex mu;
  Status first_error;
  auto work = [&] {
    for (size_t k; (k = next.fetch_add(1)) < todo.size();) {
      ShardEntry& e = m->shards[todo[k]];
      const std::string& url = e.resolved.empty() ? e.url : e.resolved;
      if (!MayHaveIndex(url)) {
        ++unknown;
        continue;
      }
      auto index = ReadSampleIndex(url, o.source);
      const StatusCode code = index.ok() ? StatusCode::kOk : index.status().code();
      if (!index.ok() && code != StatusCode::kNotFound && code != StatusCode::kCorrupt) {
        // A transient or permission error must fail the loader, not make
        // this rank plan without counts while the others plan with them.
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.ok()) first_error = index.status();
        continue;
      }
      if (!index.ok() && o.build_indexes && !LocalPath(url).empty()) {
        TarReaderOptions t;
        t.source = o.source;
        index = BuildSampleIndex(url, t);
        if (!index.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (first_error.ok()) first_error = index.status();
          continue;
        }
        ++built;
        if (Status w = WriteSampleIndex(*index, url, o.source); !w.ok())
          internal::Log().info("data set: could not keep the index of {} ({}); its sample count "
                               "is learned again next time",
                               RedactUrl(url), w.ToString());
      }
      if (!index.ok()) {
        ++unknown;
        continue;
      }
      e.nsamples = static_cast<int64_t>(index->samples.size());
      if (e.size < 0) e.size = static_cast<int64_t>(index->shard_size);
    }
  };
  const size_t n = std::min<size_t>(todo.size(), static_cast<size_t>(std::max(1, o.threads)));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  SHARDSTREAM_RETURN_IF_ERROR(first_error);
  if (built > 0)
    internal::Log().info("data set: counted the samples of {} shards without an index and wrote "
                         "their <shard>.idx sidecars (a manifest avoids this: shardstream manifest)",
                         built.load());
  if (unknown > 0 && o.build_indexes)
    internal::Log().warn("data set: {} shards (remote, pipe: or presigned) have no index, so their sample counts are "
                         "unknown and ranks are balanced by shards, not samples; write a manifest "
                         "(shardstream manifest) or indexes (shardstream index)",
                         unknown.load());
  return Status::OK();
}

}  // namespace

bool IsManifestUrl(std::string_view url) {
  const std::string p = LowerPath(url);
  return EndsWith(p, ".jsonl") || EndsWith(p, ".ndjson") || EndsWith(p, ".csv") ||
         EndsWith(p, ".json");
}

bool IsShardUrl(std::string_view url) {
  const std::string p = LowerPath(url);
  return EndsWith(p, ".tar") || EndsWith(p, ".tar.zst") || EndsWith(p, ".tar.zstd") ||
         EndsWith(p, ".tar.gz") || EndsWith(p, ".tgz");
}

Result<Manifest> ResolveDataset(const std::vector<std::string>& inputs, const ResolveOptions& o) {
  if (inputs.empty())
    return Status::Config("data set: no input given (a manifest, shard, directory or pattern)");
  Manifest m;
  for (const std::string& input : inputs) SHARDSTREAM_RETURN_IF_ERROR(AddInput(input, o, &m.shards));
  m.url = inputs.size() == 1 ? inputs[0] : inputs[0] + " (+" + std::to_string(inputs.size() - 1) + ")";
  if (m.shards.empty()) return Status::Config("data set: the inputs name no shards");
  std::unordered_set<std::string> seen;
  for (const ShardEntry& e : m.shards) {
    const std::string& u = e.resolved.empty() ? e.url : e.resolved;
    if (!seen.insert(u).second)
      return Status::Config("data set: shard " + RedactUrl(u) + " is named twice");
  }
  if (o.learn_counts) SHARDSTREAM_RETURN_IF_ERROR(LearnCounts(&m, o));
  return m;
}

}  // namespace shardstream
