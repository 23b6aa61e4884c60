#include "plan/epoch_layout.h"

#include <algorithm>
#include <cmath>

#include "plan/layout.h"
#include "plan/prng.h"

namespace shardstream::internal {

void EpochLayout::AddStream(Stream stream) {
  stream_of_.resize(stream.end, static_cast<int>(streams_.size()));
  streams_.push_back(std::move(stream));
}

Status EpochLayout::LayOut(const ShardTable& manifest, int64_t e, int64_t nodes) {
  // Samples each stream gives this epoch.
  std::vector<int64_t> quota(streams_.size());
  const bool weighted = options_.front().weight >= 0;
  double weights = 0;
  int64_t total = 0;
  for (size_t k = 0; k < streams_.size(); ++k) {
    weights += std::max(0.0, options_[k].weight);
    total += streams_[k].samples;
  }
  const int64_t size = epoch_size_ > 0 ? epoch_size_ : total;
  if (weighted) {
    // Largest remainders, so that the shares add up to epoch_size exactly
    // (ties to the earlier stream).
    std::vector<std::pair<double, size_t>> rests;
    int64_t given = 0;
    for (size_t k = 0; k < streams_.size(); ++k) {
      const double exact = static_cast<double>(size) * options_[k].weight / weights;
      quota[k] = static_cast<int64_t>(std::floor(exact));
      given += quota[k];
      rests.emplace_back(exact - static_cast<double>(quota[k]), k);
    }
    std::stable_sort(rests.begin(), rests.end(),
                     [](const auto& x, const auto& y) { return x.first > y.first; });
    for (size_t i = 0; given < size && i < rests.size(); ++i, ++given) ++quota[rests[i].second];
  }
  for (size_t k = 0; k < streams_.size() && !weighted; ++k) {
    const MixStream& so = options_[k];
    if (so.choose >= 0) {
      quota[k] = so.choose;
    } else {
      quota[k] = std::llround((so.repeat >= 0 ? so.repeat : 1.0) * static_cast<double>(streams_[k].samples));
    }
  }
  shards_.clear();
  real_.clear();
  offset_.clear();
  node_.clear();
  auto take = [&](size_t shard, int64_t count, uint32_t node) {
    ShardEntry entry = manifest[shard];
    entry.nsamples = count;
    shards_.push_back(std::move(entry));
    real_.push_back(static_cast<int64_t>(shard));
    offset_.push_back(0);
    node_.push_back(node);
  };
  for (size_t k = 0; k < streams_.size(); ++k) {
    const Stream& st = streams_[k];
    // The stream's shards by node, the same in every epoch (seed, stream,
    // nodes), so a node's cache keeps serving it.
    std::vector<std::vector<size_t>> mine(static_cast<size_t>(nodes));
    if (nodes == 1) {
      for (size_t i = st.begin; i < st.end; ++i) mine[0].push_back(i);
    } else {
      std::vector<int64_t> counts;
      for (size_t i = st.begin; i < st.end; ++i) counts.push_back(manifest.nsamples(i));
      auto assigned = internal::AssignNodes(
          counts, internal::DeriveSeed(seed_, internal::Domain::kNodeAssign, k), nodes);
      for (size_t j = 0; j < assigned.size(); ++j)
        for (uint32_t i : assigned[j]) mine[j].push_back(st.begin + i);
    }
    // The stream's quota split between nodes by their samples of it (largest
    // remainders, ties to the lower node).
    std::vector<int64_t> have(mine.size(), 0), share(mine.size(), 0);
    for (size_t j = 0; j < mine.size(); ++j)
      for (size_t i : mine[j]) have[j] += manifest.nsamples(i);
    std::vector<std::pair<int64_t, size_t>> rests;
    int64_t given = 0;
    for (size_t j = 0; j < mine.size(); ++j) {
      const __int128 exact = static_cast<__int128>(quota[k]) * have[j];
      share[j] = static_cast<int64_t>(exact / st.samples);
      given += share[j];
      rests.emplace_back(static_cast<int64_t>(exact % st.samples), j);
    }
    std::stable_sort(rests.begin(), rests.end(),
                     [](const auto& x, const auto& y) { return x.first > y.first; });
    for (size_t i = 0; given < quota[k] && i < rests.size(); ++i, ++given) ++share[rests[i].second];
    for (size_t j = 0; j < mine.size(); ++j) {
      if (have[j] == 0) continue;
      const uint32_t node = static_cast<uint32_t>(j);
      const int64_t passes = share[j] / have[j], rest = share[j] % have[j];
      for (int64_t p = 0; p < passes; ++p)
        for (size_t i : mine[j]) take(i, manifest.nsamples(i), node);
      if (rest == 0) continue;
      // The rest: whole shards in a seeded order, the last one in part.
      std::vector<size_t> order = mine[j];
      internal::Xoshiro256 rng(internal::DeriveSeed(seed_, internal::Domain::kMix,
                                                    static_cast<uint64_t>(e), k,
                                                    nodes == 1 ? 0 : j + 1));
      internal::FisherYates(order.data(), order.size(), rng);
      int64_t left = rest;
      for (size_t i : order) {
        if (left == 0) break;
        const int64_t n = std::min(left, manifest.nsamples(i));
        if (n > 0) take(i, n, node);
        left -= n;
      }
    }
  }
  return Status::OK();
}

std::string EpochLayout::Fingerprint() const {
  std::string f = "/mix:" + std::to_string(epoch_size_);
  for (size_t k = 0; k < streams_.size(); ++k) {
    const MixStream& so = options_[k];
    f += ";" + std::to_string(streams_[k].begin) + "-" + std::to_string(streams_[k].end) + ":" +
         std::to_string(so.weight) + "," + std::to_string(so.repeat) + "," + std::to_string(so.choose);
  }
  return f;
}

}  // namespace shardstream::internal
