#include "shardstream/loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <thread>

#include "support/cache_fault_source.h"
#include "support/fault_source.h"
#include "support/loader_fixture.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::Dataset;
using testing::DatasetSpec;
using testing::DrainIds;
using testing::FieldOptions;
using testing::SettledThreadCount;
using testing::TempDir;

class LoaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    data_ = new Dataset(testing::WriteDataset(dir_->path(), DatasetSpec{}));
  }
  static void TearDownTestSuite() {
    delete data_;
    delete dir_;
  }
  static TempDir* dir_;
  static Dataset* data_;
};
TempDir* LoaderTest::dir_ = nullptr;
Dataset* LoaderTest::data_ = nullptr;

TEST_F(LoaderTest, SameSeedSameBatchesAcrossThreadCountsAndRuns) {
  std::vector<int64_t> first;
  for (int threads : {1, 2, 3}) {
    for (int rep = 0; rep < 2; ++rep) {
      LoaderOptions o = FieldOptions(data_->manifest);
      o.reader_threads = threads;
      o.open_shards = 3;
      o.seed = 7;
      auto loader = Loader::Create(o);
      ASSERT_TRUE(loader.ok()) << loader.status();
      auto ids = DrainIds(loader->get());
      ASSERT_EQ(ids.size(), static_cast<size_t>(data_->samples));
      if (first.empty()) first = ids;
      EXPECT_EQ(ids, first) << "threads " << threads << " run " << rep;
    }
  }
  // Shuffled (not the shard order), and another seed gives another order.
  std::vector<int64_t> sorted = first;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(sorted, first);
  LoaderOptions o = FieldOptions(data_->manifest);
  o.seed = 8;
  o.open_shards = 3;
  auto other = DrainIds(Loader::Create(o)->get());
  EXPECT_NE(other, first);
  std::sort(other.begin(), other.end());
  EXPECT_EQ(other, sorted);
}

TEST_F(LoaderTest, GoldenOrderIsTheSameOnEveryMachine) {
  // The pipeline's order (the plan, the seeded interleaving of open shards
  // and the shuffle buffer) is pinned: any change to the generators or to how
  // they are seeded fails here.
  LoaderOptions o = FieldOptions(data_->manifest);
  o.seed = 7;
  o.epoch = 1;
  auto l = *Loader::Create(o);
  auto ids = DrainIds(l.get(), 3);
  std::string got;
  for (int64_t id : ids) got += std::to_string(id) + ",";
  EXPECT_EQ(got, "101,51,253,53,248,102,147,250,148,249,246,257,100,254,256,150,99,261,54,247,258,251,149,98,");
}

TEST_F(LoaderTest, EverySampleOnceAcrossConsumersWithEqualCounts) {
  for (auto [world, workers] : {std::pair{2, 2}, std::pair{3, 1}, std::pair{1, 5}}) {
    std::multiset<int64_t> all;
    std::set<size_t> counts;
    for (int r = 0; r < world; ++r) {
      for (int w = 0; w < workers; ++w) {
        LoaderOptions o = FieldOptions(data_->manifest);
        o.world_size = world;
        o.rank = r;
        o.num_workers = workers;
        o.worker = w;
        o.epoch = 3;
        auto loader = Loader::Create(o);
        ASSERT_TRUE(loader.ok()) << loader.status();
        auto ids = DrainIds(loader->get());
        EXPECT_EQ(static_cast<int64_t>(ids.size()), (*loader)->samples_per_epoch());
        counts.insert(ids.size());
        all.insert(ids.begin(), ids.end());
      }
    }
    const int64_t consumers = world * workers;
    EXPECT_EQ(counts.size(), 1u) << "consumers got different sample counts";
    EXPECT_EQ(static_cast<int64_t>(all.size()), data_->samples / consumers * consumers);
    EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), all.size()) << "duplicates";
  }
}

