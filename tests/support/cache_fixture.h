// Shared set-up of the shard cache tests: shards with random bytes on local
// disk, presented as "remote" urls (with credentials, to check redaction)
// through a CacheFaultSource, and a cache directory.
#ifndef SHARDSTREAM_TESTS_SUPPORT_CACHE_FIXTURE_H_
#define SHARDSTREAM_TESTS_SUPPORT_CACHE_FIXTURE_H_

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "shardstream/checksum.h"
#include "shardstream/shard_cache.h"
#include "support/cache_fault_source.h"
#include "support/test_util.h"

namespace shardstream::testing {

inline constexpr const char* kRemotePrefix = "http://user:secret@example.invalid/data/";

class CacheTestBase : public ::testing::Test {
 protected:
  void SetUp() override {
    knobs_ = std::make_shared<FaultKnobs>();
    knobs_->fetch_log = tmp_.Join("fetches.log");
    knobs_->remote_prefix = kRemotePrefix;
    knobs_->local_dir = tmp_.Join("remote");
    knobs_->gate_file = tmp_.Join("gate");
    ASSERT_EQ(::mkdir(knobs_->local_dir.c_str(), 0755), 0);
    source_ = std::make_shared<CacheFaultSource>(LocalSource(), knobs_);
  }

  // Writes n shards of `size` random bytes; returns their refs.
  std::vector<ShardRef> MakeShards(int n, size_t size, uint32_t seed = 1) {
    std::mt19937 rng(seed);
    std::vector<ShardRef> refs;
    for (int i = 0; i < n; ++i) {
      std::string data(size, '\0');
      for (auto& c : data) c = static_cast<char>(rng());
      char name[32];
      std::snprintf(name, sizeof(name), "shard-%03d.tar", i);
      WriteFile(knobs_->local_dir + "/" + name, data);
      refs.emplace_back(std::string(kRemotePrefix) + name, static_cast<int64_t>(size),
                        ChecksumOf(data));
      contents_.push_back(std::move(data));
    }
    return refs;
  }

  ShardCacheOptions Options(uint64_t limit) {
    ShardCacheOptions o;
    o.dir = cache_dir();
    o.limit_bytes = limit;
    o.source = source_;
    o.sync_entries = false;  // tests do not need power-loss durability
    o.chunk_size = 64 << 10;
    return o;
  }
  std::unique_ptr<ShardCache> NewCache(ShardCacheOptions o) {
    auto c = ShardCache::Create(std::move(o));
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  std::string cache_dir() const { return tmp_.Join("cache"); }
  std::map<std::string, int> Fetches() const { return CountFetches(knobs_->fetch_log); }
  int TotalFetches() const {
    int n = 0;
    for (auto& [url, count] : Fetches()) n += count;
    return n;
  }

  TempDir tmp_;
  std::shared_ptr<FaultKnobs> knobs_;
  std::shared_ptr<CacheFaultSource> source_;
  std::vector<std::string> contents_;
};

inline Result<std::string> ReadAll(InputStream& in, size_t chunk = 100000) {
  std::string out, buf(chunk, '\0');
  while (true) {
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t got, in.Read(buf.size(), buf.data()));
    if (got == 0) return out;
    out.append(buf.data(), got);
  }
}

inline Result<std::string> ReadThroughCache(ShardCache& cache, const ShardRef& ref) {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto shard, cache.Open(ref));
  return ReadAll(*shard);
}

// Names in the cache directory ending in `suffix`.
std::vector<std::string> FilesWithSuffix(const std::string& dir, const std::string& suffix);
// Bytes of shard data (*.shard and download *.tmp files) in `dir` right now.
uint64_t CacheBytesOnDisk(const std::string& dir);

}  // namespace shardstream::testing

#endif  // SHARDSTREAM_TESTS_SUPPORT_CACHE_FIXTURE_H_
