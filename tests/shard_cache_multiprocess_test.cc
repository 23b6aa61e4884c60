// ShardCache shared by several real processes (fork): one download per shard
// per node, the limit held at every moment, pins that cross processes, and
// recovery after a downloader is killed with SIGKILL.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <thread>

#include "shardstream/shard_cache.h"
#include "support/cache_fixture.h"

namespace shardstream::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Runs `fn` in a child process that exits with its return value. The child
// touches nothing of the parent's gtest state.
pid_t Spawn(const std::function<int()>& fn) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 1;
    try {
      rc = fn();
    } catch (...) {
    }
    ::_exit(rc);
  }
  return pid;
}

int WaitExit(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool WaitForFile(const std::string& path, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (::access(path.c_str(), F_OK) != 0) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Samples the bytes in the cache directory until stopped; keeps the maximum.
class UsageMonitor {
 public:
  explicit UsageMonitor(std::string dir)
      : thread_([this, dir = std::move(dir)] {
          while (!stop_) {
            // Under the cache's directory lock, so that the scan sees one
            // consistent state (files are renamed and unlinked under it).
            int fd = ::open((dir + "/.dir.lock").c_str(), O_RDONLY | O_CLOEXEC);
            if (fd >= 0) ::flock(fd, LOCK_EX);
            uint64_t now = CacheBytesOnDisk(dir);
            if (fd >= 0) ::close(fd);
            if (now > max_) max_ = now;
            samples_++;
            std::this_thread::sleep_for(std::chrono::microseconds(500));
          }
        }) {}
  ~UsageMonitor() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  uint64_t max() const { return max_; }
  int samples() const { return samples_; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> max_{0};
  std::atomic<int> samples_{0};
  std::thread thread_;
};

class ShardCacheMultiProcessTest : public CacheTestBase {
 protected:
  // Child body: reads every shard (starting at a different one per child),
  // writes "<url> <checksum>" lines to result-<index>; odd children also
  // prefetch what comes next.
  int ReadAllShards(int index, const std::vector<ShardRef>& refs, uint64_t limit) {
    if (!WaitForFile(tmp_.Join("go"), std::chrono::seconds(10))) return 2;
    auto options = Options(limit);
    options.download_threads = 2;
    options.prefetch_lookahead = 2;
    auto cache = ShardCache::Create(options);
    if (!cache.ok()) return 3;
    std::ofstream out(tmp_.Join("result-" + std::to_string(index)));
    size_t n = refs.size();
    for (size_t k = 0; k < n; ++k) {
      // Pairs of processes start on the same shard: one downloads, one joins.
      size_t i = (k + static_cast<size_t>(index / 2)) % n;
      if (index % 2 == 1) {
        std::vector<ShardRef> next;
        for (size_t j = 1; j <= 2; ++j) next.push_back(refs[(i + j) % n]);
        (*cache)->Prefetch(next);
      }
      auto data = ReadThroughCache(**cache, refs[i]);
      if (!data.ok()) {
        out << "error " << data.status().ToString() << "\n";
        return 4;
      }
      out << refs[i].url << " " << ChecksumOf(*data) << "\n";
    }
    (*cache)->WaitIdle();
    CacheStats s = (*cache)->stats();
    out << "stats " << s.misses + s.prefetches << " " << s.joined << "\n";
    return 0;
  }

  // Returns the sums over processes of (downloads started, downloads joined).
  std::pair<int, int> CheckResults(int processes, const std::vector<ShardRef>& refs) {
    std::pair<int, int> totals{0, 0};
    for (int p = 0; p < processes; ++p) {
      std::ifstream in(tmp_.Join("result-" + std::to_string(p)));
      std::map<std::string, std::string> got;
      std::string url, sum;
      while (in >> url >> sum) {
        if (url == "stats") {
          totals.first += std::stoi(sum);
          int joined = 0;
          in >> joined;
          totals.second += joined;
        } else {
          got[url] = sum;
        }
      }
      EXPECT_EQ(got.size(), refs.size()) << "process " << p << ": "
                                         << ReadFile(tmp_.Join("result-" + std::to_string(p)));
      for (const auto& r : refs) EXPECT_EQ(got[r.url], r.checksum) << "process " << p;
    }
    return totals;
  }
};

TEST_F(ShardCacheMultiProcessTest, EightProcessesFetchEachShardOnce) {
  auto refs = MakeShards(8, 2 << 20);
  const uint64_t limit = (16 << 20) + 4096;
  knobs_->delay_us = 1000;  // ~35 ms per shard: downloads overlap between processes
  knobs_->max_read = 64 << 10;
  std::vector<pid_t> pids;
  for (int p = 0; p < 8; ++p) pids.push_back(Spawn([&, p] { return ReadAllShards(p, refs, limit); }));
  UsageMonitor monitor(cache_dir());
  WriteFile(tmp_.Join("go"), "");
  for (pid_t pid : pids) EXPECT_EQ(WaitExit(pid), 0);
  monitor.Stop();
  auto [started, joined] = CheckResults(8, refs);
  EXPECT_EQ(started, 8);
  EXPECT_GE(joined, 1);  // some reader streamed another process's download
  auto fetches = Fetches();
  EXPECT_EQ(fetches.size(), refs.size());
  for (const auto& r : refs) EXPECT_EQ(fetches[r.url], 1) << r.url;
  EXPECT_LE(monitor.max(), limit);
  EXPECT_GT(monitor.samples(), 10);
  EXPECT_EQ(FilesWithSuffix(cache_dir(), ".shard").size(), 8u);
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".tmp").empty());
}

TEST_F(ShardCacheMultiProcessTest, EightProcessesNeverExceedATightLimit) {
  auto refs = MakeShards(8, 1 << 20);
  const uint64_t limit = 3 << 20;  // three of eight shards fit
  knobs_->delay_us = 300;
  knobs_->max_read = 64 << 10;
  std::vector<pid_t> pids;
  for (int p = 0; p < 8; ++p) pids.push_back(Spawn([&, p] { return ReadAllShards(p, refs, limit); }));
  UsageMonitor monitor(cache_dir());
  WriteFile(tmp_.Join("go"), "");
  for (pid_t pid : pids) EXPECT_EQ(WaitExit(pid), 0);
  monitor.Stop();
  CheckResults(8, refs);
  EXPECT_LE(monitor.max(), limit);
  EXPECT_LE(CacheBytesOnDisk(cache_dir()), limit);
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".tmp").empty());
}

