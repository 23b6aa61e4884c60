// ShardCache in one process: hits and misses, verification and retries,
// stream-through, prefetch, eviction, restart, modes and a full disk.
#include "shardstream/shard_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "shardstream/url.h"
#include "support/cache_fixture.h"
#include "support/fault_source.h"

namespace shardstream::testing {
namespace {

using ShardCacheTest = CacheTestBase;

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

TEST_F(ShardCacheTest, MissThenHitServesIdenticalBytes) {
  auto refs = MakeShards(3, 300000);
  auto cache = NewCache(Options(10 << 20));
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < refs.size(); ++i) {
      auto data = ReadThroughCache(*cache, refs[i]);
      ASSERT_TRUE(data.ok()) << data.status();
      EXPECT_EQ(*data, contents_[i]);
    }
    cache->WaitIdle();
  }
  CacheStats s = cache->stats();
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.hits, 3u);
  EXPECT_EQ(s.downloads, 3u);
  EXPECT_EQ(s.bytes_from_source, 900000u);
  EXPECT_EQ(s.source_bytes_by_scheme["http"], 900000u);
  EXPECT_EQ(TotalFetches(), 3);
  EXPECT_EQ(FilesWithSuffix(cache_dir(), ".shard").size(), 3u);
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".tmp").empty());
}

TEST_F(ShardCacheTest, ChecksumMismatchIsDiscardedAndRetried) {
  auto refs = MakeShards(1, 200000);
  knobs_->corrupt_fetches = 1;
  auto cache = NewCache(Options(10 << 20));
  cache->Prefetch({refs[0]});
  cache->WaitIdle();
  CacheStats s = cache->stats();
  EXPECT_EQ(s.checksum_failures, 1u);
  EXPECT_EQ(s.retries, 1u);
  EXPECT_EQ(TotalFetches(), 2);
  auto shard = cache->Open(refs[0]);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_TRUE((*shard)->hit());
  auto data = ReadAll(**shard);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, contents_[0]);
}

// OpenIfCached never fetches: a miss is kNotFound (and no download starts),
// a complete entry is a pinned file whose vectored reads give its bytes; a
// cache that is off has nothing cached.
TEST_F(ShardCacheTest, OpenIfCachedServesOnlyCompleteEntries) {
  auto refs = MakeShards(1, 300000);
  auto cache = NewCache(Options(10 << 20));
  auto miss = cache->OpenIfCached(refs[0]);
  ASSERT_FALSE(miss.ok());
  EXPECT_EQ(miss.status().code(), StatusCode::kNotFound) << miss.status();
  EXPECT_EQ(miss.status().ToString().find("secret"), std::string::npos) << miss.status();
  cache->WaitIdle();
  EXPECT_EQ(TotalFetches(), 0);
  EXPECT_EQ(cache->stats().misses, 0u);
  ASSERT_TRUE(ReadThroughCache(*cache, refs[0]).ok());
  cache->WaitIdle();
  auto file = cache->OpenIfCached(refs[0]);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*(*file)->Size(), 300000u);
  std::string a(1000, '\0'), b(70000, '\0'), c(500, '\0');
  ReadPiece pieces[] = {{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}};
  auto got = (*file)->ReadVAt(228600, pieces, 3);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 71400u);  // the file ends inside the last piece
  EXPECT_EQ(a + b, contents_[0].substr(228600, 71000));
  EXPECT_EQ(c.substr(0, 400), contents_[0].substr(299600, 400));
  EXPECT_EQ(TotalFetches(), 1);
  auto off_options = Options(10 << 20);
  off_options.mode = CacheMode::kOff;
  auto off = NewCache(off_options);
  EXPECT_EQ(off->OpenIfCached(refs[0]).status().code(), StatusCode::kNotFound);
}

