// The shard cache over real HTTP (our fault-injecting loopback server) and S3
// (moto, auth enforced): one download per shard for 8 processes (the server's
// request log is the proof), a process killed with SIGKILL mid-download, 1,000
// connection resets under cache + tar reader, prompt shutdown of a stalled
// download, and no secret in logs or errors with debug logging on.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "common/log_capture.h"
#include "shardstream/checksum.h"
#include "shardstream/http_source.h"
#include "shardstream/s3.h"
#include "shardstream/shard_cache.h"
#include "shardstream/tar_reader.h"
#include "support/cache_fixture.h"
#include "support/http_server.h"
#include "support/tar_fixtures.h"
#include "support/test_util.h"

namespace shardstream::testing {
namespace {

using Clock = std::chrono::steady_clock;

struct Shard {
  std::string name;   // "shard-003.tar"
  std::string bytes;  // the tar file
  std::vector<std::pair<std::string, std::string>> samples;  // key, payload
};

// n tar shards of `per_shard` samples (two fields each, random sizes up to
// max_field bytes), written under root.
std::vector<Shard> MakeTarShards(const std::string& root, int n, int per_shard,
                                 size_t max_field, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::vector<Shard> out;
  for (int i = 0; i < n; ++i) {
    Shard s;
    char name[32];
    std::snprintf(name, sizeof(name), "shard-%03d.tar", i);
    s.name = name;
    TarBuilder tar;
    for (int k = 0; k < per_shard; ++k) {
      std::string key = "s" + std::to_string(i) + "_" + std::to_string(k);
      std::string payload(1 + rng() % max_field, '\0');
      for (auto& c : payload) c = static_cast<char>(rng());
      tar.File(key + ".bin", payload).File(key + ".cls", std::to_string(k % 10));
      s.samples.emplace_back(key, payload);
    }
    tar.End();
    s.bytes = tar.bytes();
    WriteFile(root + "/" + s.name, s.bytes);
    out.push_back(std::move(s));
  }
  return out;
}

// A manifest of the shards with their http urls, sizes and checksums.
std::string WriteHttpManifest(const std::string& path, const HttpTestServer& server,
                              const std::vector<Shard>& shards) {
  std::string text;
  for (const auto& s : shards) {
    text += "{\"url\": \"" + server.Url("/" + s.name) + "\", \"size\": " +
            std::to_string(s.bytes.size()) + ", \"nsamples\": " +
            std::to_string(s.samples.size()) + ", \"checksum\": \"" + ChecksumOf(s.bytes) +
            "\"}\n";
  }
  WriteFile(path, text);
  return path;
}

// GET requests per path (answered with a body) in the server's log.
std::map<std::string, int> GetsByPath(const HttpTestServer& server) {
  std::map<std::string, int> out;
  for (const auto& r : server.Requests())
    if (r.value("method", "") == "GET" && r.value("path", "").rfind("/shard-", 0) == 0) out[r["path"].get<std::string>()]++;
  return out;
}

// Every sample of `ref`, read through the cache and the tar reader.
Result<std::vector<std::pair<std::string, std::string>>> ReadSamples(ShardCache& cache,
                                                                     const ShardRef& ref) {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto shard, cache.Open(ref));
  SHARDSTREAM_ASSIGN_OR_RETURN(auto reader,
                               TarReader::Open(std::unique_ptr<InputStream>(std::move(shard))));
  std::vector<std::pair<std::string, std::string>> out;
  Sample s;
  while (true) {
    SHARDSTREAM_ASSIGN_OR_RETURN(bool got, reader->Next(&s));
    if (!got) return out;
    for (const Field& f : s.fields)
      if (f.name == "bin") out.emplace_back(s.key, std::string(f.data));
  }
}

TEST(RemoteCacheTest, CliReadsUrlsAndManifestsThroughTheCache) {
  TempDir root, work;
  auto shards = MakeTarShards(root.path(), 2, 25, 4 << 10);
  HttpTestServer server(root.path());
  std::string manifest = WriteHttpManifest(work.Join("m.jsonl"), server, shards);
  std::string cache = work.Join("cache");
  std::string out;
  ASSERT_EQ(RunCommand(CliPath() + " ls --json --cache-dir " + cache + " " + manifest, &out), 0) << out;
  std::vector<std::string> keys;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object()) keys.push_back(j["key"]);
  }
  std::vector<std::string> want;
  for (const auto& s : shards)
    for (const auto& [key, payload] : s.samples) want.push_back(key);
  EXPECT_EQ(keys, want);
  EXPECT_EQ(GetsByPath(server).size(), shards.size());

  // The second epoch comes from the cache: no request reaches the server.
  server.ClearLog();
  ASSERT_EQ(RunCommand(CliPath() + " ls --cache-dir " + cache + " " + manifest + " 2>&1", &out), 0);
  EXPECT_NE(out.find("2 hits"), std::string::npos) << out;
  EXPECT_TRUE(GetsByPath(server).empty());

  // bench: run 1 fills a fresh cache, the later runs fetch nothing.
  std::string url = server.Url("/" + shards[0].name);
  ASSERT_EQ(RunCommand(CliPath() + " bench --json --no-external --runs 3 --cache-dir " +
                           work.Join("cache2") + " " + url, &out), 0) << out;
  auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(j["samples"], shards[0].samples.size());
  EXPECT_EQ(j["later_runs_source_bytes"], 0) << out;
  EXPECT_EQ(j["cache"]["misses"], 1) << out;
  EXPECT_GT(j["cache_fill_gbps"].get<double>(), 0);

  // Without --cache-dir, straight from the server; a bad limit is refused.
  ASSERT_EQ(RunCommand(CliPath() + " ls " + url + " 2>/dev/null", &out), 0);
  EXPECT_NE(out.find(shards[0].samples[0].first), std::string::npos);
  EXPECT_NE(RunCommand(CliPath() + " ls --cache-dir " + cache + " --cache-limit lots " + url +
                       " 2>&1", &out), 0);
  EXPECT_NE(out.find("--cache-limit"), std::string::npos) << out;
}

