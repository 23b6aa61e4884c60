// Properties of EpochPlan over many random manifests and topologies, plus a
// golden order that pins the PRNG and the shuffle.
#include "shardstream/shard_split.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "plan/prng.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using Intervals = std::vector<std::pair<int64_t, int64_t>>;

std::vector<int64_t> RandomCounts(std::mt19937_64& g, size_t shards, int64_t max_count) {
  std::vector<int64_t> counts(shards);
  for (auto& c : counts) {
    // Uneven: mostly large shards, some small, a few empty.
    uint64_t kind = g() % 10;
    c = kind == 0 ? 0 : kind < 3 ? static_cast<int64_t>(g() % 5) : static_cast<int64_t>(g() % (max_count + 1));
  }
  return counts;
}

int64_t LogUniform(std::mt19937_64& g, int64_t lo, int64_t hi) {
  double x = std::log(static_cast<double>(lo)) +
             (std::log(static_cast<double>(hi)) - std::log(static_cast<double>(lo))) *
                 (static_cast<double>(g() >> 11) * 0x1.0p-53);
  return std::clamp<int64_t>(static_cast<int64_t>(std::exp(x)), lo, hi);
}

// Checks one epoch over all consumers: equal counts, contiguous positions,
// valid ranges, at most two partial shards per consumer, and exact coverage
// (drop: every sample at most once, the rest counted as dropped; pad: every
// sample at least once, the extra counted as padded).
void CheckEpoch(const std::vector<int64_t>& counts, const EpochPlan& plan) {
  const PlanOptions& o = plan.options();
  const int64_t n = plan.samples_per_consumer();
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<Intervals> covered(counts.size());
  int64_t sum = 0;
  for (int r = 0; r < o.world_size; ++r) {
    for (int w = 0; w < o.num_workers; ++w) {
      ConsumerPlan cp = plan.Consumer(r, w);
      ASSERT_EQ(cp.num_samples, n);
      int64_t pos = cp.consumer * n, got = 0, partial = 0;
      for (const ShardRange& sr : cp.ranges) {
        ASSERT_GE(sr.shard, 0);
        ASSERT_LT(sr.shard, static_cast<int64_t>(counts.size()));
        ASSERT_LE(0, sr.first);
        ASSERT_LT(sr.first, sr.end);
        ASSERT_LE(sr.end, counts[static_cast<size_t>(sr.shard)]);
        ASSERT_EQ(sr.position, pos) << "positions of a consumer are one contiguous span";
        ASSERT_FALSE(sr.repeat);
        pos += sr.size();
        got += sr.size();
        partial += sr.size() < counts[static_cast<size_t>(sr.shard)];
        covered[static_cast<size_t>(sr.shard)].emplace_back(sr.first, sr.end);
      }
      ASSERT_EQ(got, n) << "consumer " << cp.consumer;
      if (o.remainder == Remainder::kDrop) ASSERT_LE(partial, 2) << "consumer " << cp.consumer;
      sum += got;
    }
  }
  ASSERT_EQ(sum, n * plan.num_consumers());
  for (size_t s = 0; s < counts.size(); ++s) {
    auto& iv = covered[s];
    std::sort(iv.begin(), iv.end());
    if (o.remainder == Remainder::kDrop) {
      for (size_t i = 1; i < iv.size(); ++i)
        ASSERT_LE(iv[i - 1].second, iv[i].first) << "overlap in shard " << s;
    } else if (n > 0) {
      int64_t reach = 0;  // union must be [0, count)
      for (auto& [a, b] : iv) {
        ASSERT_LE(a, reach) << "gap in shard " << s;
        reach = std::max(reach, b);
      }
      ASSERT_EQ(reach, counts[s]) << "shard " << s << " not fully read";
    }
  }
  if (o.remainder == Remainder::kDrop) {
    EXPECT_EQ(sum + plan.dropped(), total);
    EXPECT_EQ(plan.padded(), 0);
  } else {
    EXPECT_EQ(sum, total + plan.padded());
    EXPECT_EQ(plan.dropped(), 0);
  }
  if (!o.node_local && o.remainder == Remainder::kDrop)
    EXPECT_LT(plan.dropped(), plan.num_consumers()) << "global drop loses less than one per consumer";
}

// The shard order of an epoch, read over all consumers.
std::vector<int64_t> GlobalOrder(const EpochPlan& plan) {
  std::vector<int64_t> order;
  for (int r = 0; r < plan.options().world_size; ++r)
    for (int w = 0; w < plan.options().num_workers; ++w)
      for (const ShardRange& sr : plan.Consumer(r, w).ranges)
        if (order.empty() || order.back() != sr.shard) order.push_back(sr.shard);
  return order;
}

