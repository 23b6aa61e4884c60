#include "plan/layout.h"

#include <algorithm>
#include <numeric>

#include "plan/prng.h"

namespace shardstream::internal {

std::vector<std::vector<uint32_t>> AssignNodes(const std::vector<int64_t>& counts, uint64_t seed,
                                               int64_t nodes) {
  const size_t n = counts.size();
  std::vector<std::vector<uint32_t>> out(static_cast<size_t>(nodes));
  if (nodes == 1) {
    out[0].resize(n);
    std::iota(out[0].begin(), out[0].end(), 0u);
    return out;
  }
  // Lay the shards out in a seeded random order (not manifest order, which
  // often follows time or source), concatenate their samples, and cut that
  // sequence into `nodes` equal parts: a shard belongs to the part where it
  // starts. Each node's total is then within one shard's samples of total /
  // nodes, in O(shards) without a sort or a heap.
  std::vector<uint32_t> visit(n);
  std::iota(visit.begin(), visit.end(), 0u);
  Xoshiro256 rng(DeriveSeed(seed, Domain::kNodeAssign, static_cast<uint64_t>(nodes)));
  FisherYates(visit.data(), n, rng);
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  std::vector<uint32_t> node_of(n);
  int64_t start = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t s = visit[i];
    // Without samples, cut by shard count instead.
    const __int128 num = total > 0 ? static_cast<__int128>(start) * nodes
                                   : static_cast<__int128>(i) * nodes;
    const int64_t node = static_cast<int64_t>(num / (total > 0 ? total : static_cast<int64_t>(n)));
    // Empty shards after the last sample start at `total`: keep them in range.
    node_of[s] = static_cast<uint32_t>(std::min(node, nodes - 1));
    start += counts[s];
  }
  // Each node's list in ascending shard order, the canonical start for the
  // per-epoch shuffle.
  for (size_t s = 0; s < n; ++s) out[node_of[s]].push_back(static_cast<uint32_t>(s));
  return out;
}

std::vector<Segment> BuildSegments(const std::vector<int64_t>& counts, uint64_t seed,
                                   int64_t epoch, int64_t nodes, bool in_order,
                                   const std::vector<uint32_t>& node_of) {
  std::vector<std::vector<uint32_t>> assigned;
  if (node_of.empty()) {
    assigned = AssignNodes(counts, seed, nodes);
  } else {
    assigned.resize(static_cast<size_t>(nodes));
    for (size_t s = 0; s < node_of.size(); ++s) assigned[node_of[s]].push_back(static_cast<uint32_t>(s));
  }
  std::vector<Segment> segments(assigned.size());
  for (size_t j = 0; j < assigned.size(); ++j) {
    Segment& seg = segments[j];
    seg.order = std::move(assigned[j]);
    if (!in_order) {
      Xoshiro256 rng(DeriveSeed(seed, Domain::kShardOrder, static_cast<uint64_t>(epoch), j));
      FisherYates(seg.order.data(), seg.order.size(), rng);
    }
    seg.prefix.resize(seg.order.size() + 1);
    seg.prefix[0] = 0;
    for (size_t i = 0; i < seg.order.size(); ++i)
      seg.prefix[i + 1] = seg.prefix[i] + counts[seg.order[i]];
  }
  return segments;
}

void EmitRanges(const std::vector<Segment>& segments, int64_t segment_length, int64_t a,
                int64_t b, bool repeat, std::vector<ShardRange>* out) {
  while (a < b) {
    const int64_t j = a / segment_length;
    const int64_t seg_end = std::min(b, (j + 1) * segment_length);
    const Segment& seg = segments[static_cast<size_t>(j)];
    const int64_t n = seg.samples();
    int64_t real = (a - j * segment_length) % n;
    // The shard holding `real`: the last i with prefix[i] <= real, which
    // skips shards with no samples.
    size_t i = static_cast<size_t>(
        std::upper_bound(seg.prefix.begin(), seg.prefix.end(), real) - seg.prefix.begin() - 1);
    int64_t pos = a;
    while (pos < seg_end) {
      const int64_t first = real - seg.prefix[i];
      const int64_t take = std::min(seg.prefix[i + 1] - real, seg_end - pos);
      out->push_back(ShardRange{seg.order[i], first, first + take, pos, repeat});
      pos += take;
      real += take;
      if (real == n) {  // padding wraps to the segment's start
        real = 0;
        i = 0;
      }
      while (seg.prefix[i + 1] <= real) ++i;
    }
    a = seg_end;
  }
}

}  // namespace shardstream::internal
