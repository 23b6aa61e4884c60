// Shard arguments of the reading subcommands (ls, verify, bench): each
// argument is a shard url (local path, file://, http(s)://, s3://, pipe:) or a
// manifest (.jsonl, .csv, .json), which stands for its shards with their sizes
// and checksums. Shards are opened through the ShardCache the --cache-* flags
// describe (off by default), so remote data sets can be read, verified and
// measured from a shell, cached on the node or not.
#ifndef SHARDSTREAM_TOOLS_SHARD_ARGS_H_
#define SHARDSTREAM_TOOLS_SHARD_ARGS_H_

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardstream/dataset_inputs.h"
#include "shardstream/manifest.h"
#include "shardstream/shard_cache.h"
#include "shardstream/tar_reader.h"
#include "shardstream/url.h"
#include "tools/cache_flags.h"

namespace shardstream::tools {

// The shards named by `args`, manifests expanded in order.
inline Result<std::vector<ShardRef>> ExpandShardArgs(const std::vector<std::string>& args) {
  std::vector<ShardRef> out;
  for (const auto& a : args) {
    if (!IsManifestUrl(a)) {
      out.emplace_back(a);
      continue;
    }
    SHARDSTREAM_ASSIGN_OR_RETURN(Manifest m, ReadManifest(a));
    for (const auto& e : m.shards) out.push_back(ShardRef::FromEntry(e));
  }
  return out;
}

// A reader of `ref`: through `cache` when it is on, else straight from the
// source (DefaultSource()).
inline Result<std::unique_ptr<TarReader>> OpenShardReader(ShardCache* cache, const ShardRef& ref,
                                                          const TarReaderOptions& options) {
  if (cache == nullptr || cache->options().mode == CacheMode::kOff)
    return TarReader::Open(ref.url, options);
  SHARDSTREAM_ASSIGN_OR_RETURN(auto shard, cache->Open(ref));
  return TarReader::Open(std::unique_ptr<InputStream>(std::move(shard)), options);
}

// Builds the cache from the flags, printing the error with `tool` on failure.
inline std::unique_ptr<ShardCache> MakeCacheOrReport(const CacheFlags& flags,
                                                     const char* tool) {
  auto cache = MakeCache(flags);
  if (!cache.ok()) {
    std::cerr << tool << ": " << cache.status() << "\n";
    return nullptr;
  }
  return std::move(*cache);
}

// One line of cache statistics for stderr (empty when the cache is off).
// Waits first for downloads still running: a reader may be done before its
// shard's download is (the tar end marker comes before the padding), and
// exiting would cancel the download and leave the shard uncached.
inline std::string CacheSummary(ShardCache* cache) {
  if (cache == nullptr || cache->options().mode == CacheMode::kOff) return "";
  cache->WaitIdle();
  CacheStats s = cache->stats();
  return "cache: " + std::to_string(s.hits) + " hits, " + std::to_string(s.misses) +
         " misses, " + std::to_string(s.joined) + " joined, " + std::to_string(s.uncached) +
         " uncached; " + std::to_string(s.bytes_from_source) + " bytes from the source, " +
         std::to_string(s.bytes_from_cache) + " from the cache";
}

inline nlohmann::json CacheStatsJson(ShardCache* cache) {
  if (cache == nullptr || cache->options().mode == CacheMode::kOff) return nullptr;
  cache->WaitIdle();
  CacheStats s = cache->stats();
  return {{"hits", s.hits},
          {"misses", s.misses},
          {"joined", s.joined},
          {"uncached", s.uncached},
          {"retries", s.retries},
          {"evictions", s.evictions},
          {"bytes_from_source", s.bytes_from_source},
          {"bytes_from_cache", s.bytes_from_cache}};
}

}  // namespace shardstream::tools

#endif  // SHARDSTREAM_TOOLS_SHARD_ARGS_H_
