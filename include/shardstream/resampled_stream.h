// ResampledStream: an endless stream of shards drawn with replacement,
// weighted by sample count, optionally mixing several data sets by weight
// (like Streaming's streams or WebDataset's resampled=True).
//
// Each consumer (rank x worker) gets its own stream, derived from (seed,
// epoch, consumer); draw i depends only on those and i, so Seek() is O(1)
// and a resume needs only draws(). There are no epochs boundaries and no
// exactly-once guarantee: that is what resampling means.
//
// Thread-safety: not thread-safe; one consumer draws.
#ifndef SHARDSTREAM_RESAMPLED_STREAM_H_
#define SHARDSTREAM_RESAMPLED_STREAM_H_

#include <cstdint>
#include <vector>

#include "shardstream/export.h"
#include "shardstream/manifest.h"
#include "shardstream/result.h"
#include "shardstream/shard_split.h"

namespace shardstream {

struct WeightedManifest {
  const Manifest* manifest = nullptr;  // only read during Create
  double weight = 1.0;                 // relative share of draws. Default: 1
};

struct ResampledDraw {
  int dataset = 0;        // index into the datasets given to Create
  int64_t shard = 0;      // index into that manifest's shards
  int64_t first = 0;      // always 0: a draw is a whole shard
  int64_t end = 0;        // nsamples, or ShardRange::kWholeShard when unknown
};

class SHARDSTREAM_EXPORT ResampledStream {
 public:
  // Uses options.seed, epoch, world_size, rank, num_workers and worker (the
  // rest is ignored). A dataset is chosen with probability weight / sum of
  // weights, then a shard with probability nsamples / dataset samples (each
  // shard equally when counts are unknown).
  // On failure returns kConfig for no datasets, a null manifest, a weight that
  // is not finite and > 0, a dataset without samples, or invalid options.
  static Result<ResampledStream> Create(const std::vector<WeightedManifest>& datasets,
                                        const PlanOptions& options);

  ResampledDraw Next();
  // Draws made (the index of the next draw).
  uint64_t draws() const { return next_; }
  // Continues as if `draws` draws had been made. O(1).
  void Seek(uint64_t draws) { next_ = draws; }

 private:
  ResampledStream() = default;
  struct Dataset {
    std::vector<int64_t> cumulative;  // cumulative weights of shards
    std::vector<int64_t> nsamples;    // -1 when unknown
  };
  std::vector<Dataset> datasets_;
  std::vector<double> cumulative_weight_;
  uint64_t key_ = 0;
  uint64_t next_ = 0;
};

}  // namespace shardstream

#endif  // SHARDSTREAM_RESAMPLED_STREAM_H_