TEST(EpochPlanTest, RandomManifestsCoverExactlyWithEqualCounts) {
  std::mt19937_64 g(20261121);
  for (int iter = 0; iter < 60; ++iter) {
    // The extremes first: the largest manifest with the most consumers, and
    // a single shard for as many.
    const size_t shards = iter == 0 ? 10000 : iter == 1 ? 1 : static_cast<size_t>(LogUniform(g, 1, 10000));
    std::vector<int64_t> counts = RandomCounts(g, shards, 1 + static_cast<int64_t>(g() % 400));
    PlanOptions o;
    o.seed = g();
    o.epoch = static_cast<int64_t>(g() % 5);
    const int64_t consumers = iter < 2 ? 4096 : LogUniform(g, 1, 4096);
    o.num_workers = static_cast<int>(LogUniform(g, 1, std::min<int64_t>(consumers, 16)));
    o.world_size = static_cast<int>(std::max<int64_t>(1, consumers / o.num_workers));
    o.remainder = g() % 3 == 0 ? Remainder::kPad : Remainder::kDrop;
    if (g() % 3 == 0) {
      o.node_local = true;
      std::vector<int> divisors;
      for (int d = 1; d <= o.world_size; ++d)
        if (o.world_size % d == 0) divisors.push_back(d);
      o.local_world_size = divisors[g() % divisors.size()];
    }
    SCOPED_TRACE("iter " + std::to_string(iter) + ": " + std::to_string(shards) + " shards, W=" +
                 std::to_string(o.world_size) + " K=" + std::to_string(o.num_workers) +
                 (o.node_local ? " node-local L=" + std::to_string(o.local_world_size) : "") +
                 (o.remainder == Remainder::kPad ? " pad" : " drop"));
    auto plan = EpochPlan::Create(counts, "fp", o);
    if (!plan.ok()) {
      // Only a node that owns no samples may fail.
      ASSERT_TRUE(o.node_local) << plan.status();
      ASSERT_NE(plan.status().message().find("gets no samples"), std::string::npos) << plan.status();
      continue;
    }
    CheckEpoch(counts, *plan);
    if (HasFatalFailure()) return;

    // Same inputs, same plan; computed independently.
    auto again = EpochPlan::Create(counts, "fp", o);
    ASSERT_TRUE(again.ok());
    int r = static_cast<int>(g() % static_cast<uint64_t>(o.world_size));
    int w = static_cast<int>(g() % static_cast<uint64_t>(o.num_workers));
    EXPECT_EQ(plan->Consumer(r, w).ranges, again->Consumer(r, w).ranges);
    // PlanConsumer (which may shuffle only a prefix) gives the same plan.
    for (int k = 0; k < 3; ++k) {
      PlanOptions one = o;
      one.rank = k == 0 ? r : k == 1 ? 0 : o.world_size - 1;
      one.worker = k == 0 ? w : k == 1 ? 0 : o.num_workers - 1;
      auto single = PlanConsumer(counts, "fp", one);
      ASSERT_TRUE(single.ok()) << single.status();
      ConsumerPlan want = plan->Consumer(one.rank, one.worker);
      EXPECT_EQ(single->ranges, want.ranges);
      EXPECT_EQ(single->num_samples, want.num_samples);
      EXPECT_TRUE(single->base->SameEpoch(*want.base));
    }

    // Another epoch, another order (same totals).
    if (shards >= 8 && plan->samples_per_consumer() > 0) {
      PlanOptions next = o;
      next.epoch += 1;
      auto other = EpochPlan::Create(counts, "fp", next);
      ASSERT_TRUE(other.ok());
      EXPECT_NE(GlobalOrder(*plan), GlobalOrder(*other));
    }
  }
}

TEST(EpochPlanTest, NodeLocalKeepsShardsOnTheirNodeAcrossEpochs) {
  std::mt19937_64 g(7);
  std::vector<int64_t> counts = RandomCounts(g, 500, 100);
  PlanOptions o;
  o.seed = 3;
  o.world_size = 8;
  o.num_workers = 2;
  o.node_local = true;
  o.local_world_size = 2;  // 4 nodes
  std::map<int64_t, int> node_of;
  int64_t moved = 0, seen = 0;
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    o.epoch = epoch;
    auto plan = EpochPlan::Create(counts, "fp", o);
    ASSERT_TRUE(plan.ok()) << plan.status();
    CheckEpoch(counts, *plan);
    for (int r = 0; r < o.world_size; ++r)
      for (int w = 0; w < o.num_workers; ++w)
        for (const ShardRange& sr : plan->Consumer(r, w).ranges) {
          int node = r / o.local_world_size;
          auto [it, inserted] = node_of.emplace(sr.shard, node);
          ++seen;
          moved += it->second != node;
        }
  }
  EXPECT_GT(seen, 1000);
  EXPECT_EQ(moved, 0) << "a shard was read on two nodes";
  // Balanced nodes drop little: less than one shard's worth per node.
  auto plan = EpochPlan::Create(counts, "fp", o);
  EXPECT_LE(plan->dropped(), 4 * 100);
}