// Entries are read through the cache's Source, as everything else is: a
// fault injected there reaches hits, streamed or random access, and the
// error names the shard (not the cache's hashed file name) and the byte.
TEST_F(ShardCacheTest, HitsAreReadThroughTheCacheSource) {
  auto refs = MakeShards(1, 300000);
  auto disk = std::make_shared<FaultSource>(LocalSource());
  auto options = Options(10 << 20);
  options.fs = disk;
  options.verify_hits = true;
  auto cache = NewCache(options);
  ASSERT_TRUE(ReadThroughCache(*cache, refs[0]).ok());
  cache->WaitIdle();
  const int64_t before = disk->reads();
  auto hit = ReadThroughCache(*cache, refs[0]);
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(*hit, contents_[0]);
  EXPECT_GT(disk->reads(), before);
  EXPECT_EQ(cache->stats().hits, 1u);

  const std::string url = RedactUrl(refs[0].url);
  disk->FailNthErrno(FaultSource::Op::kRead, 1, EIO, /*sticky=*/true, ".shard");
  auto shard = cache->Open(refs[0]);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_TRUE((*shard)->hit());
  auto failed = ReadAll(**shard);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kIo) << failed.status();
  EXPECT_EQ(failed.status().url(), url);
  EXPECT_EQ(failed.status().offset(), 0);
  EXPECT_NE(failed.status().message().find("read cached " + url), std::string::npos)
      << failed.status();
  auto file = cache->OpenIfCached(refs[0]);
  ASSERT_TRUE(file.ok()) << file.status();
  std::string buf(1000, '\0');
  auto at = (*file)->ReadAt(5000, buf.size(), buf.data());
  ASSERT_FALSE(at.ok());
  EXPECT_EQ(at.status().url(), url);
  EXPECT_EQ(at.status().offset(), 5000);
  ReadPiece piece{buf.data(), buf.size()};
  EXPECT_EQ((*file)->ReadVAt(7000, &piece, 1).status().offset(), 7000);

  // A byte gone bad on the cache disk: the hit is checked (verify_hits).
  disk->ClearFaults();
  disk->CorruptReadByte(123456, ".shard");
  auto bad = ReadThroughCache(*cache, refs[0]);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kChecksum) << bad.status();
  disk->ClearFaults();
  auto good = ReadThroughCache(*cache, refs[0]);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(*good, contents_[0]);
}

// A stream reading this process's download from its first byte leaves the
// checksum to the download. The next four tests are the ways that can go
// wrong: a bad attempt it already read from, an attempt that fails part way,
// a cache disk that fails part way, and a download checking another checksum.

// Opens refs[0] while the source stalls at `gate` bytes and reads the first
// bytes of the download, then lets the source go on.
std::string ReadHeadThenOpenGate(ShardCache& cache, const ShardRef& ref, CacheFaultKnobs& knobs,
                                 std::unique_ptr<CachedShard>* out) {
  auto shard = cache.Open(ref);
  EXPECT_TRUE(shard.ok()) << shard.status();
  if (!shard.ok()) return "";
  std::string head(30000, '\0');
  size_t got = 0;
  while (got < head.size()) {
    auto n = (*shard)->Read(head.size() - got, head.data() + got);
    EXPECT_TRUE(n.ok()) << n.status();
    if (!n.ok() || *n == 0) break;
    got += *n;
  }
  head.resize(got);
  WriteFile(knobs.gate_file, "");
  *out = std::move(*shard);
  return head;
}

TEST_F(ShardCacheTest, AReaderOfABadAttemptGetsAChecksumError) {
  auto refs = MakeShards(1, 300000);
  knobs_->corrupt_fetches = 1;  // byte 100 of the first download is wrong
  knobs_->gate_after = 50000;
  auto cache = NewCache(Options(10 << 20));
  std::unique_ptr<CachedShard> shard;
  std::string head = ReadHeadThenOpenGate(*cache, refs[0], *knobs_, &shard);
  ASSERT_EQ(head.size(), 30000u);
  EXPECT_NE(head, contents_[0].substr(0, head.size()));  // it did read the bad byte
  // The download finds the mismatch and starts again before the reader goes on.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (cache->stats().retries == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(cache->stats().checksum_failures, 1u);
  auto rest = ReadAll(*shard);
  ASSERT_FALSE(rest.ok());
  EXPECT_EQ(rest.status().code(), StatusCode::kChecksum) << rest.status();
  EXPECT_NE(rest.status().message().find("open the shard again"), std::string::npos)
      << rest.status();
  cache->WaitIdle();
  EXPECT_EQ(cache->stats().checksum_failures, 1u);
  auto again = ReadThroughCache(*cache, refs[0]);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, contents_[0]);
  EXPECT_EQ(TotalFetches(), 2);
}

TEST_F(ShardCacheTest, AReaderOfAnAttemptThatFailsPartWayChecksWhatItReadItself) {
  auto refs = MakeShards(1, 300000);
  knobs_->gate_after = 50000;
  knobs_->fail_after = 100000;  // the first download breaks off there; the retry completes
  knobs_->fail_fetches = 1;
  auto cache = NewCache(Options(10 << 20));
  std::unique_ptr<CachedShard> shard;
  std::string head = ReadHeadThenOpenGate(*cache, refs[0], *knobs_, &shard);
  ASSERT_EQ(head.size(), 30000u);
  auto rest = ReadAll(*shard);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(head + *rest, contents_[0]);
  cache->WaitIdle();
  EXPECT_EQ(cache->stats().retries, 1u);
  EXPECT_EQ(TotalFetches(), 2);
  EXPECT_EQ(FilesWithSuffix(cache_dir(), ".shard").size(), 1u);
}

