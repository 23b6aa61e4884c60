#include "shardstream/resampled_stream.h"

#include <algorithm>
#include <cmath>

#include "plan/prng.h"

namespace shardstream {

Result<ResampledStream> ResampledStream::Create(const std::vector<WeightedManifest>& datasets,
                                                const PlanOptions& options) {
  if (datasets.empty()) return Status::Config("resampled stream: no datasets");
  if (options.world_size < 1 || options.num_workers < 1 || options.rank < 0 ||
      options.rank >= options.world_size || options.worker < 0 ||
      options.worker >= options.num_workers)
    return Status::Config("resampled stream: rank/worker outside world_size/num_workers");
  ResampledStream s;
  double total_weight = 0;
  for (size_t d = 0; d < datasets.size(); ++d) {
    const WeightedManifest& wm = datasets[d];
    const std::string name = "resampled stream: dataset " + std::to_string(d);
    if (wm.manifest == nullptr) return Status::Config(name + " has no manifest");
    if (!std::isfinite(wm.weight) || wm.weight <= 0)
      return Status::Config(name + " needs a finite weight > 0, got " + std::to_string(wm.weight));
    Dataset ds;
    const bool known = wm.manifest->SampleCountsKnown();
    int64_t sum = 0;
    for (const ShardEntry& e : wm.manifest->shards) {
      sum += known ? e.nsamples : 1;
      ds.cumulative.push_back(sum);
      ds.nsamples.push_back(known ? e.nsamples : -1);
    }
    if (sum == 0) return Status::Config(name + " (" + wm.manifest->url + ") has no samples");
    total_weight += wm.weight;
    s.cumulative_weight_.push_back(total_weight);
    s.datasets_.push_back(std::move(ds));
  }
  const uint64_t consumer =
      static_cast<uint64_t>(options.rank) * static_cast<uint64_t>(options.num_workers) +
      static_cast<uint64_t>(options.worker);
  s.key_ = internal::DeriveSeed(options.seed, internal::Domain::kResampled,
                                static_cast<uint64_t>(options.epoch), consumer);
  return s;
}

ResampledDraw ResampledStream::Next() {
  // A fresh generator per draw, keyed by the draw's index: Seek is free and
  // a draw never depends on how many numbers an earlier one consumed.
  internal::Xoshiro256 rng(internal::Mix64(key_ ^ internal::Mix64(next_++)));
  ResampledDraw draw;
  if (datasets_.size() > 1) {
    const double u = rng.Uniform01() * cumulative_weight_.back();
    auto it = std::upper_bound(cumulative_weight_.begin(), cumulative_weight_.end(), u);
    draw.dataset = static_cast<int>(
        std::min<size_t>(it - cumulative_weight_.begin(), datasets_.size() - 1));
  }
  const Dataset& ds = datasets_[static_cast<size_t>(draw.dataset)];
  const int64_t r = static_cast<int64_t>(rng.Bounded(static_cast<uint64_t>(ds.cumulative.back())));
  // The shard whose cumulative range holds r; zero-sample shards have an
  // empty range and are never chosen.
  draw.shard = std::upper_bound(ds.cumulative.begin(), ds.cumulative.end(), r) -
               ds.cumulative.begin();
  const int64_t n = ds.nsamples[static_cast<size_t>(draw.shard)];
  draw.end = n >= 0 ? n : ShardRange::kWholeShard;
  return draw;
}

}  // namespace shardstream
