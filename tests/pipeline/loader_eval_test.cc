// Eval mode: manifest order, every sample exactly once over all consumers,
// nothing dropped or padded, whatever the thread counts; resumable.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "shardstream/loader.h"
#include "shardstream/shard_split.h"
#include "support/loader_fixture.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::DatasetSpec;
using testing::DrainIds;
using testing::FieldOptions;
using testing::TempDir;

LoaderOptions EvalOptions(const std::string& manifest) {
  LoaderOptions o = FieldOptions(manifest);
  o.mode = LoaderMode::kEval;
  o.batch_size = 4;
  return o;
}

TEST(LoaderEvalTest, OneConsumerReadsTheManifestInOrderWithAnyThreads) {
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{7, 13});
  std::vector<int64_t> want(static_cast<size_t>(d.samples));
  std::iota(want.begin(), want.end(), 0);
  for (int threads : {1, 2, 4}) {
    LoaderOptions o = EvalOptions(d.manifest);
    o.reader_threads = threads;
    o.open_shards = std::max(threads, 3);
    o.shuffle_buffer = 500;  // ignored in eval mode
    auto l = *Loader::Create(o);
    EXPECT_EQ(l->samples_per_epoch(), d.samples);
    EXPECT_EQ(l->batches_per_epoch(), (d.samples + 3) / 4);  // the last batch is short, kept
    EXPECT_EQ(DrainIds(l.get()), want) << threads << " threads";
    // Every epoch is the same order.
    ASSERT_TRUE(l->set_epoch(3).ok());
    EXPECT_EQ(DrainIds(l.get()), want);
  }
}

TEST(LoaderEvalTest, ConsumersGetContiguousSpansWithNothingDroppedOrPadded) {
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{7, 10});  // 70 over 3 x 2 = 6
  std::vector<int64_t> all;
  std::vector<int64_t> counts;
  for (int rank = 0; rank < 3; ++rank) {
    for (int worker = 0; worker < 2; ++worker) {
      LoaderOptions o = EvalOptions(d.manifest);
      o.world_size = 3;
      o.rank = rank;
      o.num_workers = 2;
      o.worker = worker;
      auto l = *Loader::Create(o);
      auto ids = DrainIds(l.get());
      EXPECT_EQ(static_cast<int64_t>(ids.size()), l->samples_per_epoch());
      EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
      counts.push_back(static_cast<int64_t>(ids.size()));
      all.insert(all.end(), ids.begin(), ids.end());
    }
  }
  std::vector<int64_t> want(70);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(all, want);  // consumer order = manifest order, each sample once
  EXPECT_LE(*std::max_element(counts.begin(), counts.end()) -
                *std::min_element(counts.begin(), counts.end()),
            1);
}

TEST(LoaderEvalTest, ResumesOnAnotherTopologyExactlyOnce) {
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{5, 11});
  std::vector<LoaderState> states;
  std::set<int64_t> delivered;
  for (int rank = 0; rank < 2; ++rank) {
    LoaderOptions o = EvalOptions(d.manifest);
    o.world_size = 2;
    o.rank = rank;
    auto l = *Loader::Create(o);
    auto ids = DrainIds(l.get(), 3 + rank);
    delivered.insert(ids.begin(), ids.end());
    states.push_back(*l->state());
  }
  auto merged = MergeLoaderStates(states);
  ASSERT_TRUE(merged.ok()) << merged.status();
  std::vector<int64_t> rest;
  for (int rank = 0; rank < 3; ++rank) {
    LoaderOptions o = EvalOptions(d.manifest);
    o.world_size = 3;
    o.rank = rank;
    auto l = *Loader::Create(o);
    ASSERT_TRUE(l->restore(*merged).ok());
    auto ids = DrainIds(l.get());
    EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
    rest.insert(rest.end(), ids.begin(), ids.end());
  }
  for (int64_t id : rest) EXPECT_EQ(delivered.count(id), 0u) << id;
  std::set<int64_t> both(rest.begin(), rest.end());
  EXPECT_EQ(both.size(), rest.size());
  both.insert(delivered.begin(), delivered.end());
  EXPECT_EQ(static_cast<int64_t>(both.size()), d.samples);  // nothing lost, nothing dropped
}

TEST(LoaderEvalTest, StatesOfEvalAndTrainDoNotMix) {
  // The two modes lay an epoch out in different orders: a state of one
  // restored into the other would map positions to the wrong samples.
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{4, 10});
  LoaderOptions eval = EvalOptions(d.manifest);
  LoaderOptions train = FieldOptions(d.manifest);
  train.batch_size = 4;
  train.shuffle_buffer = 0;
  auto e = *Loader::Create(eval);
  DrainIds(e.get(), 2);
  auto t = *Loader::Create(train);
  DrainIds(t.get(), 2);
  EXPECT_EQ((*Loader::Create(train))->restore(*e->state()).code(), StatusCode::kConfig);
  EXPECT_EQ((*Loader::Create(eval))->restore(*t->state()).code(), StatusCode::kConfig);
  EXPECT_TRUE((*Loader::Create(eval))->restore(*e->state()).ok());
}

TEST(LoaderEvalTest, RefusesDropAndPad) {
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{2, 5});
  LoaderOptions o = EvalOptions(d.manifest);
  o.drop_last = true;
  EXPECT_EQ(Loader::Create(o).status().code(), StatusCode::kConfig);
  o.drop_last = false;
  o.pad_remainder = true;
  EXPECT_EQ(Loader::Create(o).status().code(), StatusCode::kConfig);
}

TEST(PlanSpreadTest, SpansDifferByAtMostOneAndCoverEverySample) {
  std::vector<int64_t> counts = {5, 0, 17, 3, 9};  // 34 samples
  PlanOptions po;
  po.world_size = 4;
  po.num_workers = 2;
  po.in_order = true;
  po.remainder = Remainder::kSpread;
  auto plan = EpochPlan::Create(counts, "fp", po);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->dropped(), 0);
  EXPECT_EQ(plan->padded(), 0);
  int64_t next = 0, total = 0;
  for (int r = 0; r < 4; ++r) {
    for (int w = 0; w < 2; ++w) {
      ConsumerPlan c = plan->Consumer(r, w);
      EXPECT_TRUE(c.num_samples == 4 || c.num_samples == 5) << c.num_samples;
      for (const ShardRange& range : c.ranges) {
        EXPECT_EQ(range.position, next);
        EXPECT_FALSE(range.repeat);
        next += range.size();
      }
      total += c.num_samples;
    }
  }
  EXPECT_EQ(total, 34);
  EXPECT_EQ(next, 34);
  // In order: the first consumer starts at shard 0.
  EXPECT_EQ(plan->Consumer(0, 0).ranges.front().shard, 0);
  po.node_local = true;
  po.local_world_size = 2;
  EXPECT_EQ(EpochPlan::Create(counts, "fp", po).status().code(), StatusCode::kConfig);
}

}  // namespace
}  // namespace shardstream