TEST_F(ShardCacheTest, AReaderOfADownloadWhoseDiskFailsPartWayChecksWhatItReadItself) {
  auto refs = MakeShards(1, 300000);
  knobs_->gate_after = 50000;
  auto disk = std::make_shared<FaultSource>(LocalSource());
  auto options = Options(10 << 20);
  options.fs = disk;
  options.chunk_size = 16 << 10;
  auto cache = NewCache(options);
  disk->FailNthErrno(FaultSource::Op::kAppend, 5, EIO, false, ".tmp");  // at 64 KiB
  std::unique_ptr<CachedShard> shard;
  std::string head = ReadHeadThenOpenGate(*cache, refs[0], *knobs_, &shard);
  ASSERT_EQ(head.size(), 30000u);
  auto rest = ReadAll(*shard);  // the rest from the source itself
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(head + *rest, contents_[0]);
  cache->WaitIdle();
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".shard").empty());
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".tmp").empty());
  EXPECT_EQ(TotalFetches(), 2);
}

TEST_F(ShardCacheTest, AReaderWithAnotherChecksumJoiningADownloadChecksItself) {
  auto refs = MakeShards(1, 300000);
  knobs_->gate_after = 50000;
  auto cache = NewCache(Options(10 << 20));
  auto first = cache->Open(refs[0]);
  ASSERT_TRUE(first.ok()) << first.status();
  // A second manifest says the same url holds other bytes.
  ShardRef other(refs[0].url, refs[0].size, ChecksumOf(std::string(300000, 'x')));
  std::unique_ptr<CachedShard> second;
  std::string head = ReadHeadThenOpenGate(*cache, other, *knobs_, &second);
  ASSERT_EQ(head.size(), 30000u);
  auto a = ReadAll(**first);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, contents_[0]);
  auto b = ReadAll(*second);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kChecksum) << b.status();
  EXPECT_NE(b.status().message().find("expected " + other.checksum), std::string::npos)
      << b.status();
  EXPECT_EQ(cache->stats().joined, 1u) << TotalFetches();  // the second stream joined the download
}

TEST_F(ShardCacheTest, PersistentMismatchGivesChecksumErrorAfterRetries) {
  auto refs = MakeShards(1, 200000);
  knobs_->corrupt_fetches = 1000;
  auto options = Options(10 << 20);
  options.max_attempts = 3;
  auto cache = NewCache(options);
  auto file = cache->OpenRandomAccess(refs[0]);
  ASSERT_FALSE(file.ok());
  const Status& st = file.status();
  EXPECT_EQ(st.code(), StatusCode::kChecksum) << st;
  EXPECT_NE(st.message().find("example.invalid/data/shard-000.tar"), std::string::npos) << st;
  EXPECT_NE(st.message().find("expected " + refs[0].checksum), std::string::npos) << st;
  EXPECT_NE(st.message().find("got xxh3_128:"), std::string::npos) << st;
  EXPECT_NE(st.message().find("after 3 attempt"), std::string::npos) << st;
  EXPECT_EQ(st.ToString().find("secret"), std::string::npos) << st;
  EXPECT_EQ(TotalFetches(), 3);
  EXPECT_EQ(cache->stats().retries, 2u);
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".shard").empty());
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".tmp").empty());

  // A streaming reader never gets the last byte of wrong data.
  auto shard = cache->Open(refs[0]);
  ASSERT_TRUE(shard.ok()) << shard.status();
  auto data = ReadAll(**shard);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kChecksum) << data.status();
  EXPECT_EQ(data.status().ToString().find("secret"), std::string::npos);
}

TEST_F(ShardCacheTest, WrongManifestSizeIsAnError) {
  auto refs = MakeShards(1, 100000);
  ShardRef ref(refs[0].url, 100001);
  auto cache = NewCache(Options(10 << 20));
  auto data = ReadThroughCache(*cache, ref);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kChecksum) << data.status();
  EXPECT_EQ(data.status().offset(), 100000) << data.status();
  cache->WaitIdle();
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".shard").empty());
}

TEST_F(ShardCacheTest, StreamThroughDeliversFirstBytesBeforeDownloadEnds) {
  auto refs = MakeShards(1, 4 << 20);
  knobs_->gate_after = 256 << 10;  // the source stalls after 256 KiB until the gate opens
  auto cache = NewCache(Options(64 << 20));
  auto start = std::chrono::steady_clock::now();
  auto shard = cache->Open(refs[0]);
  ASSERT_TRUE(shard.ok()) << shard.status();
  std::string head(100000, '\0');
  size_t got = 0;
  while (got < head.size()) {
    auto n = (*shard)->Read(head.size() - got, head.data() + got);
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_GT(*n, 0u);
    got += *n;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(head, contents_[0].substr(0, head.size()));
  // The download is still running: no entry yet, one temporary.
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".shard").empty());
  EXPECT_EQ(FilesWithSuffix(cache_dir(), ".tmp").size(), 1u);
  EXPECT_FALSE((*shard)->hit());

  WriteFile(knobs_->gate_file, "");
  auto rest = ReadAll(**shard);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(head + *rest, contents_[0]);
  cache->WaitIdle();
  EXPECT_EQ(FilesWithSuffix(cache_dir(), ".shard").size(), 1u);
  EXPECT_EQ(TotalFetches(), 1);
}