TEST(RemoteCacheTest, EightCliProcessesDownloadEachShardOnce) {
  TempDir root, work;
  auto shards = MakeTarShards(root.path(), 6, 40, 16 << 10);
  HttpTestServer server(root.path());
  std::string manifest = WriteHttpManifest(work.Join("m.jsonl"), server, shards);
  uint64_t total = 0;
  for (const auto& s : shards) total += s.bytes.size();
  const uint64_t limit = total + total / 4;
  std::string cache = work.Join("cache");
  ASSERT_EQ(RunCommand("mkdir -p " + cache), 0);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> max_usage{0};
  std::thread monitor([&] {
    while (!stop) {
      uint64_t now = CacheBytesOnDisk(cache);
      if (now > max_usage) max_usage = now;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  std::string script;
  for (int p = 0; p < 8; ++p) {
    script += CliPath() + " verify --json --threads 3 --cache-dir " + cache + " --cache-limit " +
              std::to_string(limit) + " " + manifest + " > " + work.Join("out" + std::to_string(p)) +
              " 2>&1 & ";
  }
  script += "wait";
  int rc = RunCommand(script);
  stop = true;
  monitor.join();
  ASSERT_EQ(rc, 0);
  for (int p = 0; p < 8; ++p) {
    std::string out = ReadFile(work.Join("out" + std::to_string(p)));
    auto j = nlohmann::json::parse(out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << "process " << p << ": " << out;
    EXPECT_EQ(j["shards"], shards.size()) << out;
    EXPECT_TRUE(j["bad"].empty()) << "process " << p << ": " << out;  // identical bytes everywhere
  }
  auto gets = GetsByPath(server);
  EXPECT_EQ(gets.size(), shards.size());
  for (const auto& s : shards) EXPECT_EQ(gets["/" + s.name], 1) << s.name << " downloaded more than once";
  EXPECT_LE(max_usage.load(), limit);
  EXPECT_GT(max_usage.load(), 0u);
}

TEST(RemoteCacheTest, ProcessKilledMidDownloadIsCleanedUpByTheNextRun) {
  TempDir root, work;
  auto shards = MakeTarShards(root.path(), 1, 64, 64 << 10);
  HttpTestServer server(root.path());
  std::string manifest = WriteHttpManifest(work.Join("m.jsonl"), server, shards);
  std::string cache = work.Join("cache");
  // The first transfer stalls half way: the downloader is killed then.
  server.AddFault({{"kind", "stall"}, {"after", shards[0].bytes.size() / 2}, {"seconds", 30}});
  {
    ChildProcess child({CliPath(), "verify", manifest, "--cache-dir", cache, "--cache-limit", "1G"});
    bool temporary = false;
    for (auto deadline = Clock::now() + std::chrono::seconds(20); Clock::now() < deadline;) {
      auto entries = ListCacheEntries(cache);
      if (entries.ok())
        for (const auto& e : *entries) temporary |= e.temporary && e.size > 0;
      if (temporary) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(temporary) << "no download in progress seen";
    ASSERT_EQ(::kill(child.pid(), SIGKILL), 0);
  }  // reaped
  server.ClearFaults();
  std::string out;
  ASSERT_EQ(RunCommand(CliPath() + " verify " + manifest + " --cache-dir " + cache + " 2>&1", &out), 0)
      << out;
  auto entries = ListCacheEntries(cache);
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_FALSE((*entries)[0].temporary);
  EXPECT_EQ((*entries)[0].checksum, ChecksumOf(shards[0].bytes));
  EXPECT_EQ(ReadFile(cache + "/" + (*entries)[0].key + ".shard"), shards[0].bytes);
}

TEST(RemoteCacheTest, ThousandConnectionResetsLoseAndRepeatNoSample) {
  TempDir root;
  auto shards = MakeTarShards(root.path(), 12, 30, 6 << 10);
  HttpTestServer server(root.path());
  constexpr int kResets = 1000;
  server.AddFault({{"kind", "drop"}, {"random", true}, {"count", kResets}});
  HttpOptions ho;
  ho.initial_backoff_s = 0.0002;
  ho.max_backoff_s = 0.002;
  ho.max_retries = 30;
  auto http = NewHttpSource(ho);
  auto drops = [&] {
    int n = 0;
    for (const auto& r : server.Requests()) n += r.contains("fault") && r["fault"].is_string();
    return n;
  };
  int epochs = 0;
  // Each epoch reads the whole data set into a fresh cache directory, until
  // the server has reset 1,000 connections.
  while (drops() < kResets && epochs < 60) {
    TempDir dir;
    ShardCacheOptions o;
    o.dir = dir.path();
    o.limit_bytes = 1 << 30;
    o.source = http;
    o.sync_entries = false;
    o.chunk_size = 16 << 10;
    auto cache = ShardCache::Create(o);
    ASSERT_TRUE(cache.ok()) << cache.status();
    for (const auto& s : shards) {
      ShardRef ref(server.Url("/" + s.name), static_cast<int64_t>(s.bytes.size()), ChecksumOf(s.bytes));
      auto got = ReadSamples(**cache, ref);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(*got, s.samples) << s.name << " epoch " << epochs;  // each sample once, identical
    }
    epochs++;
  }
  EXPECT_EQ(drops(), kResets);
}

TEST(RemoteCacheTest, DestroyingTheCacheStopsAStalledHttpDownloadPromptly) {
  TempDir root, dir;
  auto shards = MakeTarShards(root.path(), 1, 40, 32 << 10);
  HttpTestServer server(root.path());
  server.AddFault({{"kind", "stall"}, {"after", 100000}, {"seconds", 30}});
  ShardCacheOptions o;
  o.dir = dir.path();
  o.limit_bytes = 1 << 30;
  o.source = NewHttpSource();
  o.sync_entries = false;
  auto cache = ShardCache::Create(o);
  ASSERT_TRUE(cache.ok());
  auto shard = (*cache)->Open(ShardRef(server.Url("/" + shards[0].name)));
  ASSERT_TRUE(shard.ok()) << shard.status();
  std::string buf(50000, '\0');
  auto got = (*shard)->Read(buf.size(), buf.data());
  ASSERT_TRUE(got.ok()) << got.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the download is now stalled
  auto t0 = Clock::now();
  cache->reset();
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(s, 2.0) << "the pool waited for the stalled transfer";
  auto left = ListCacheEntries(dir.path());
  ASSERT_TRUE(left.ok());
  for (const auto& e : *left) EXPECT_FALSE(e.temporary) << "temporary left behind";
}

TEST(RemoteCacheTest, NoSecretInLogsOrErrorsWithDebugLogging) {
  TempDir root, dir;
  auto shards = MakeTarShards(root.path(), 2, 20, 8 << 10);
  HttpTestServer server(root.path());
  MotoServer moto;
  const std::string password = "pw-Sup3rS3cret";
  std::vector<std::string> errors;
  internal::ScopedLogCapture log;  // debug level while alive
  {
    // http with user:password@, through retries, a reset and a missing shard.
    server.AddFault({{"kind", "status"}, {"code", 503}, {"count", 2}});
    server.AddFault({{"kind", "drop"}, {"after", 5000}});
    HttpOptions ho;
    ho.initial_backoff_s = 0.001;
    ho.max_retries = 3;
    ShardCacheOptions o;
    o.dir = dir.path();
    o.limit_bytes = 1 << 30;
    o.source = NewHttpSource(ho);
    o.sync_entries = false;
    auto cache = ShardCache::Create(o);
    ASSERT_TRUE(cache.ok());
    std::string base = "http://user:" + password + "@127.0.0.1:" + std::to_string(server.port());
    auto good = ReadSamples(**cache, ShardRef(base + "/" + shards[0].name + "?token=" + password));
    ASSERT_TRUE(good.ok()) << good.status();
    auto missing = ReadSamples(**cache, ShardRef(base + "/missing.tar"));
    ASSERT_FALSE(missing.ok());
    errors.push_back(missing.status().ToString());
    ShardRef wrong(base + "/" + shards[1].name, static_cast<int64_t>(shards[1].bytes.size()),
                   "xxh3_128:00000000000000000000000000000000");
    auto bad = ReadSamples(**cache, wrong);
    ASSERT_FALSE(bad.ok());
    errors.push_back(bad.status().ToString());
  }
  {
    // s3 through moto: the right keys, then a wrong secret.
    S3Options so;
    so.endpoint = moto.endpoint();
    so.region = "us-east-1";
    so.access_key = moto.access_key();
    so.secret_key = moto.secret_key();
    so.http.initial_backoff_s = 0.001;
    auto client = S3Client::Make(so);
    ASSERT_TRUE(client.ok());
    ASSERT_TRUE((*client)->CreateBucket("data").ok());
    ASSERT_TRUE((*client)->Put("s3://data/" + shards[0].name, shards[0].bytes).ok());
    ShardCacheOptions o;
    o.dir = dir.Join("s3cache");
    o.limit_bytes = 1 << 30;
    o.source = NewS3Source(*client);
    o.sync_entries = false;
    auto cache = ShardCache::Create(o);
    ASSERT_TRUE(cache.ok());
    auto good = ReadSamples(**cache, ShardRef("s3://data/" + shards[0].name));
    ASSERT_TRUE(good.ok()) << good.status();
    EXPECT_EQ(*good, shards[0].samples);
    so.secret_key = "wrong-" + password;
    o.source = NewS3Source(*S3Client::Make(so));
    o.dir = dir.Join("s3cache2");
    auto cache2 = ShardCache::Create(o);
    auto denied = ReadSamples(**cache2, ShardRef("s3://data/" + shards[0].name));
    ASSERT_FALSE(denied.ok());
    EXPECT_EQ(denied.status().code(), StatusCode::kAuth) << denied.status();
    errors.push_back(denied.status().ToString());
  }
  std::string text = log.Text();
  EXPECT_NE(text.find("http"), std::string::npos) << "no debug lines captured";
  for (const std::string& secret : {password, moto.secret_key()}) {
    EXPECT_EQ(text.find(secret), std::string::npos) << "secret in the log:\n" << text;
    for (const auto& e : errors) EXPECT_EQ(e.find(secret), std::string::npos) << e;
  }
  for (const auto& e : errors) EXPECT_FALSE(e.empty());
}

}  // namespace
}  // namespace shardstream::testing
