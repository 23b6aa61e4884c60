// `--cache-dir DIR [--cache-limit SIZE] [--cache-mode rw|ro|off]` for the
// reading subcommands (ls, verify, bench): adds the flags and builds the
// ShardCache they describe. Without --cache-dir the cache is off (shards are
// streamed from their source).
#ifndef SHARDSTREAM_TOOLS_CACHE_FLAGS_H_
#define SHARDSTREAM_TOOLS_CACHE_FLAGS_H_

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "shardstream/byte_size.h"
#include "shardstream/shard_cache.h"

namespace shardstream::tools {

struct CacheFlags {
  std::string dir;
  std::string limit = "100G";
  std::string mode = "rw";
};

inline void AddCacheFlags(CLI::App* sub, CacheFlags* flags) {
  sub->add_option("--cache-dir", flags->dir, "Shard cache directory (default: no cache)");
  sub->add_option("--cache-limit", flags->limit, "Cache size limit, e.g. 500GB or 450GiB")
      ->capture_default_str();
  sub->add_option("--cache-mode", flags->mode, "rw, ro or off")
      ->check(CLI::IsMember({"rw", "ro", "off"}))
      ->capture_default_str();
}

// The cache the flags describe (kOff without --cache-dir). On failure returns
// kConfig for a malformed limit, or what ShardCache::Create returns.
inline Result<std::unique_ptr<ShardCache>> MakeCache(const CacheFlags& flags) {
  ShardCacheOptions options;
  options.dir = flags.dir;
  options.mode = flags.dir.empty() || flags.mode == "off" ? CacheMode::kOff
                 : flags.mode == "ro"                      ? CacheMode::kReadOnly
                                                           : CacheMode::kReadWrite;
  auto limit = ParseByteSize(flags.limit);
  if (!limit.ok()) return Status::Config("bad --cache-limit: " + limit.status().message());
  options.limit_bytes = *limit;
  return ShardCache::Create(options);
}

}  // namespace shardstream::tools

#endif  // SHARDSTREAM_TOOLS_CACHE_FLAGS_H_
