// ShardLanes' contract with its consumer, checked directly: each lane's
// items come in its ranges' order, every sample exactly once; the consumer
// reads items in their ring slots; and every slot's sample storage is back
// with a reader within one ring of samples, whatever the timing. The last
// two are what keep a lane within `ring` samples and the steady state free
// of allocations; a side array of taken items breaks both.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "pipeline/shard_lanes.h"
#include "support/loader_fixture.h"
#include "support/test_util.h"

namespace shardstream::internal {
namespace {

using shardstream::testing::Dataset;
using shardstream::testing::DatasetSpec;
using shardstream::testing::TempDir;

struct Pop {
  const LaneItem* at = nullptr;       // the item's address
  const void* storage = nullptr;      // its field list's heap storage
  LaneItem::Kind kind = LaneItem::kSample;
  int64_t shard = -1, index = -1;
};

struct Params {
  int threads;
  size_t ring;
  int lanes;
  bool jitter;  // the consumer spins a random while per sample
};

class ShardLanesTest : public ::testing::TestWithParam<Params> {};

TEST_P(ShardLanesTest, ItemsInOrderInTheirSlotsAndStorageBackWithinOneRing) {
  const Params p = GetParam();
  TempDir dir;
  DatasetSpec spec;
  spec.shards = 5;
  spec.samples_per_shard = 97;
  Dataset d = shardstream::testing::WriteDataset(dir.path(), spec);
  ASSERT_EQ(d.shard_paths.size(), 5u);

  // Whole shards and parts of them (read from the start and skipped, or
  // opened at their index), so lanes cross range ends mid-ring.
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> want = {
      {0, 0, 97}, {1, 10, 40}, {2, 0, 97}, {3, 0, 97}, {1, 60, 97}, {4, 5, 96}, {3, 0, 3}};
  std::vector<LaneRange> ranges;
  for (auto [shard, first, end] : want) {
    LaneRange r;
    r.shard = shard;
    r.first = first;
    r.end = end;
    ranges.push_back(r);
  }

  LaneConfig lc;
  lc.ref_of = [&d](int64_t shard) { return ShardRef(d.shard_paths[static_cast<size_t>(shard)]); };
  lc.tar.chunk_size = 64 << 10;  // the least: a shard spans several
  lc.tar.build_index = false;
  lc.ring = p.ring;
  lc.ring_bytes = uint64_t{1} << 30;  // the sample count rules
  lc.lanes = p.lanes;
  lc.threads = p.threads;
  LaneCounters counters;
  std::unique_ptr<ShardLanes> lanes;
  std::vector<std::vector<Pop>> pops(static_cast<size_t>(p.lanes));
  std::vector<size_t> ends(static_cast<size_t>(p.lanes), 0);
  std::mt19937_64 rng(7);
  Status error;
  // The consumer draws lanes at random; it returns the lane it found empty
  // and is called again once that lane has an item.
  int drawn = -1;
  std::promise<void> done;
  lc.consume = [&]() -> int {
    while (true) {
      std::vector<int> open;
      for (int l = 0; l < p.lanes; ++l)
        if (ends[static_cast<size_t>(l)] < lanes->lane_ranges(l).size()) open.push_back(l);
      if (open.empty()) {
        done.set_value();
        return -1;
      }
      if (drawn < 0) drawn = open[rng() % open.size()];
      LaneItem* item = lanes->TryPop(drawn);
      if (item == nullptr) return drawn;
      Pop pop;
      pop.at = item;
      pop.storage = item->sample.fields.data();
      pop.kind = item->kind;
      pop.shard = item->shard;
      pop.index = item->sample.index;
      pops[static_cast<size_t>(drawn)].push_back(pop);
      if (item->kind == LaneItem::kError) {
        error = item->status;
        done.set_value();
        return -1;
      }
      if (item->kind == LaneItem::kEnd) ++ends[static_cast<size_t>(drawn)];
      if (p.jitter) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(rng() % 40);
        while (std::chrono::steady_clock::now() < until) {
        }
      }
      drawn = -1;
    }
  };
  lanes = std::make_unique<ShardLanes>(ranges, lc, &counters);
  lanes->Start();
  const bool finished =
      done.get_future().wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  lanes->Stop();  // before anything the consumer uses goes out of scope
  ASSERT_TRUE(finished) << "the consumer did not finish within 60 s";
  ASSERT_TRUE(error.ok()) << error;

  for (int l = 0; l < p.lanes; ++l) {
    const std::vector<Pop>& seen = pops[static_cast<size_t>(l)];
    SCOPED_TRACE("lane " + std::to_string(l));
    // The lane's ranges in order, each sample once, an end after each range.
    std::vector<std::pair<int64_t, int64_t>> expected, got;
    for (size_t ri : lanes->lane_ranges(l)) {
      auto [shard, first, end] = want[ri];
      for (int64_t i = first; i < end; ++i) expected.emplace_back(shard, i);
      expected.emplace_back(-1, -1);
    }
    for (const Pop& pop : seen)
      got.push_back(pop.kind == LaneItem::kEnd ? std::make_pair(int64_t{-1}, int64_t{-1})
                                               : std::make_pair(pop.shard, pop.index));
    ASSERT_EQ(got, expected);

    // In their slots: pops one ring apart share an address, pops closer
    // than that do not.
    const size_t n = p.ring;
    for (size_t i = 0; i < seen.size(); ++i) {
      if (i + n < seen.size()) ASSERT_EQ(seen[i].at, seen[i + n].at) << "pop " << i;
      for (size_t j = i + 1; j < std::min(seen.size(), i + n); ++j)
        ASSERT_NE(seen[i].at, seen[j].at) << "pops " << i << " and " << j;
    }
    // Storage: at most `ring` distinct field lists, and each seen again
    // within one ring of items (it went back to a reader, which refilled it
    // or wrote a range's end over it, instead of being parked).
    std::map<const void*, size_t> last;
    for (size_t i = 0; i < seen.size(); ++i) {
      if (seen[i].storage == nullptr) continue;  // an end before the slot's first sample
      auto it = last.find(seen[i].storage);
      if (it != last.end()) ASSERT_LE(i - it->second, n) << "storage parked, pop " << i;
      last[seen[i].storage] = i;
    }
    EXPECT_LE(last.size(), n);
  }
}

std::string Name(const ::testing::TestParamInfo<Params>& info) {
  const Params& p = info.param;
  return "threads" + std::to_string(p.threads) + "_ring" + std::to_string(p.ring) + "_lanes" +
         std::to_string(p.lanes) + (p.jitter ? "_jitter" : "");
}

INSTANTIATE_TEST_SUITE_P(Timings, ShardLanesTest,
                         ::testing::Values(Params{1, 32, 3, false}, Params{2, 32, 3, false},
                                           Params{2, 8, 2, true}, Params{2, 64, 1, true},
                                           Params{2, 32, 4, true}),
                         Name);

}  // namespace
}  // namespace shardstream::internal