TEST_F(ShardCacheTest, ConcurrentOpensInOneProcessFetchOnce) {
  auto refs = MakeShards(1, 1 << 20);
  knobs_->delay_us = 500;
  knobs_->max_read = 32 << 10;
  auto cache = NewCache(Options(64 << 20));
  std::vector<std::thread> threads;
  std::vector<std::string> results(6);
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] {
      auto data = ReadThroughCache(*cache, refs[0]);
      results[i] = data.ok() ? *data : data.status().ToString();
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) EXPECT_TRUE(r == contents_[0]) << r.substr(0, 200);
  EXPECT_EQ(TotalFetches(), 1);
  CacheStats s = cache->stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.misses + s.joined + s.hits, 6u);
}

TEST_F(ShardCacheTest, PrefetchDownloadsTheLookaheadOnly) {
  auto refs = MakeShards(6, 100000);
  auto options = Options(10 << 20);
  options.prefetch_lookahead = 3;
  options.download_threads = 3;
  auto cache = NewCache(options);
  cache->Prefetch(refs);
  cache->WaitIdle();
  EXPECT_EQ(FilesWithSuffix(cache_dir(), ".shard").size(), 3u);
  EXPECT_EQ(cache->stats().prefetches, 3u);
  for (int i = 0; i < 3; ++i) {
    auto shard = cache->Open(refs[i]);
    ASSERT_TRUE(shard.ok()) << shard.status();
    EXPECT_TRUE((*shard)->hit());
  }
  // Moving on: the next window is fetched; cached ones are not fetched again.
  cache->Prefetch(std::vector<ShardRef>(refs.begin() + 2, refs.end()));
  cache->WaitIdle();
  EXPECT_EQ(FilesWithSuffix(cache_dir(), ".shard").size(), 5u);
  EXPECT_EQ(TotalFetches(), 5);
}

TEST_F(ShardCacheTest, DestructionStopsADownloadPromptly) {
  auto refs = MakeShards(1, 8 << 20);
  knobs_->delay_us = 20000;
  knobs_->max_read = 64 << 10;  // ~2.6 s for the whole shard
  auto cache = NewCache(Options(64 << 20));
  cache->Prefetch(refs);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  auto start = std::chrono::steady_clock::now();
  cache.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".tmp").empty());
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".shard").empty());
}

TEST_F(ShardCacheTest, NoThreadBeforeFirstDownload) {
  auto refs = MakeShards(1, 1000);
  std::thread([] {}).join();  // TSan starts a runtime thread at the first thread creation
  int before = SettledThreadCount();
  auto cache = NewCache(Options(1 << 20));
  EXPECT_EQ(SettledThreadCount(), before);
  ASSERT_TRUE(ReadThroughCache(*cache, refs[0]).ok());  // a hit would not start one either
  EXPECT_GT(SettledThreadCount(), before);
  cache.reset();
  EXPECT_EQ(SettledThreadCount(before), before);
}

TEST_F(ShardCacheTest, EvictsLeastRecentlyUsedToLowWatermark) {
  auto refs = MakeShards(5, 1 << 20);
  auto options = Options(4 << 20);
  options.low_watermark = 0.5;
  auto cache = NewCache(options);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(ReadThroughCache(*cache, refs[i]).ok());
    cache->WaitIdle();
  }
  ASSERT_TRUE(ReadThroughCache(*cache, refs[1]).ok());  // 1 becomes most recent
  auto data = ReadThroughCache(*cache, refs[4]);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, contents_[4]);
  cache->WaitIdle();
  // 4 MiB + 1 MiB > limit: down to 2 MiB including the new one: 0, 2, 3 go.
  auto entries = FilesWithSuffix(cache_dir(), ".shard");
  std::vector<std::string> expected = {CacheKey(refs[1].url) + ".shard",
                                       CacheKey(refs[4].url) + ".shard"};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(entries, expected);
  EXPECT_EQ(cache->stats().evictions, 3u);
  EXPECT_LE(CacheBytesOnDisk(cache_dir()), 4u << 20);
}

TEST_F(ShardCacheTest, OpenEntryIsNotEvicted) {
  auto refs = MakeShards(4, 1 << 20);
  auto cache = NewCache(Options(2 << 20));
  ASSERT_TRUE(ReadThroughCache(*cache, refs[0]).ok());
  cache->WaitIdle();
  auto pinned = cache->Open(refs[0]);
  ASSERT_TRUE(pinned.ok());
  ASSERT_TRUE((*pinned)->hit());
  for (int i = 1; i < 4; ++i) {
    auto data = ReadThroughCache(*cache, refs[i]);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(*data, contents_[i]);
    cache->WaitIdle();
    EXPECT_TRUE(Exists(cache_dir() + "/" + CacheKey(refs[0].url) + ".shard"));
    EXPECT_LE(CacheBytesOnDisk(cache_dir()), 2u << 20);
  }
  auto data = ReadAll(**pinned);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(*data, contents_[0]);
  pinned->reset();
  EXPECT_TRUE(cache->Evict(refs[0].url).ok());
  EXPECT_EQ(cache->Evict(refs[0].url).code(), StatusCode::kNotFound);
}

