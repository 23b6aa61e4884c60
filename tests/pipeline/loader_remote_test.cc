// The Loader over http:// through ranged parts (transfer.h), against our
// fault-injecting loopback server: an epoch delivers every sample exactly once
// under resets, truncations, 503 storms, stalls and hedges all at once, with
// and without a cache; a shard whose object changes between parts is skipped
// and counted under skip_shard; a store that stalls everything fails in a
// bounded time, naming the url.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>

#include "shardstream/http_source.h"
#include "shardstream/loader.h"
#include "shardstream/shard_cache.h"
#include "shardstream/transfer.h"
#include "support/http_server.h"
#include "support/loader_fixture.h"
#include "support/test_util.h"
#include "support/transfer_options.h"

namespace shardstream {
namespace {

using testing::DatasetSpec;
using testing::HttpTestServer;
using testing::ScopedTransferOptions;
using testing::TempDir;
using Clock = std::chrono::steady_clock;

constexpr int kShards = 8;
constexpr int kPerShard = 24;

class LoaderRemoteTest : public ::testing::Test {
 protected:
  LoaderRemoteTest()
      // 24 samples of ~40 KiB a shard: about 15 parts of 64 KiB each.
      : data_(testing::WriteDataset(root_.path(),
                                    DatasetSpec{kShards, kPerShard, false, 300, 40 << 10})),
        server_(root_.path()),
        options_([](TransferOptions& o) {
          o.part_size = 64 << 10;
          o.parts_per_stream = 6;
          o.stall_s = 0.4;
          o.host_stall_s = 1.2;
          o.hedge_factor = 3;
          o.hedge_min_s = 0.1;
        }) {}

  std::shared_ptr<HttpSource> Http() {
    HttpOptions o;
    o.initial_backoff_s = 0.001;
    o.max_backoff_s = 0.02;
    o.max_retry_after_s = 0.05;
    o.max_retries = 12;
    return NewHttpSource(o);
  }
  LoaderOptions Options(Source* source) {
    LoaderOptions o = testing::FieldOptions(server_.Url("/manifest.jsonl"));
    o.source = source;
    o.seed = 5;
    return o;
  }
  int Faulted() const {
    int n = 0;
    for (const auto& r : server_.Requests()) n += r.contains("fault") && r["fault"].is_string();
    return n;
  }

