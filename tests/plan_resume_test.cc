// Resume: deliver part of an epoch through DeliveryTrackers (out of order, as
// a shuffle buffer would), save the state, resume with another topology, and
// check every planned sample is delivered exactly once overall.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "shardstream/delivery_tracker.h"
#include "shardstream/resume_state.h"
#include "shardstream/shard_split.h"

namespace shardstream {
namespace {

struct Delivery {
  int64_t shard, sample, position;
  bool repeat;
};

// Delivers up to `stop` samples of `plan` in a shuffle-buffer order, marking
// each in `tracker`.
void Deliver(const ConsumerPlan& plan, int64_t stop, std::mt19937_64& g, DeliveryTracker* tracker,
             std::vector<Delivery>* out) {
  const size_t buffer_size = 1 + g() % 16;
  std::vector<Delivery> buffer;
  std::set<int64_t> taken;
  int64_t delivered = 0;
  auto pop = [&] {
    size_t i = g() % buffer.size();
    Delivery d = buffer[i];
    buffer[i] = buffer.back();
    buffer.pop_back();
    ASSERT_TRUE(tracker->MarkDelivered(d.shard, d.sample).ok());
    // A padded plan can hold one sample at two positions; the tracker
    // credits the first untaken one (a copy is a copy), and so do we.
    for (const ShardRange& r : plan.ranges) {
      if (r.shard != d.shard || d.sample < r.first || d.sample >= r.end) continue;
      int64_t pos = r.position + d.sample - r.first;
      if (taken.insert(pos).second) {
        d.position = pos;
        d.repeat = r.repeat;
        break;
      }
    }
    out->push_back(d);
    ++delivered;
  };
  for (const ShardRange& r : plan.ranges) {
    for (int64_t s = r.first; s < r.end; ++s) {
      if (delivered >= stop) return;
      buffer.push_back({r.shard, s, r.position + (s - r.first), r.repeat});
      if (buffer.size() >= buffer_size) pop();
    }
  }
  while (!buffer.empty() && delivered < stop) pop();
}

PlanOptions RandomTopology(std::mt19937_64& g, const PlanOptions& base) {
  PlanOptions o = base;
  o.world_size = 1 + static_cast<int>(g() % 12);
  o.num_workers = 1 + static_cast<int>(g() % 6);
  o.remainder = g() % 2 ? Remainder::kPad : Remainder::kDrop;
  o.node_local = false;
  return o;
}

TEST(ResumeTest, RandomCutPointsDeliverEverySampleExactlyOnce) {
  std::mt19937_64 g(99);
  for (int iter = 0; iter < 150; ++iter) {
    const size_t shards = 1 + g() % 200;
    std::vector<int64_t> counts(shards);
    for (auto& c : counts) c = static_cast<int64_t>(g() % 40);
    counts[0] += 1;  // at least one sample
    PlanOptions o = RandomTopology(g, PlanOptions());
    o.seed = g();
    o.epoch = static_cast<int64_t>(g() % 3);
    if (g() % 3 == 0) {  // start in node-local mode
      o.world_size = 4;
      o.node_local = true;
      o.local_world_size = 2;
      o.remainder = Remainder::kDrop;
    }
    auto first = EpochPlan::Create(counts, "fp", o);
    if (!first.ok()) continue;  // e.g. more nodes than shards can fill
    SCOPED_TRACE("iter " + std::to_string(iter));
    // Position -> sample as the first plan laid it out.
    std::map<int64_t, std::pair<int64_t, int64_t>> sample_at;
    for (int r = 0; r < o.world_size; ++r)
      for (int w = 0; w < o.num_workers; ++w)
        for (const ShardRange& sr : first->Consumer(r, w).ranges)
          for (int64_t s = sr.first; s < sr.end; ++s)
            sample_at[sr.position + s - sr.first] = {sr.shard, s};
    const int64_t planned = first->base()->positions();
    ASSERT_EQ(static_cast<int64_t>(sample_at.size()), planned);

    std::vector<Delivery> all;
    const EpochPlan* plan = &*first;
    std::optional<EpochPlan> resumed;
    // Up to three stages, each cut at random points, then one to the end.
    const int stages = 2 + static_cast<int>(g() % 2);
    for (int stage = 0; stage < stages; ++stage) {
      const bool last = stage == stages - 1;
      std::vector<ResumeState> states;
      const PlanOptions& po = plan->options();
      for (int r = 0; r < po.world_size; ++r) {
        for (int w = 0; w < po.num_workers; ++w) {
          ConsumerPlan cp = plan->Consumer(r, w);
          DeliveryTracker tracker(cp);
          int64_t stop = last ? cp.num_samples
                              : static_cast<int64_t>(g() % static_cast<uint64_t>(cp.num_samples + 1));
          Deliver(cp, stop, g, &tracker, &all);
          if (HasFatalFailure()) return;
          EXPECT_EQ(tracker.delivered(), stop);
          states.push_back(tracker.State());
        }
      }
      if (last) {
        // Everything planned was delivered once, except what the last plan
        // dropped; repeats are extra copies.
        std::map<int64_t, int> times;
        for (const Delivery& d : all) {
          ASSERT_EQ(sample_at.at(d.position), std::make_pair(d.shard, d.sample))
              << "position " << d.position << " maps to another sample after resume";
          if (!d.repeat) ++times[d.position];
        }
        for (auto& [pos, n] : times) ASSERT_EQ(n, 1) << "position " << pos << " delivered twice";
        EXPECT_EQ(static_cast<int64_t>(times.size()) + plan->dropped(), planned);
        break;
      }
      auto merged = MergeResumeStates(states);
      ASSERT_TRUE(merged.ok()) << merged.status();
      // Through the wire formats, alternately.
      auto decoded = stage % 2 ? ResumeState::FromBytes(merged->ToBytes())
                               : ResumeState::FromJson(merged->ToJson());
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      PlanOptions next = RandomTopology(g, o);
      auto made = EpochPlan::Create(counts, "fp", next, &*decoded);
      ASSERT_TRUE(made.ok()) << made.status();
      // Equal counts for the new consumers too.
      const int64_t m = planned - decoded->DeliveredCount();
      if (next.remainder == Remainder::kDrop)
        EXPECT_EQ(made->samples_per_consumer() * made->num_consumers() + made->dropped(), m);
      else
        EXPECT_EQ(made->samples_per_consumer() * made->num_consumers(), m + made->padded());
      resumed.emplace(std::move(made).value());
      plan = &*resumed;
    }
  }
}

TEST(ResumeTest, StateFromAnotherManifestOrEpochIsRefused) {
  Manifest a, b;
  a.shards = {ShardEntry{"a.tar", "a.tar", 10, 5, "", {}}, ShardEntry{"b.tar", "b.tar", 10, 5, "", {}}};
  b = a;
  b.shards[1].nsamples = 6;
  PlanOptions o;
  auto plan = EpochPlan::Create(a, o);
  ASSERT_TRUE(plan.ok());
  ResumeState state = DeliveryTracker(plan->ThisConsumer()).State();
  auto other = EpochPlan::Create(b, o, &state);
  EXPECT_EQ(other.status().code(), StatusCode::kConfig);
  EXPECT_NE(other.status().message().find("another data set"), std::string::npos)
      << other.status();
  o.epoch = 1;
  auto later = EpochPlan::Create(a, o, &state);
  EXPECT_EQ(later.status().code(), StatusCode::kConfig);
  EXPECT_NE(later.status().message().find("epoch 0"), std::string::npos) << later.status();
}

TEST(DeliveryTrackerTest, OutOfOrderThenPrefixCompacts) {
  std::vector<int64_t> counts = {10};
  auto plan = EpochPlan::Create(counts, "fp", PlanOptions());
  ASSERT_TRUE(plan.ok());
  ConsumerPlan cp = plan->ThisConsumer();
  DeliveryTracker t(cp);
  for (int64_t s : {3, 0, 1, 5}) ASSERT_TRUE(t.MarkDelivered(0, s).ok());
  ResumeState st = t.State();
  const int64_t p = cp.ranges[0].position;
  EXPECT_EQ(st.delivered, (std::vector<std::pair<int64_t, int64_t>>{{p, p + 2}, {p + 3, p + 4},
                                                                    {p + 5, p + 6}}));
  ASSERT_TRUE(t.MarkDelivered(0, 2).ok());
  EXPECT_EQ(t.State().delivered, (std::vector<std::pair<int64_t, int64_t>>{{p, p + 4}, {p + 5, p + 6}}));
  EXPECT_EQ(t.delivered(), 5);
  EXPECT_EQ(t.remaining(), 5);
  Status twice = t.MarkDelivered(0, 3);
  EXPECT_EQ(twice.code(), StatusCode::kConfig);
  EXPECT_NE(twice.message().find("delivered twice"), std::string::npos);
  EXPECT_NE(t.MarkDelivered(1, 0).message().find("not in this consumer's plan"), std::string::npos);
  EXPECT_NE(t.MarkDelivered(0, 10).message().find("not in this consumer's plan"), std::string::npos);
}

TEST(DeliveryTrackerTest, OneTrackerForAllWorkersOfARank) {
  std::vector<int64_t> counts = {5, 8, 3, 9, 6};
  PlanOptions o;
  o.world_size = 2;
  o.num_workers = 3;
  auto plan = EpochPlan::Create(counts, "fp", o);
  ASSERT_TRUE(plan.ok());
  std::vector<ConsumerPlan> rank1 = {plan->Consumer(1, 0), plan->Consumer(1, 1), plan->Consumer(1, 2)};
  DeliveryTracker t(rank1);
  EXPECT_EQ(t.remaining(), 3 * plan->samples_per_consumer());
  // Deliver worker 2's samples, then worker 0's first one: consumed order.
  for (const ShardRange& r : rank1[2].ranges) ASSERT_TRUE(t.MarkDelivered(r.shard, r.first, r.end).ok());
  ASSERT_TRUE(t.MarkDelivered(rank1[0].ranges[0].shard, rank1[0].ranges[0].first).ok());
  ResumeState st = t.State();
  EXPECT_EQ(st.DeliveredCount(), plan->samples_per_consumer() + 1);
  // The rest of the epoch, on one consumer, is everything else.
  auto rest = EpochPlan::Create(counts, "fp", PlanOptions(), &st);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(rest->samples_per_consumer(), plan->base()->positions() - st.DeliveredCount());
  // A sample of rank 0 is not in rank 1's tracker.
  const ShardRange other = plan->Consumer(0, 0).ranges[0];
  EXPECT_EQ(t.MarkDelivered(other.shard, other.first).code(), StatusCode::kConfig);
}

TEST(ResumeStateTest, JsonAndBytesRoundTrip) {
  ResumeState s;
  s.fingerprint = "xxh3_128:00112233445566778899aabbccddeeff";
  s.seed = 0xfedcba9876543210ULL;
  s.epoch = 7;
  s.nodes = 2;
  s.segment_length = 1000000;
  s.delivered = {{0, 300}, {500, 501}, {1000000, 1000200}, {1999999, 2000000}};
  auto j = ResumeState::FromJson(s.ToJson());
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_TRUE(j->SameEpoch(s));
  EXPECT_EQ(j->delivered, s.delivered);
  std::string bytes = s.ToBytes();
  EXPECT_LT(bytes.size(), 100u);  // compact: varints and deltas
  auto b = ResumeState::FromBytes(bytes);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->SameEpoch(s));
  EXPECT_EQ(b->delivered, s.delivered);
  EXPECT_EQ(b->DeliveredCount(), 300 + 1 + 200 + 1);
}

TEST(ResumeStateTest, IntersectKeepsOnlyWhatEveryStateDelivered) {
  ResumeState a;
  a.fingerprint = "fp";
  a.segment_length = 100;
  a.delivered = {{0, 40}, {50, 60}, {90, 100}};
  ResumeState b = a;
  b.delivered = {{10, 55}, {58, 95}};
  ResumeState c = a;
  c.delivered = {{0, 100}};
  auto both = IntersectResumeStates({a, b, c});
  ASSERT_TRUE(both.ok()) << both.status();
  const std::vector<std::pair<int64_t, int64_t>> want = {{10, 40}, {50, 55}, {58, 60}, {90, 95}};
  EXPECT_EQ(both->delivered, want);
  EXPECT_TRUE(both->SameEpoch(a));
  // The union of the same states, for contrast.
  auto all = MergeResumeStates({a, b});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->delivered, (std::vector<std::pair<int64_t, int64_t>>{{0, 100}}));
  // Disjoint: nothing delivered by both.
  ResumeState d = a;
  d.delivered = {{40, 50}};
  EXPECT_TRUE(IntersectResumeStates({a, d})->delivered.empty());
  ResumeState other = a;
  other.seed = 7;
  EXPECT_EQ(IntersectResumeStates({a, other}).status().code(), StatusCode::kConfig);
  EXPECT_EQ(IntersectResumeStates({}).status().code(), StatusCode::kConfig);
}