TEST_F(ShardCacheTest, RestartRebuildsStateFromTheDirectory) {
  auto refs = MakeShards(3, 500000);
  {
    auto cache = NewCache(Options(10 << 20));
    for (const auto& r : refs) ASSERT_TRUE(ReadThroughCache(*cache, r).ok());
    cache->WaitIdle();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto cache = NewCache(Options(10 << 20));
  // Shard 0 is used again: it becomes the most recent.
  auto data = ReadThroughCache(*cache, refs[0]);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(*data, contents_[0]);
  EXPECT_EQ(cache->stats().hits, 1u);
  EXPECT_EQ(TotalFetches(), 3);
  auto left = cache->EvictTo(1000000);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(*left, 1000000u);
  auto entries = FilesWithSuffix(cache_dir(), ".shard");
  std::vector<std::string> expected = {CacheKey(refs[0].url) + ".shard",
                                       CacheKey(refs[2].url) + ".shard"};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(entries, expected);
  auto list = ListCacheEntries(cache_dir());
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ(list->back().url, RedactUrl(refs[0].url));  // most recent last
  EXPECT_EQ(list->back().checksum, refs[0].checksum);
}

TEST_F(ShardCacheTest, ReadOnlyModeNeverWrites) {
  auto refs = MakeShards(2, 200000);
  {
    auto cache = NewCache(Options(10 << 20));
    ASSERT_TRUE(ReadThroughCache(*cache, refs[0]).ok());
    cache->WaitIdle();
  }
  auto before = FilesWithSuffix(cache_dir(), "");
  auto options = Options(0);
  options.mode = CacheMode::kReadOnly;
  auto cache = NewCache(options);
  for (int i = 0; i < 2; ++i) {
    auto data = ReadThroughCache(*cache, refs[i]);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(*data, contents_[i]);
  }
  CacheStats s = cache->stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.uncached, 1u);
  EXPECT_EQ(FilesWithSuffix(cache_dir(), ""), before);
  EXPECT_EQ(cache->EvictTo(0).status().code(), StatusCode::kConfig);
}

TEST_F(ShardCacheTest, OffModeStreamsOnly) {
  auto refs = MakeShards(2, 200000);
  ShardCacheOptions options;
  options.mode = CacheMode::kOff;
  options.source = source_;
  options.dir = cache_dir();
  auto cache = NewCache(options);
  for (int round = 0; round < 2; ++round) {
    auto data = ReadThroughCache(*cache, refs[1]);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(*data, contents_[1]);
  }
  EXPECT_FALSE(Exists(cache_dir()));
  EXPECT_EQ(TotalFetches(), 2);
  EXPECT_EQ(cache->stats().uncached, 2u);
}

TEST_F(ShardCacheTest, DiskFullEvictsAndRetries) {
  auto refs = MakeShards(2, 1 << 20);
  auto disk = std::make_shared<SmallDiskFs>((3 << 20) / 2);  // room for 1.5 shards
  auto options = Options(100 << 20);                          // the limit is not the problem
  options.fs = disk;
  auto cache = NewCache(options);
  ASSERT_TRUE(ReadThroughCache(*cache, refs[0]).ok());
  cache->WaitIdle();
  auto data = ReadThroughCache(*cache, refs[1]);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, contents_[1]);
  cache->WaitIdle();
  EXPECT_GE(disk->nospace_errors.load(), 1);
  EXPECT_EQ(cache->stats().nospace_events, 1u);
  EXPECT_EQ(FilesWithSuffix(cache_dir(), ".shard"),
            std::vector<std::string>{CacheKey(refs[1].url) + ".shard"});
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".tmp").empty());
}

TEST_F(ShardCacheTest, DiskFullIsFoundBeforeAnyByteIsWritten) {
  auto refs = MakeShards(1, 1 << 20);
  auto disk = std::make_shared<SmallDiskFs>(512 << 10);  // half the shard
  auto options = Options(100 << 20);
  options.fs = disk;
  auto cache = NewCache(options);
  const int64_t appended = disk->appended_bytes.load(), free_bytes = disk->free_bytes();
  auto data = ReadThroughCache(*cache, refs[0]);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, contents_[0]);
  cache->WaitIdle();
  // The space is reserved for the whole shard up front: no partial entry
  // was written and thrown away.
  EXPECT_EQ(disk->nospace_errors.load(), 2);  // the reservation, and its retry
  EXPECT_EQ(cache->stats().nospace_events, 2u);
  EXPECT_EQ(disk->appended_bytes.load(), appended);
  EXPECT_EQ(disk->free_bytes(), free_bytes);
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".shard").empty());
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".tmp").empty());
}

