// The epoch's position space: the shards of each node (one node outside
// node-local mode) in epoch order, with sample prefix sums, so that a
// position maps to (shard, sample) by binary search.
#ifndef SHARDSTREAM_SRC_PLAN_LAYOUT_H_
#define SHARDSTREAM_SRC_PLAN_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "shardstream/shard_split.h"

namespace shardstream::internal {

struct Segment {
  std::vector<uint32_t> order;   // manifest shard indices in epoch order
  std::vector<int64_t> prefix;   // prefix[i] = samples before order[i]; size order.size() + 1
  int64_t samples() const { return prefix.back(); }
};

// Assigns shards to `nodes` nodes once for all epochs (depends on seed and
// nodes only): the shards in a seeded random order, their samples
// concatenated and cut into `nodes` equal parts; a shard goes to the part
// where it starts. Each node's list ascends.
std::vector<std::vector<uint32_t>> AssignNodes(const std::vector<int64_t>& counts, uint64_t seed,
                                               int64_t nodes);

// The epoch's segments: node j's shards (all shards when nodes == 1) shuffled
// by Fisher-Yates with DeriveSeed(seed, kShardOrder, epoch, j). A non-empty
// `node_of` gives each shard's node instead of AssignNodes.
// REQUIRES: node_of empty, or one value < nodes per shard.
std::vector<Segment> BuildSegments(const std::vector<int64_t>& counts, uint64_t seed,
                                   int64_t epoch, int64_t nodes, bool in_order = false,
                                   const std::vector<uint32_t>& node_of = {});

// Appends the ranges of positions [a, b) to `out`. Segment j holds positions
// [j * segment_length, (j + 1) * segment_length); position q within it is
// sample q mod samples() of its order (wrapping pads).
// REQUIRES: 0 <= a <= b <= segments.size() * segment_length, and every
// segment that [a, b) touches has samples() > 0.
void EmitRanges(const std::vector<Segment>& segments, int64_t segment_length, int64_t a,
                int64_t b, bool repeat, std::vector<ShardRange>* out);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_SRC_PLAN_LAYOUT_H_