TEST(ResumeStateTest, DamagedStatesAreRefused) {
  ResumeState s;
  s.fingerprint = "fp";
  s.segment_length = 100;
  s.delivered = {{10, 20}};
  std::string bytes = s.ToBytes();
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x01;
    EXPECT_FALSE(ResumeState::FromBytes(bad).ok()) << "flipped byte " << i;
  }
  EXPECT_EQ(ResumeState::FromBytes(bytes.substr(0, bytes.size() - 1)).status().code(),
            StatusCode::kCorrupt);
  std::string v2 = bytes;
  v2[4] = 2;
  EXPECT_EQ(ResumeState::FromBytes(v2).status().code(), StatusCode::kConfig);
  EXPECT_EQ(ResumeState::FromJson("{").status().code(), StatusCode::kCorrupt);
  // Found by tests/fuzz/resume_state_fuzz.cc: a non-string "format" used to throw.
  EXPECT_EQ(ResumeState::FromJson("{\"format\": 2}").status().code(), StatusCode::kCorrupt);
  std::string json = s.ToJson();
  auto outside = json.replace(json.find("[[10,20]]"), 9, "[[90,120]]");
  auto r = ResumeState::FromJson(outside);
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status().message().find("outside"), std::string::npos) << r.status();
  ResumeState other = s;
  other.epoch = 1;
  EXPECT_EQ(MergeResumeStates({s, other}).status().code(), StatusCode::kConfig);
}

}  // namespace
}  // namespace shardstream