// A source answering in small reads: the download gathers them into whole
// chunks at chunk-aligned offsets (what lets the page cache keep the entry in
// large pieces), and the entry is still exact.
TEST_F(ShardCacheTest, ADownloadAppendsWholeChunksAtChunkOffsets) {
  auto refs = MakeShards(2, 300000);
  knobs_->max_read = 4096;  // 74 reads
  auto disk = std::make_shared<SmallDiskFs>(100 << 20);
  disk->chunk = 64 << 10;
  auto options = Options(100 << 20);
  options.fs = disk;
  auto cache = NewCache(options);
  auto data = ReadThroughCache(*cache, refs[0]);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, contents_[0]);
  cache->WaitIdle();
  EXPECT_EQ(disk->chunk_crossings.load(), 0);
  // 4 whole chunks and the rest, and the entry's metadata file; a chunk is
  // cut short only when the source pauses for 2 ms, which a very slow
  // machine might see once or twice.
  EXPECT_GE(disk->appends.load(), 5 + 1);
  EXPECT_LE(disk->appends.load(), 15);
  const int appends = disk->appends.load();
  // A stream that cannot bound its wait (ReadWithin's default) is appended
  // read by read, as it arrives.
  knobs_->read_within = false;
  auto other = ReadThroughCache(*cache, refs[1]);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(*other, contents_[1]);
  cache->WaitIdle();
  EXPECT_EQ(disk->appends.load() - appends, 74 + 1);
}

// Bytes that arrived before the source paused reach a reader during the
// pause: the download does not hold them back to complete a chunk.
TEST_F(ShardCacheTest, BytesBeforeASourcePauseReachReadersDuringThePause) {
  auto refs = MakeShards(1, 300000);
  knobs_->max_read = 1000;
  knobs_->gate_after = 100000;  // mid-chunk: chunks are 64 KiB
  auto options = Options(100 << 20);
  options.stall_timeout = std::chrono::milliseconds(5000);  // a held byte fails, not hangs
  auto cache = NewCache(options);
  auto shard = cache->Open(refs[0]);
  ASSERT_TRUE(shard.ok()) << shard.status();
  std::string head(100000, '\0');
  for (size_t n = 0; n < head.size();) {
    auto got = (*shard)->Read(head.size() - n, head.data() + n);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_GT(*got, 0u);
    n += *got;
  }
  EXPECT_TRUE(head == contents_[0].substr(0, head.size())) << "bytes differ";
  WriteFile(knobs_->gate_file, "");
  auto rest = ReadAll(**shard);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(head + *rest, contents_[0]);
}

// A reader asking for more than has arrived is woken when the download must
// wait on a paused source, also when the pause falls on a chunk boundary (no
// short piece tells it): not by its own 50 ms wait slices.
TEST_F(ShardCacheTest, AReaderAskingForMoreGetsTheBytesBeforeAPauseAtAChunkBoundary) {
  auto refs = MakeShards(1, 300000);
  knobs_->gate_after = 2 * (64 << 10);  // on a chunk boundary: chunks are 64 KiB
  knobs_->delay_us = 3000;              // so the reader waits for the second chunk
  auto options = Options(100 << 20);
  options.stall_timeout = std::chrono::milliseconds(5000);
  auto cache = NewCache(options);
  auto shard = cache->Open(refs[0]);
  ASSERT_TRUE(shard.ok()) << shard.status();
  std::string head;
  std::vector<char> buf(1 << 20);  // more than the whole shard
  auto slowest = std::chrono::steady_clock::duration::zero();
  while (head.size() < static_cast<size_t>(knobs_->gate_after.load())) {
    auto start = std::chrono::steady_clock::now();
    auto got = (*shard)->Read(buf.size(), buf.data());
    slowest = std::max(slowest, std::chrono::steady_clock::now() - start);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_GT(*got, 0u);
    head.append(buf.data(), *got);
  }
  EXPECT_EQ(head.size(), static_cast<size_t>(knobs_->gate_after.load()));
  // The download holds a pause for 2 ms before it wakes readers.
  EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(slowest).count(), 35);
  WriteFile(knobs_->gate_file, "");
  auto rest = ReadAll(**shard);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(head + *rest, contents_[0]);
}