TEST_F(ShardCacheMultiProcessTest, WithoutFlockDuplicatesButNeverCorrupts) {
  auto refs = MakeShards(6, 1 << 20);
  const uint64_t limit = 4 << 20;
  knobs_->delay_us = 300;
  knobs_->max_read = 64 << 10;
  ::setenv("SHARDSTREAM_CACHE_NO_FLOCK", "1", 1);
  std::vector<pid_t> pids;
  for (int p = 0; p < 6; ++p) pids.push_back(Spawn([&, p] { return ReadAllShards(p, refs, limit); }));
  ::unsetenv("SHARDSTREAM_CACHE_NO_FLOCK");
  WriteFile(tmp_.Join("go"), "");
  for (pid_t pid : pids) EXPECT_EQ(WaitExit(pid), 0);
  CheckResults(6, refs);
  EXPECT_GE(TotalFetches(), 6);
  // Whatever was published is complete and verified.
  for (const auto& r : refs) {
    std::string path = cache_dir() + "/" + CacheKey(r.url) + ".shard";
    if (::access(path.c_str(), F_OK) == 0) EXPECT_EQ(ChecksumOf(ReadFile(path)), r.checksum);
  }
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".tmp").empty());
}

TEST_F(ShardCacheMultiProcessTest, KilledDownloaderIsRecoveredAndCleanedUp) {
  auto refs = MakeShards(1, 2 << 20);
  pid_t child = Spawn([&] {
    knobs_->gate_after = 512 << 10;  // this process's source stalls for ever
    auto cache = ShardCache::Create(Options(64 << 20));
    if (!cache.ok()) return 3;
    auto shard = (*cache)->Open(refs[0]);
    if (!shard.ok()) return 4;
    std::string buf(100000, '\0');
    if (!(*shard)->Read(buf.size(), buf.data()).ok()) return 5;
    WriteFile(tmp_.Join("ready"), "");
    ::pause();
    return 0;
  });
  ASSERT_TRUE(WaitForFile(tmp_.Join("ready"), std::chrono::seconds(10)));
  // Wait until the child has written all it can (the gate).
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (CacheBytesOnDisk(cache_dir()) < (512u << 10) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(FilesWithSuffix(cache_dir(), ".tmp").size(), 1u);

  // A live download survives another process's cleanup, and is joined.
  auto cache = NewCache(Options(64 << 20));
  ASSERT_EQ(FilesWithSuffix(cache_dir(), ".tmp").size(), 1u);
  auto shard = cache->Open(refs[0]);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(cache->stats().joined, 1u);
  std::string head(300000, '\0');
  size_t got = 0;
  while (got < head.size()) {
    auto n = (*shard)->Read(head.size() - got, head.data() + got);
    ASSERT_TRUE(n.ok()) << n.status();
    got += *n;
  }
  EXPECT_EQ(head, contents_[0].substr(0, head.size()));
  EXPECT_EQ(TotalFetches(), 1);

  ASSERT_EQ(::kill(child, SIGKILL), 0);
  EXPECT_EQ(WaitExit(child), 128 + SIGKILL);
  // The reader notices its downloader died, takes over, and finishes.
  auto rest = ReadAll(**shard);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(head + *rest, contents_[0]);
  cache->WaitIdle();
  EXPECT_EQ(TotalFetches(), 2);
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".tmp").empty());
  auto entry = ReadFile(cache_dir() + "/" + CacheKey(refs[0].url) + ".shard");
  EXPECT_EQ(ChecksumOf(entry), refs[0].checksum);
}

