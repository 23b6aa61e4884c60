// `shardstream cache stats|ls|evict|clear` against a directory filled by the
// library.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "shardstream/shard_cache.h"
#include "support/cache_fixture.h"

namespace shardstream::testing {
namespace {

using json = nlohmann::json;

class ShardCacheCliTest : public CacheTestBase {
 protected:
  void Fill(const std::vector<ShardRef>& refs) {
    auto cache = NewCache(Options(10 << 20));
    for (const auto& r : refs) ASSERT_TRUE(ReadThroughCache(*cache, r).ok());
    cache->WaitIdle();
  }
  int Cli(const std::string& args, std::string* out) {
    return RunCommand(CliPath() + " cache " + args, out);
  }
};

TEST_F(ShardCacheCliTest, StatsAndLsDescribeTheDirectory) {
  auto refs = MakeShards(3, 300000);
  Fill(refs);
  std::string out;
  ASSERT_EQ(Cli("stats --dir " + cache_dir() + " --json", &out), 0) << out;
  json stats = json::parse(out);
  EXPECT_EQ(stats["entries"], 3);
  EXPECT_EQ(stats["bytes"], 900000);
  EXPECT_EQ(stats["temporaries"], 0);

  ASSERT_EQ(Cli("ls --dir " + cache_dir() + " --json", &out), 0) << out;
  json ls = json::parse(out);
  ASSERT_EQ(ls.size(), 3u);
  EXPECT_EQ(ls[0]["size"], 300000);
  EXPECT_EQ(ls[0]["checksum"], refs[0].checksum);
  EXPECT_NE(ls[0]["url"].get<std::string>().find("example.invalid/data/shard-000.tar"),
            std::string::npos);
  EXPECT_EQ(out.find("secret"), std::string::npos);

  ASSERT_EQ(Cli("ls --dir " + cache_dir(), &out), 0) << out;
  EXPECT_NE(out.find("shard-002.tar"), std::string::npos) << out;
}

TEST_F(ShardCacheCliTest, EvictToSizeThenByUrlThenClear) {
  auto refs = MakeShards(4, 300000);
  Fill(refs);
  std::string out;
  ASSERT_EQ(Cli("evict --dir " + cache_dir() + " --to 700K --json", &out), 0) << out;
  json report = json::parse(out);
  EXPECT_EQ(report["evicted"], 2);
  EXPECT_EQ(report["bytes_left"], 600000);
  EXPECT_EQ(FilesWithSuffix(cache_dir(), ".shard").size(), 2u);

  ASSERT_EQ(Cli("evict --dir " + cache_dir() + " '" + refs[3].url + "'", &out), 0) << out;
  EXPECT_EQ(FilesWithSuffix(cache_dir(), ".shard").size(), 1u);
  EXPECT_NE(Cli("evict --dir " + cache_dir() + " '" + refs[3].url + "'", &out), 0) << out;
  EXPECT_NE(out.find("not cached"), std::string::npos) << out;

  ASSERT_EQ(Cli("clear --dir " + cache_dir(), &out), 0) << out;
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".shard").empty());
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".json").empty());
}

TEST_F(ShardCacheCliTest, RefusesADirectoryThatIsNotACache) {
  WriteFile(tmp_.Join("precious.txt"), "keep me");
  std::string out;
  EXPECT_EQ(Cli("clear --dir " + tmp_.path(), &out), 1) << out;
  EXPECT_NE(out.find("not a shardstream cache"), std::string::npos) << out;
  EXPECT_EQ(ReadFile(tmp_.Join("precious.txt")), "keep me");
  EXPECT_EQ(Cli("stats --dir " + tmp_.Join("missing"), &out), 1) << out;
  EXPECT_EQ(Cli("evict --dir " + cache_dir() + " --to lots", &out), 1) << out;
}

}  // namespace
}  // namespace shardstream::testing