TEST_F(ShardCacheTest, AnEntryRecordsOnlyAChecksumTheManifestGave) {
  auto refs = MakeShards(1, 300000);
  ShardRef bare(refs[0].url, refs[0].size, "");
  auto cache = NewCache(Options(10 << 20));
  ASSERT_TRUE(ReadThroughCache(*cache, bare).ok());
  cache->WaitIdle();
  auto list = ListCacheEntries(cache_dir());
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ(list->front().checksum, "");  // nothing was checked, nothing is claimed
  // A manifest with a checksum cannot trust that entry: it downloads and
  // checks the shard again, and records the checksum then.
  auto data = ReadThroughCache(*cache, refs[0]);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, contents_[0]);
  cache->WaitIdle();
  EXPECT_EQ(TotalFetches(), 2);
  list = ListCacheEntries(cache_dir());
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ(list->front().checksum, refs[0].checksum);
  ASSERT_TRUE(ReadThroughCache(*cache, refs[0]).ok());
  EXPECT_EQ(TotalFetches(), 2);  // now a hit
}

TEST_F(ShardCacheTest, DiskStillFullStreamsWithoutCaching) {
  auto refs = MakeShards(2, 1 << 20);
  auto disk = std::make_shared<SmallDiskFs>(300 << 10);
  auto options = Options(100 << 20);
  options.fs = disk;
  auto cache = NewCache(options);
  for (int i = 0; i < 2; ++i) {
    auto data = ReadThroughCache(*cache, refs[i]);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(*data, contents_[i]);
    cache->WaitIdle();
  }
  CacheStats s = cache->stats();
  EXPECT_EQ(s.nospace_events, 2u);  // write, evict, retry, give up
  EXPECT_EQ(s.uncached, 1u);        // the second shard no longer tries
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".shard").empty());
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".tmp").empty());
}

// A cache disk whose writes fail with EIO.
class BrokenDiskFs final : public SourceWrapper {
 public:
  BrokenDiskFs() : SourceWrapper(LocalSource()) {}
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& url) override {
    if (url.find(".tmp") != std::string::npos && url.find(".meta.") == std::string::npos)
      return Status::FromErrno(EIO, "create " + url);
    return SourceWrapper::NewWritableFile(url);
  }
};

TEST_F(ShardCacheTest, FailingCacheDiskStreamsWithoutCaching) {
  auto refs = MakeShards(2, 300000);
  auto options = Options(10 << 20);
  options.fs = std::make_shared<BrokenDiskFs>();
  auto cache = NewCache(options);
  for (int i = 0; i < 2; ++i) {
    auto data = ReadThroughCache(*cache, refs[i]);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(*data, contents_[i]);
    cache->WaitIdle();
  }
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".shard").empty());
  EXPECT_EQ(cache->stats().uncached, 1u);  // the second one does not try the disk again
}

TEST_F(ShardCacheTest, StaleEntryIsReplacedWhenTheManifestChanges) {
  auto refs = MakeShards(1, 100000);
  auto cache = NewCache(Options(10 << 20));
  ASSERT_TRUE(ReadThroughCache(*cache, refs[0]).ok());
  cache->WaitIdle();
  std::string v2(100000, 'x');
  WriteFile(knobs_->local_dir + "/shard-000.tar", v2);
  auto data = ReadThroughCache(*cache, ShardRef(refs[0].url, 100000, ChecksumOf(v2)));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, v2);
  cache->WaitIdle();
  auto again = cache->Open(ShardRef(refs[0].url, 100000, ChecksumOf(v2)));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)->hit());
}

TEST_F(ShardCacheTest, UnknownSizeAndChecksumWork) {
  MakeShards(1, 150000);
  ShardRef bare(std::string(kRemotePrefix) + "shard-000.tar");
  auto cache = NewCache(Options(10 << 20));
  for (int round = 0; round < 2; ++round) {
    auto data = ReadThroughCache(*cache, bare);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(*data, contents_[0]);
    cache->WaitIdle();
  }
  EXPECT_EQ(cache->stats().hits, 1u);
  auto file = cache->OpenRandomAccess(bare);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*(*file)->Size(), 150000u);
  std::string buf(10, '\0');
  ASSERT_EQ(*(*file)->ReadAt(1000, 10, buf.data()), 10u);
  EXPECT_EQ(buf, contents_[0].substr(1000, 10));
}

// A cache file system whose directory sync waits for a gate: an entry's
// publication can be held back at will.
class GatedSyncFs final : public SourceWrapper {
 public:
  GatedSyncFs() : SourceWrapper(LocalSource()) {}
  Status SyncDir(const std::string& url) override {
    waiting = true;
    while (!open) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    waiting = false;
    return SourceWrapper::SyncDir(url);
  }
  std::atomic<bool> open{false}, waiting{false};
};

// Cache options whose publications wait at `fs`'s gate.
ShardCacheOptions Gated(ShardCacheOptions o, std::shared_ptr<GatedSyncFs> fs) {
  o.fs = std::move(fs);
  o.sync_entries = true;
  return o;
}

// Opens the gate when the test leaves, also by a failed assertion: declared
// after the cache, it runs before the cache waits for its download.
struct OpenGateAtExit {
  GatedSyncFs* fs;
  ~OpenGateAtExit() { fs->open = true; }
};