TEST_F(ShardCacheMultiProcessTest, NextRunRemovesTemporaryOfKilledProcess) {
  auto refs = MakeShards(1, 1 << 20);
  pid_t child = Spawn([&] {
    knobs_->gate_after = 256 << 10;
    auto cache = ShardCache::Create(Options(64 << 20));
    if (!cache.ok()) return 3;
    (*cache)->Prefetch(refs);
    ::pause();
    return 0;
  });
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (CacheBytesOnDisk(cache_dir()) < (256u << 10) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  EXPECT_EQ(WaitExit(child), 128 + SIGKILL);
  ASSERT_EQ(FilesWithSuffix(cache_dir(), ".tmp").size(), 1u);
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".shard").empty());

  auto cache = NewCache(Options(64 << 20));  // the next run
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".tmp").empty());
  auto data = ReadThroughCache(*cache, refs[0]);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, contents_[0]);
  cache->WaitIdle();
  EXPECT_EQ(FilesWithSuffix(cache_dir(), ".shard").size(), 1u);
}

TEST_F(ShardCacheMultiProcessTest, EntryPinnedByAnotherProcessIsNotEvicted) {
  auto refs = MakeShards(5, 1 << 20);
  const uint64_t limit = 2 << 20;
  auto cache = NewCache(Options(limit));
  ASSERT_TRUE(ReadThroughCache(*cache, refs[0]).ok());
  cache->WaitIdle();
  pid_t child = Spawn([&] {
    auto c = ShardCache::Create(Options(limit));
    if (!c.ok()) return 3;
    auto shard = (*c)->Open(refs[0]);
    if (!shard.ok() || !(*shard)->hit()) return 4;
    WriteFile(tmp_.Join("pinned"), "");
    if (!WaitForFile(tmp_.Join("release"), std::chrono::seconds(20))) return 5;
    auto data = ReadAll(**shard);
    return data.ok() && *data == contents_[0] ? 0 : 6;
  });
  ASSERT_TRUE(WaitForFile(tmp_.Join("pinned"), std::chrono::seconds(10)));
  const std::string pinned_entry = cache_dir() + "/" + CacheKey(refs[0].url) + ".shard";
  for (int i = 1; i <= 3; ++i) {
    auto data = ReadThroughCache(*cache, refs[i]);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(*data, contents_[i]);
    cache->WaitIdle();
    EXPECT_EQ(::access(pinned_entry.c_str(), F_OK), 0) << "evicted while pinned, step " << i;
    EXPECT_LE(CacheBytesOnDisk(cache_dir()), limit);
  }
  EXPECT_EQ(cache->Evict(refs[0].url).code(), StatusCode::kUnavailable);
  auto list = ListCacheEntries(cache_dir());
  ASSERT_TRUE(list.ok());
  bool seen = false;
  for (const auto& e : *list)
    if (e.key == CacheKey(refs[0].url)) seen = e.in_use;
  EXPECT_TRUE(seen);

  WriteFile(tmp_.Join("release"), "");
  EXPECT_EQ(WaitExit(child), 0);
  ASSERT_TRUE(ReadThroughCache(*cache, refs[4]).ok());
  cache->WaitIdle();
  EXPECT_NE(::access(pinned_entry.c_str(), F_OK), 0) << "oldest entry kept after unpin";
}

}  // namespace
}  // namespace shardstream::testing