TEST_F(LoaderTest, EpochsDifferAndEndIsSticky) {
  LoaderOptions o = FieldOptions(data_->manifest);
  auto loader = *Loader::Create(o);
  auto e0 = DrainIds(loader.get());
  auto end = loader->next();
  ASSERT_TRUE(end.ok());
  EXPECT_TRUE(end->empty());
  ASSERT_TRUE(loader->set_epoch(1).ok());
  auto e1 = DrainIds(loader.get());
  EXPECT_EQ(e0.size(), e1.size());
  EXPECT_NE(e0, e1);
  ASSERT_TRUE(loader->set_epoch(0).ok());
  EXPECT_EQ(DrainIds(loader.get()), e0);
}

TEST_F(LoaderTest, BatchesCarryKeysUrlsLabelsAndStats) {
  LoaderOptions o = FieldOptions(data_->manifest);
  o.fields.push_back(FieldSpec{"txt"});
  o.shuffle_buffer = 0;
  auto loader = *Loader::Create(o);
  auto b = loader->next();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->rows(), 8);
  ASSERT_EQ(b->num_samples(), 8);
  EXPECT_EQ(b->memory_kind(), HostMemoryKind::kPageable);
  for (int64_t i = 0; i < b->rows(); ++i) {
    int32_t g = static_cast<const int32_t*>(b->tensor("x.npy").data)[4 * i];
    EXPECT_EQ(static_cast<const int64_t*>(b->tensor("cls").data)[i], g % 10);
    EXPECT_EQ(b->tensor("txt").bytes(i), "sample number " + std::to_string(g));
    std::string key(b->key(i));
    EXPECT_EQ(key.rfind("s", 0), 0u) << key;
    EXPECT_NE(b->url(i).find(".tar"), std::string::npos);
    EXPECT_EQ(b->sample(i).index, std::stoi(key.substr(key.find("/k") + 2)));
  }
  DrainIds(loader.get());
  LoaderStats s = loader->stats();
  EXPECT_GT(s.batches, 30u);
  EXPECT_EQ(s.samples, static_cast<uint64_t>(data_->samples));
  EXPECT_GT(s.read_bytes["file"], 0u);
  uint64_t waits = 0;
  for (uint64_t c : s.wait_counts) waits += c;
  EXPECT_EQ(waits, s.batches + 1);  // + the end of the epoch
  EXPECT_GT(s.slot_bytes, 0u);
  EXPECT_NE(s.ToString().find("batches/s"), std::string::npos);
  EXPECT_NE(s.ToString().find("pipeline waited"), std::string::npos);
}

TEST_F(LoaderTest, NoThreadBeforeFirstNextAndPromptShutdownWithFullQueue) {
  // TSan starts a runtime thread at the first thread creation: let it.
  std::thread([] {}).join();
  const int before = SettledThreadCount();
  LoaderOptions o = FieldOptions(data_->manifest);
  o.reader_threads = 3;
  o.prefetch = 2;
  auto loader = *Loader::Create(o);
  EXPECT_EQ(SettledThreadCount(), before);
  auto b = loader->next();
  ASSERT_TRUE(b.ok());
  EXPECT_GT(SettledThreadCount(), before);
  // Let the queue, the pool and the lane rings fill up: every thread blocks.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto t0 = std::chrono::steady_clock::now();
  loader.reset();
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, std::chrono::seconds(1));
  EXPECT_EQ(SettledThreadCount(before), before);
  // The batch outlives the loader (its slot returns to a pool nobody uses).
  EXPECT_EQ(b->rows(), 8);
}

TEST_F(LoaderTest, HoldingEverySlotIsAnErrorNotAHang) {
  LoaderOptions o = FieldOptions(data_->manifest);
  o.prefetch = 2;  // 4 slots
  auto loader = *Loader::Create(o);
  std::vector<Batch> held = testing::HoldEverySlot(loader.get(), 4);
  held.clear();  // released: the loader goes on
  auto b = loader->next();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(b->empty());
}

