#include "shardstream/resampled_stream.h"

#include <gtest/gtest.h>

namespace shardstream {
namespace {

Manifest Make(const std::string& prefix, std::vector<int64_t> counts) {
  Manifest m;
  m.url = prefix;
  for (size_t i = 0; i < counts.size(); ++i)
    m.shards.push_back(ShardEntry{prefix + std::to_string(i), prefix + std::to_string(i), -1,
                                  counts[i], "", {}});
  return m;
}

TEST(ResampledStreamTest, WeightedBySampleCountAndDeterministic) {
  Manifest m = Make("a", {100, 300, 0, 600});
  PlanOptions o;
  o.seed = 5;
  auto s = ResampledStream::Create({{&m, 1.0}}, o);
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<int> hits(4);
  std::vector<ResampledDraw> first;
  for (int i = 0; i < 100000; ++i) {
    ResampledDraw d = s->Next();
    ++hits[static_cast<size_t>(d.shard)];
    EXPECT_EQ(d.end, m.shards[static_cast<size_t>(d.shard)].nsamples);
    if (i < 50) first.push_back(d);
  }
  EXPECT_EQ(hits[2], 0);  // no samples, never drawn
  EXPECT_NEAR(hits[0], 10000, 600);
  EXPECT_NEAR(hits[1], 30000, 900);
  EXPECT_NEAR(hits[3], 60000, 900);
  // Same inputs, same stream; Seek replays exactly.
  auto again = ResampledStream::Create({{&m, 1.0}}, o);
  again->Seek(20);
  for (int i = 20; i < 50; ++i) EXPECT_EQ(again->Next().shard, first[static_cast<size_t>(i)].shard);
  // Another worker, another stream.
  o.num_workers = 2;
  o.worker = 1;
  auto other = ResampledStream::Create({{&m, 1.0}}, o);
  int same = 0;
  for (int i = 0; i < 50; ++i) same += other->Next().shard == first[static_cast<size_t>(i)].shard;
  EXPECT_LT(same, 40);
}

TEST(ResampledStreamTest, MixesDatasetsByWeight) {
  Manifest a = Make("a", {10, 10});
  Manifest b = Make("b", {1000});
  auto s = ResampledStream::Create({{&a, 3.0}, {&b, 1.0}}, PlanOptions());
  ASSERT_TRUE(s.ok()) << s.status();
  int from_a = 0;
  for (int i = 0; i < 40000; ++i) from_a += s->Next().dataset == 0;
  EXPECT_NEAR(from_a, 30000, 600);
  EXPECT_EQ(s->draws(), 40000u);
}

TEST(ResampledStreamTest, BadInputsAreConfigErrors) {
  Manifest empty = Make("e", {0, 0});
  Manifest a = Make("a", {1});
  EXPECT_EQ(ResampledStream::Create({}, PlanOptions()).status().code(), StatusCode::kConfig);
  EXPECT_EQ(ResampledStream::Create({{&empty, 1}}, PlanOptions()).status().code(), StatusCode::kConfig);
  EXPECT_EQ(ResampledStream::Create({{&a, 0}}, PlanOptions()).status().code(), StatusCode::kConfig);
  EXPECT_EQ(ResampledStream::Create({{nullptr, 1}}, PlanOptions()).status().code(), StatusCode::kConfig);
  // Unknown counts: each shard equally, whole shards.
  auto pattern = ManifestFromPattern("p-{0..3}.tar");
  auto s = ResampledStream::Create({{&*pattern, 1}}, PlanOptions());
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->Next().end, ShardRange::kWholeShard);
}

}  // namespace
}  // namespace shardstream