TEST(EpochPlanTest, GoldenOrder) {
  // Changing the PRNG, seeding, bounded ints or the shuffle changes these.
  internal::Xoshiro256 rng(internal::DeriveSeed(42, internal::Domain::kShardOrder, 0, 0));
  EXPECT_EQ(rng.Next(), 17523822711329171951ULL);
  EXPECT_EQ(rng.Bounded(1000), 537u);

  std::vector<int64_t> counts = {3, 5, 2, 7, 1, 4, 6, 2, 0, 9};
  PlanOptions o;
  o.seed = 42;
  o.world_size = 2;
  o.num_workers = 2;
  auto plan = EpochPlan::Create(counts, "fp", o);
  ASSERT_TRUE(plan.ok());
  std::string got;
  for (int r = 0; r < 2; ++r)
    for (int w = 0; w < 2; ++w) {
      got += "|";
      for (const ShardRange& sr : plan->Consumer(r, w).ranges)
        got += " " + std::to_string(sr.shard) + ":" + std::to_string(sr.first) + "-" +
               std::to_string(sr.end);
    }
  EXPECT_EQ(got, "| 9:0-9| 5:0-4 2:0-2 0:0-3| 4:0-1 1:0-5 3:0-3| 3:3-7 7:0-2 6:0-3");
  o.epoch = 1;
  plan = EpochPlan::Create(counts, "fp", o);
  ASSERT_TRUE(plan.ok());
  std::string order;
  for (int64_t s : GlobalOrder(*plan)) order += std::to_string(s) + ",";
  EXPECT_EQ(order, "5,1,4,0,2,3,6,7,9,");
  EXPECT_EQ(plan->samples_per_consumer(), 9);
  EXPECT_EQ(plan->dropped(), 3);

  // Node-local: which node owns which shard is pinned too.
  o.epoch = 0;
  o.node_local = true;
  o.local_world_size = 1;  // 2 nodes
  o.num_workers = 1;
  plan = EpochPlan::Create(counts, "fp", o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::string nodes;
  for (int r = 0; r < 2; ++r) {
    nodes += "|";
    for (const ShardRange& sr : plan->Consumer(r, 0).ranges) nodes += " " + std::to_string(sr.shard);
  }
  EXPECT_EQ(nodes, "| 9 4 2 0 1| 6 3 5 7");
}

TEST(EpochPlanTest, FisherYatesIsUniform) {
  // All 6 orders of 3 items, each near 1/6 of 60,000 shuffles.
  std::map<std::vector<int>, int> seen;
  internal::Xoshiro256 rng(1);
  for (int i = 0; i < 60000; ++i) {
    std::vector<int> v = {0, 1, 2};
    internal::FisherYates(v.data(), v.size(), rng);
    ++seen[v];
  }
  ASSERT_EQ(seen.size(), 6u);
  for (auto& [order, n] : seen) EXPECT_NEAR(n, 10000, 400);
}

TEST(EpochPlanTest, UnknownCountsSplitWholeShardsAndSaySo) {
  auto m = ManifestFromPattern("data-{000..009}.tar");
  ASSERT_TRUE(m.ok());
  PlanOptions o;
  o.world_size = 3;
  auto plan = EpochPlan::Create(*m, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->counts_known());
  EXPECT_NE(plan->caveat().find("sample counts unknown"), std::string::npos);
  EXPECT_EQ(plan->shards_per_consumer(), 3);
  EXPECT_EQ(plan->dropped(), 1);  // one shard
  std::set<int64_t> shards;
  for (int r = 0; r < 3; ++r) {
    ConsumerPlan cp = plan->Consumer(r, 0);
    EXPECT_EQ(cp.num_samples, -1);
    EXPECT_FALSE(cp.caveat.empty());
    ASSERT_EQ(cp.ranges.size(), 3u);
    for (const ShardRange& sr : cp.ranges) {
      EXPECT_EQ(sr.end, ShardRange::kWholeShard);
      EXPECT_TRUE(shards.insert(sr.shard).second);
    }
  }
  ResumeState state = *plan->base();
  EXPECT_EQ(EpochPlan::Create(*m, o, &state).status().code(), StatusCode::kConfig);
}

TEST(EpochPlanTest, BadOptionsAreConfigErrors) {
  std::vector<int64_t> counts = {4, 4};
  auto bad = [&](auto edit) {
    PlanOptions o;
    edit(o);
    return EpochPlan::Create(counts, "fp", o).status().code();
  };
  EXPECT_EQ(bad([](PlanOptions& o) { o.world_size = 0; }), StatusCode::kConfig);
  EXPECT_EQ(bad([](PlanOptions& o) { o.rank = 1; }), StatusCode::kConfig);
  EXPECT_EQ(bad([](PlanOptions& o) { o.num_workers = 2, o.worker = 2; }), StatusCode::kConfig);
  EXPECT_EQ(bad([](PlanOptions& o) { o.world_size = 3, o.node_local = true, o.local_world_size = 2; }),
            StatusCode::kConfig);
  EXPECT_EQ(bad([](PlanOptions& o) {
              o.world_size = 4, o.node_local = true, o.local_world_size = 1;
              o.remainder = Remainder::kPad;
            }),
            StatusCode::kConfig);  // 4 nodes, 2 shards: a node without samples
  EXPECT_EQ(EpochPlan::Create(std::vector<int64_t>{}, "fp", PlanOptions()).status().code(),
            StatusCode::kConfig);
}

TEST(EpochPlanTest, FewerSamplesThanConsumers) {
  std::vector<int64_t> counts = {2, 1};
  PlanOptions o;
  o.world_size = 4;
  auto drop = EpochPlan::Create(counts, "fp", o);
  ASSERT_TRUE(drop.ok());
  EXPECT_EQ(drop->samples_per_consumer(), 0);
  EXPECT_EQ(drop->dropped(), 3);
  EXPECT_TRUE(drop->Consumer(3, 0).ranges.empty());
  o.remainder = Remainder::kPad;
  auto pad = EpochPlan::Create(counts, "fp", o);
  ASSERT_TRUE(pad.ok());
  EXPECT_EQ(pad->samples_per_consumer(), 1);
  EXPECT_EQ(pad->padded(), 1);
  CheckEpoch(counts, *pad);
}

TEST(PlanCliTest, PrintsEveryConsumer) {
  testing::TempDir dir;
  std::string m = dir.Join("m.jsonl");
  testing::WriteFile(m, "{\"url\": \"a.tar\", \"nsamples\": 10}\n{\"url\": \"b.tar\", \"nsamples\": 7}\n");
  std::string out;
  ASSERT_EQ(testing::RunCommand(testing::CliPath() + " plan " + m + " --world-size 2 --workers 2 --json", &out), 0) << out;
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["samples_per_consumer"], 4);
  EXPECT_EQ(j["dropped"], 1);
  ASSERT_EQ(j["consumers"].size(), 4u);
  int64_t total = 0;
  for (auto& c : j["consumers"])
    for (auto& r : c["ranges"]) total += r["end"].get<int64_t>() - r["first"].get<int64_t>();
  EXPECT_EQ(total, 16);
  ASSERT_EQ(testing::RunCommand(testing::CliPath() + " plan " + m + " --world-size 2 --rank 1", &out), 0);
  EXPECT_NE(out.find("rank 1 worker 0: 8 samples"), std::string::npos) << out;
  EXPECT_EQ(out.find("rank 0"), std::string::npos) << out;
  EXPECT_NE(testing::RunCommand(testing::CliPath() + " plan " + m + " --world-size 3 --node-local --local-world-size 2", &out), 0);
  EXPECT_NE(out.find("local_world_size"), std::string::npos) << out;
  ASSERT_EQ(testing::RunCommand(testing::CliPath() + " plan '" + dir.Join("x-{0..3}.tar") + "' --world-size 2", &out), 0);
  EXPECT_NE(out.find("sample counts unknown"), std::string::npos) << out;

  // --resume: the rest of the epoch after 5 delivered samples, on 3 ranks.
  auto manifest = ReadManifest(m);
  ASSERT_TRUE(manifest.ok());
  auto plan = EpochPlan::Create(*manifest, PlanOptions());
  ASSERT_TRUE(plan.ok());
  ResumeState state = *plan->base();
  state.AddDelivered(0, 5);
  testing::WriteFile(dir.Join("state.bin"), state.ToBytes());
  ASSERT_EQ(testing::RunCommand(testing::CliPath() + " plan " + m + " --world-size 3 --resume " +
                                    dir.Join("state.bin"), &out), 0) << out;
  EXPECT_NE(out.find("4 samples each, dropped 0"), std::string::npos) << out;  // (17 - 5) / 3
  testing::WriteFile(dir.Join("other.jsonl"), "{\"url\": \"a.tar\", \"nsamples\": 11}\n");
  EXPECT_NE(testing::RunCommand(testing::CliPath() + " plan " + dir.Join("other.jsonl") +
                                    " --world-size 3 --resume " + dir.Join("state.bin"), &out), 0);
  EXPECT_NE(out.find("another data set"), std::string::npos) << out;
}

}  // namespace
}  // namespace shardstream
