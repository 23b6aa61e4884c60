#include "plan/layout.h"

#include <algorithm>
#include <numeric>
#include <queue>

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
  // Seeded tie-break, so that equal-sized shards spread over nodes at random
  // rather than by manifest position.
  std::vector<uint32_t> tie(n);
  std::iota(tie.begin(), tie.end(), 0u);
  Xoshiro256 rng(DeriveSeed(seed, Domain::kNodeAssign, static_cast<uint64_t>(nodes)));
  FisherYates(tie.data(), n, rng);
  std::vector<uint32_t> rank(n);
  for (size_t i = 0; i < n; ++i) rank[tie[i]] = static_cast<uint32_t>(i);
  std::vector<uint32_t> by_size(n);
  std::iota(by_size.begin(), by_size.end(), 0u);
  std::sort(by_size.begin(), by_size.end(), [&](uint32_t x, uint32_t y) {
    return counts[x] != counts[y] ? counts[x] > counts[y] : rank[x] < rank[y];
  });
  // Longest-processing-time greedy: within one largest shard of balanced.
  using Load = std::pair<int64_t, int64_t>;  // (samples, node)
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> heap;
  for (int64_t j = 0; j < nodes; ++j) heap.emplace(0, j);
  for (uint32_t s : by_size) {
    auto [load, j] = heap.top();
    heap.pop();
    out[static_cast<size_t>(j)].push_back(s);
    heap.emplace(load + counts[s], j);
  }
  for (auto& v : out) std::sort(v.begin(), v.end());
  return out;
}

std::vector<Segment> BuildSegments(const std::vector<int64_t>& counts, uint64_t seed,
                                   int64_t epoch, int64_t nodes) {
  std::vector<std::vector<uint32_t>> assigned = AssignNodes(counts, seed, nodes);
  std::vector<Segment> segments(assigned.size());
  for (size_t j = 0; j < assigned.size(); ++j) {
    Segment& seg = segments[j];
    seg.order = std::move(assigned[j]);
    Xoshiro256 rng(DeriveSeed(seed, Domain::kShardOrder, static_cast<uint64_t>(epoch), j));
    FisherYates(seg.order.data(), seg.order.size(), rng);
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