TEST_F(LoaderTest, DropLastDropsOnlyTheShortBatch) {
  LoaderOptions o = FieldOptions(data_->manifest);
  o.batch_size = 50;  // 294 samples: 5 full batches and 44 left over
  auto keep = *Loader::Create(o);
  EXPECT_EQ(keep->batches_per_epoch(), 6);
  EXPECT_EQ(DrainIds(keep.get()).size(), 294u);
  o.drop_last = true;
  auto drop = *Loader::Create(o);
  EXPECT_EQ(drop->batches_per_epoch(), 5);
  EXPECT_EQ(DrainIds(drop.get()).size(), 250u);
}

TEST_F(LoaderTest, StopMakesNextCancelled) {
  auto loader = *Loader::Create(FieldOptions(data_->manifest));
  ASSERT_TRUE(loader->next().ok());
  loader->Stop();
  EXPECT_EQ(loader->next().status().code(), StatusCode::kCancelled);
}

TEST_F(LoaderTest, StatsTellWhetherReadersOrTheCallerAreTheBottleneck) {
  {
    // A slow source: the assembler waits for the readers.
    auto slow = std::make_shared<testing::FaultSource>(LocalSource());
    slow->SetDelayMicros(20000);
    LoaderOptions o = FieldOptions(data_->manifest);
    o.source = slow.get();
    o.read_chunk = 64 << 10;
    auto l = *Loader::Create(o);
    auto ids = DrainIds(l.get(), 10);
    ASSERT_EQ(ids.size(), 80u);
    LoaderStats s = l->stats();
    EXPECT_GT(s.reader_wait_seconds, 0.01);
    EXPECT_LT(s.caller_wait_seconds, s.reader_wait_seconds);
  }
  {
    // A slow caller: the pipeline fills the queue and waits for it.
    LoaderOptions o = FieldOptions(data_->manifest);
    auto l = *Loader::Create(o);
    for (int i = 0; i < 6; ++i) {
      ASSERT_FALSE(l->next()->empty());
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    LoaderStats s = l->stats();
    EXPECT_GT(s.caller_wait_seconds, 0.05);
  }
}

TEST(LoaderConfigTest, RejectsBadOptionsAndBudgets) {
  LoaderOptions o;
  EXPECT_EQ(Loader::Create(o).status().code(), StatusCode::kConfig);
  o.manifest = "/nonexistent/manifest.jsonl";
  // No fields is allowed (those of the first sample are taken at the first
  // next()); the missing manifest is what fails.
  EXPECT_EQ(Loader::Create(o).status().code(), StatusCode::kNotFound);
  o.fields = {FieldSpec{"x.npy"}};
  EXPECT_EQ(Loader::Create(o).status().code(), StatusCode::kNotFound);
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{2, 10});
  o = FieldOptions(d.manifest);
  o.memory_budget = 1 << 20;
  o.read_chunk = 4 << 20;
  auto r = Loader::Create(o);
  EXPECT_EQ(r.status().code(), StatusCode::kConfig);
  EXPECT_NE(r.status().message().find("memory_budget"), std::string::npos);
  o.rank = 3;
  o.memory_budget = 0;
  EXPECT_EQ(Loader::Create(o).status().code(), StatusCode::kConfig);
}

}  // namespace
}  // namespace shardstream