  TempDir root_;
  testing::Dataset data_;
  HttpTestServer server_;
  ScopedTransferOptions options_;
};

TEST_F(LoaderRemoteTest, AnEpochIsExactlyOnceUnderEveryTransferFaultAtOnce) {
  for (bool cached : {false, true}) {
    SCOPED_TRACE(cached ? "with a cache" : "without a cache");
    server_.ClearFaults();
    server_.ClearLog();
    server_.AddFault(nlohmann::json::array({
        {{"kind", "drop"}, {"random", true}, {"count", 25}},
        {{"kind", "truncate"}, {"after", 3000}, {"count", 10}},
        {{"kind", "status"}, {"code", 503}, {"retry_after", 0}, {"count", 20}},
        {{"kind", "stall"}, {"after", 1000}, {"seconds", 3}, {"count", 4}},
        {{"kind", "none"}, {"count", 5}},  // some pass untouched between
        {{"kind", "stall"}, {"after", 20000}, {"seconds", 3}, {"count", 4}},
    }));
    auto http = Http();
    TempDir cache_dir;
    LoaderOptions o = Options(http.get());
    if (cached) {
      ShardCacheOptions co;
      co.dir = cache_dir.path();
      co.limit_bytes = 1 << 30;
      co.source = http;
      auto cache = ShardCache::Create(co);
      ASSERT_TRUE(cache.ok()) << cache.status();
      o.cache = std::move(*cache);
    }
    auto before = GetTransferStats();
    auto loader = Loader::Create(o);
    ASSERT_TRUE(loader.ok()) << loader.status();
    auto ids = testing::DrainIds(loader->get());
    std::map<int64_t, int> seen;
    for (int64_t id : ids) seen[id]++;
    EXPECT_EQ(ids.size(), static_cast<size_t>(data_.samples));
    EXPECT_EQ(seen.size(), static_cast<size_t>(data_.samples));
    for (auto& [id, n] : seen) EXPECT_EQ(n, 1) << "sample " << id;
    auto after = GetTransferStats();
    EXPECT_GT(after.parts, before.parts);  // read in parts, not one GET a shard
    EXPECT_GE(after.retries - before.retries, 40u);
    EXPECT_GE(after.throttles - before.throttles, 20u);
    EXPECT_GE(Faulted(), 60);
    EXPECT_EQ((*loader)->stats().skipped_shards, 0u);
  }
}

TEST_F(LoaderRemoteTest, AShardChangedBetweenPartsIsSkippedAndCountedUnderSkipShard) {
  // The third request for shard 2 (a part after the first GET) sees a new
  // version of the object.
  server_.AddFault({{"kind", "none"}, {"path", "/shard-000002.tar"}, {"count", 2}});
  server_.AddFault({{"kind", "change_etag"}, {"path", "/shard-000002.tar"}});
  auto http = Http();
  LoaderOptions o = Options(http.get());
  o.error_policy = ErrorPolicy::kSkipShard;
  auto loader = Loader::Create(o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  auto ids = testing::DrainIds(loader->get());
  std::map<int64_t, int> seen;
  for (int64_t id : ids) seen[id]++;
  for (auto& [id, n] : seen) EXPECT_EQ(n, 1) << "sample " << id;
  // Every other shard whole; of shard 2 at most what came before the change.
  for (int s = 0; s < kShards; ++s) {
    if (s == 2) continue;
    for (int i = 0; i < kPerShard; ++i) EXPECT_EQ(seen.count(s * kPerShard + i), 1u) << s << "/" << i;
  }
  EXPECT_LT(ids.size(), static_cast<size_t>(data_.samples));
  EXPECT_EQ((*loader)->stats().skipped_shards, 1u);

  // Without skip_shard the same change is an error naming the shard.
  server_.ClearFaults();
  server_.AddFault({{"kind", "none"}, {"path", "/shard-000002.tar"}, {"count", 2}});
  server_.AddFault({{"kind", "change_etag"}, {"path", "/shard-000002.tar"}});
  o.error_policy = ErrorPolicy::kRaise;
  auto failing = *Loader::Create(o);
  Status err = testing::FirstError(failing.get());
  EXPECT_FALSE(err.ok());
  EXPECT_NE(err.ToString().find("shard-000002.tar"), std::string::npos) << err;
  EXPECT_NE(err.ToString().find("changed"), std::string::npos) << err;
}

TEST_F(LoaderRemoteTest, AStoreThatStallsEverythingFailsInBoundedTimeNamingTheUrl) {
  // By default one stream gives up after (max_retries + 1) * stall_s (45 s),
  // and every stream to a host that has sent nothing for host_stall_s (30 s)
  // at its next stall: within a minute however many lanes wait in turn.
  EXPECT_LE((HttpOptions().max_retries + 1) * TransferOptions().stall_s, 60.0);
  EXPECT_LE(TransferOptions().host_stall_s + 3 * TransferOptions().stall_s, 60.0);
  // Here: stall_s 0.4 s and 12 retries (5.2 s a stream), host_stall_s 1.2 s.
  auto http = Http();
  LoaderOptions o = Options(http.get());
  // The manifest and indexes come through; every shard byte stalls.
  for (int s = 0; s < kShards; ++s) {
    char path[64];
    std::snprintf(path, sizeof(path), "/shard-%06d.tar", s);
    server_.AddFault({{"kind", "stall"}, {"path", path}, {"after", 0}, {"seconds", 600},
                      {"count", -1}});
  }
  for (bool cached : {false, true}) {
    SCOPED_TRACE(cached ? "with a cache" : "without a cache");
    TempDir cache_dir;
    if (cached) {
      ShardCacheOptions co;
      co.dir = cache_dir.path();
      co.limit_bytes = 1 << 30;
      co.source = http;
      o.cache = std::move(*ShardCache::Create(co));
    }
    auto start = Clock::now();
    auto loader = Loader::Create(o);
    ASSERT_TRUE(loader.ok()) << loader.status();
    Status err = testing::FirstError(loader->get());  // never an epoch from a stalled store
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_EQ(err.code(), StatusCode::kUnavailable) << err;
    EXPECT_NE(err.ToString().find(server_.Url("/shard-")), std::string::npos) << err;
    EXPECT_NE(err.ToString().find("every request stalls"), std::string::npos) << err;
    // Sooner than one stream's own retries: the host's silence ends them all.
    EXPECT_GE(took, 0.4) << err;
    EXPECT_LT(took, 5.2) << err;
  }
  // The streams' stalled GETs end on their own, soon.
  for (int i = 0; i < 500 && GetTransferStats().connections > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(GetTransferStats().connections, 0);
}

}  // namespace
}  // namespace shardstream
