// `--cache-dir DIR [--cache-limit SIZE] [--cache-mode rw|ro|off]` for the
// reading subcommands (ls, verify, bench): adds the flags and builds the
// ShardCache they describe. Without --cache-dir the cache is off (shards are
// streamed from their source).
#ifndef SHARDSTREAM_TOOLS_CACHE_FLAGS_H_
#define SHARDSTREAM_TOOLS_CACHE_FLAGS_H_

#include <CLI/CLI.hpp>

#include <cmath>
#include <memory>
#include <string>

#include "shardstream/shard_cache.h"

namespace shardstream::tools {

struct CacheFlags {
  std::string dir;
  std::string limit = "100G";
  std::string mode = "rw";
};

inline void AddCacheFlags(CLI::App* sub, CacheFlags* flags) {
  sub->add_option("--cache-dir", flags->dir, "Shard cache directory (default: no cache)");
  sub->add_option("--cache-limit", flags->limit, "Cache size limit, e.g. 500G")
      ->capture_default_str();
  sub->add_option("--cache-mode", flags->mode, "rw, ro or off")
      ->check(CLI::IsMember({"rw", "ro", "off"}))
      ->capture_default_str();
}

// "123", "10K", "1.5G", "2GiB", "500MB" (powers of 1024). False if malformed.
inline bool ParseByteSize(const std::string& text, uint64_t* out) {
  size_t end = 0;
  double value;
  try {
    value = std::stod(text, &end);
  } catch (...) {
    return false;
  }
  std::string unit = text.substr(end);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  static const std::string kUnits = "KMGTP";
  double scale = 1;
  if (!unit.empty() && unit != "B") {
    size_t i = kUnits.find(unit);
    if (unit.size() != 1 || i == std::string::npos) return false;
    scale = std::pow(1024.0, static_cast<double>(i + 1));
  }
  if (value < 0) return false;
  *out = static_cast<uint64_t>(value * scale);
  return true;
}

// The cache the flags describe (kOff without --cache-dir). On failure returns
// kConfig for a malformed limit, or what ShardCache::Create returns.
inline Result<std::unique_ptr<ShardCache>> MakeCache(const CacheFlags& flags) {
  ShardCacheOptions options;
  options.dir = flags.dir;
  options.mode = flags.dir.empty() || flags.mode == "off" ? CacheMode::kOff
                 : flags.mode == "ro"                      ? CacheMode::kReadOnly
                                                           : CacheMode::kReadWrite;
  if (!ParseByteSize(flags.limit, &options.limit_bytes))
    return Status::Config("bad --cache-limit '" + flags.limit + "' (e.g. 500G)");
  return ShardCache::Create(options);
}

}  // namespace shardstream::tools

#endif  // SHARDSTREAM_TOOLS_CACHE_FLAGS_H_