namespace shardstream {
namespace {

TEST(LoaderCacheTest, ReadsThroughTheShardCacheWithTheSameBatches) {
  TempDir data, cache_dir;
  auto d = testing::WriteDataset(data.path(), DatasetSpec{4, 30});
  ShardCacheOptions co;
  co.dir = cache_dir.path();
  co.limit_bytes = uint64_t{1} << 30;
  co.sync_entries = false;
  auto cache = ShardCache::Create(co);
  ASSERT_TRUE(cache.ok()) << cache.status();
  LoaderOptions o = FieldOptions(d.manifest);
  const auto direct = DrainIds(Loader::Create(o)->get());
  o.cache = std::shared_ptr<ShardCache>(std::move(*cache));
  auto loader = *Loader::Create(o);
  EXPECT_EQ(DrainIds(loader.get()), direct);
  o.cache->WaitIdle();  // every entry published
  ASSERT_TRUE(loader->set_epoch(0).ok());
  EXPECT_EQ(DrainIds(loader.get()), direct);  // now from cache entries
  LoaderStats s = loader->stats();
  EXPECT_GT(s.read_bytes["cache"], 0u);
  EXPECT_EQ(s.read_bytes.count("file"), 0u);
  // The second epoch hits every shard; the first may hit those prefetched in time.
  EXPECT_GE(s.cache_hit_rate, 0.5);
}

TEST(LoaderCancelTest, CancelFromAnotherThreadWakesABlockedNext) {
  TempDir data, cache_dir, tmp;
  auto d = testing::WriteDataset(data.path(), DatasetSpec{2, 30});
  auto knobs = std::make_shared<testing::CacheFaultKnobs>();
  knobs->gate_after = 0;  // every read blocks until the gate file exists
  knobs->gate_file = tmp.Join("gate");
  ShardCacheOptions co;
  co.dir = cache_dir.path();
  co.limit_bytes = uint64_t{1} << 30;
  co.sync_entries = false;
  co.source = std::make_shared<testing::CacheFaultSource>(LocalSource(), knobs);
  LoaderOptions o = FieldOptions(d.manifest);
  o.cache = std::shared_ptr<ShardCache>(std::move(*ShardCache::Create(co)));
  auto loader = *Loader::Create(o);
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    loader->Cancel();
  });
  const auto t0 = std::chrono::steady_clock::now();
  Result<Batch> r = loader->next();  // blocks: no shard byte can arrive
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  canceller.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status();
  EXPECT_GE(waited, 0.15);
  EXPECT_LT(waited, 2.0);
  EXPECT_EQ(loader->next().status().code(), StatusCode::kCancelled);
  testing::WriteFile(knobs->gate_file, "");  // let a download blocked in the source finish
  loader->Stop();
  loader->Cancel();  // idempotent after Stop
}

}  // namespace
}  // namespace shardstream

namespace shardstream {
namespace {

TEST(LoaderPatternTest, BracePatternWithCountsLearnedSplitsSamples) {
  TempDir data;
  auto d = testing::WriteDataset(data.path(), DatasetSpec{3, 20});
  LoaderOptions o = FieldOptions(data.path() + "/shard-{000000..000002}.tar");
  o.world_size = 2;
  auto loader = Loader::Create(o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ((*loader)->samples_per_epoch(), 30);  // from the shards' indexes
  EXPECT_TRUE((*loader)->state().ok());
}

TEST(LoaderPatternTest, BracePatternReadsWholeShardsWithoutResumeState) {
  TempDir data;
  auto d = testing::WriteDataset(data.path(), DatasetSpec{3, 20});
  std::multiset<int64_t> all;
  for (int w = 0; w < 3; ++w) {
    LoaderOptions o = FieldOptions(data.path() + "/shard-{000000..000002}.tar");
    o.learn_sample_counts = false;  // as for remote shards without an index
    o.num_workers = 3;
    o.worker = w;
    auto loader = Loader::Create(o);
    ASSERT_TRUE(loader.ok()) << loader.status();
    EXPECT_EQ((*loader)->samples_per_epoch(), -1);
    auto ids = DrainIds(loader->get());
    EXPECT_EQ(ids.size(), 20u);  // one whole shard each
    all.insert(ids.begin(), ids.end());
    EXPECT_EQ((*loader)->state().status().code(), StatusCode::kConfig);
  }
  EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), 60u);
}

}  // namespace
}  // namespace shardstream