TEST_F(ShardCacheTest, UnknownSizeReaderEndsAtTheSourceSizeWithoutWaitingForPublication) {
  // A shard named without a size (a bare url): the download learns its size
  // from the source, and a reader following it is done at that size, not
  // when the entry has been synced and published.
  MakeShards(1, 300000);
  ShardRef bare(std::string(kRemotePrefix) + "shard-000.tar");
  auto fs = std::make_shared<GatedSyncFs>();
  auto cache = NewCache(Gated(Options(10 << 20), fs));
  OpenGateAtExit at_exit{fs.get()};
  auto data = ReadThroughCache(*cache, bare);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, contents_[0]);
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".shard").empty() || fs->waiting.load());
  fs->open = true;
  cache->WaitIdle();
  EXPECT_EQ(FilesWithSuffix(cache_dir(), ".shard").size(), 1u);
  auto again = ReadThroughCache(*cache, bare);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, contents_[0]);
  EXPECT_EQ(cache->stats().hits, 1u);
  EXPECT_EQ(TotalFetches(), 1);
}

// A reader that first asks for a shard after its download renamed the
// temporary to the entry, but before the download ended (here: its
// directory sync held back), reads the entry.
TEST_F(ShardCacheTest, AReaderAttachingBetweenRenameAndSyncReadsTheEntry) {
  auto refs = MakeShards(1, 300000);
  auto fs = std::make_shared<GatedSyncFs>();
  auto o = Gated(Options(10 << 20), fs);
  o.stall_timeout = std::chrono::milliseconds(3000);
  auto cache = NewCache(o);
  OpenGateAtExit at_exit{fs.get()};
  cache->Prefetch({refs[0]});
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!fs->waiting.load() && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(fs->waiting.load());  // renamed, sync held back
  EXPECT_EQ(FilesWithSuffix(cache_dir(), ".shard").size(), 1u);
  auto data = ReadThroughCache(*cache, refs[0]);
  fs->open = true;
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, contents_[0]);
  cache->WaitIdle();
  EXPECT_EQ(TotalFetches(), 1);
}

TEST_F(ShardCacheTest, MissingShardIsNotFoundFromOpen) {
  auto cache = NewCache(Options(10 << 20));
  auto shard = cache->Open(ShardRef(std::string(kRemotePrefix) + "nope.tar", 10));
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), StatusCode::kNotFound) << shard.status();
  EXPECT_TRUE(FilesWithSuffix(cache_dir(), ".tmp").empty());
}

TEST_F(ShardCacheTest, StalledDownloadTimesOut) {
  auto refs = MakeShards(1, 1 << 20);
  knobs_->gate_after = 100000;
  auto options = Options(10 << 20);
  options.stall_timeout = std::chrono::milliseconds(300);
  auto cache = NewCache(options);
  auto data = ReadThroughCache(*cache, refs[0]);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kUnavailable) << data.status();
  EXPECT_EQ(data.status().offset(), 100000) << data.status();
  WriteFile(knobs_->gate_file, "");  // let the download thread finish
}

TEST_F(ShardCacheTest, CancelWakesABlockedReader) {
  auto refs = MakeShards(1, 1 << 20);
  knobs_->gate_after = 100000;
  auto cache = NewCache(Options(10 << 20));
  auto shard = cache->Open(refs[0]);
  ASSERT_TRUE(shard.ok()) << shard.status();
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    (*shard)->Cancel();
  });
  auto start = std::chrono::steady_clock::now();
  auto data = ReadAll(**shard);
  canceller.join();
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kCancelled) << data.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  WriteFile(knobs_->gate_file, "");
}

TEST_F(ShardCacheTest, ReaderOutlivingTheCacheGetsCancelled) {
  auto refs = MakeShards(1, 1 << 20);
  knobs_->delay_us = 20000;
  knobs_->max_read = 64 << 10;
  auto cache = NewCache(Options(10 << 20));
  auto shard = cache->Open(refs[0]);
  ASSERT_TRUE(shard.ok()) << shard.status();
  cache.reset();
  auto data = ReadAll(**shard);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kCancelled) << data.status();
}

TEST_F(ShardCacheTest, InvalidOptionsAreConfigErrors) {
  ShardCacheOptions o;
  o.limit_bytes = 1;
  EXPECT_EQ(ShardCache::Create(o).status().code(), StatusCode::kConfig);
  o.dir = cache_dir();
  o.limit_bytes = 0;
  EXPECT_EQ(ShardCache::Create(o).status().code(), StatusCode::kConfig);
  o.limit_bytes = 1;
  o.low_watermark = 1.5;
  EXPECT_EQ(ShardCache::Create(o).status().code(), StatusCode::kConfig);
}

}  // namespace
}  // namespace shardstream::testing
