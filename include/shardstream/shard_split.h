// Shard plan: which samples of an epoch each consumer (rank x worker) reads,
// and in which order (docs/plan.md).
//
// The epoch's shards are shuffled by our own PRNG (seeded from seed and
// epoch), their samples concatenated, and the sequence cut into equal
// contiguous spans, one per consumer, rank-major then worker-minor. A
// consumer therefore reads whole shards and at most two partial ones, and
// every consumer gets the same number of samples: the remainder is dropped
// (default, counted in dropped()) or filled by wrapping around (padded()).
// In node-local mode shards are assigned to nodes once for all epochs and
// shuffled within the node each epoch, so a node's cache keeps its part.
// Given a ResumeState, the plan lays out exactly the epoch's undelivered
// samples over the (possibly different) consumers.
//
// Thread-safety: EpochPlan is immutable after Create; Consumer() may be
// called concurrently. Copies share the layout.
#ifndef SHARDSTREAM_SHARD_SPLIT_H_
#define SHARDSTREAM_SHARD_SPLIT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardstream/export.h"
#include "shardstream/manifest.h"
#include "shardstream/result.h"
#include "shardstream/resume_state.h"

namespace shardstream {

// Samples [first, end) of manifest shard `shard`, read in that order.
struct ShardRange {
  int64_t shard = 0;   // index into Manifest::shards
  int64_t first = 0;   // first sample
  int64_t end = 0;     // one past the last sample; kWholeShard when counts are unknown
  // Where the range starts in the epoch's position space (see ResumeState);
  // DeliveryTracker uses it. -1 when counts are unknown.
  int64_t position = 0;
  // True for a second copy of samples already in this plan, added to pad a
  // resumed epoch; not recorded in resume states.
  bool repeat = false;

  static constexpr int64_t kWholeShard = -1;
  int64_t size() const { return end - first; }
  bool operator==(const ShardRange& o) const {
    return shard == o.shard && first == o.first && end == o.end && position == o.position &&
           repeat == o.repeat;
  }
};

enum class Remainder {
  kDrop,  // every consumer gets floor(N / consumers); the rest is not read this epoch
  kPad,   // every consumer gets ceil(N / consumers); the first samples are read twice
  // Nothing dropped or read twice: consumer c gets positions
  // [c * N / consumers, (c + 1) * N / consumers), so counts differ by at most
  // one (evaluation, inference). Not with node_local.
  kSpread,
};

struct PlanOptions {
  uint64_t seed = 0;  // Default: 0
  int64_t epoch = 0;  // Default: 0
  int world_size = 1;   // ranks. Default: 1
  int rank = 0;         // this process's rank, for ThisConsumer(). Default: 0
  int num_workers = 1;  // DataLoader workers per rank. Default: 1
  int worker = 0;       // this worker, for ThisConsumer(). Default: 0
  Remainder remainder = Remainder::kDrop;  // Default: kDrop
  // Assign shards to nodes of local_world_size ranks each (world_size must be
  // a multiple), once for all epochs. Default: false
  bool node_local = false;
  int local_world_size = 0;  // ranks per node; required by node_local. Default: 0
  // With node_local: the node of each shard, when the caller lays shards out
  // by node itself (mixed streams keep each stream's shards on their nodes).
  // Empty: the seeded cut described in docs/plan.md. Default: empty
  std::vector<uint32_t> node_of;
  // Shards in manifest order instead of a seeded shuffle (evaluation). Not
  // with node_local. Default: false
  bool in_order = false;
};

// One consumer's part of the epoch.
struct ConsumerPlan {
  int rank = 0;
  int worker = 0;
  int64_t consumer = 0;       // rank * num_workers + worker
  int64_t num_consumers = 0;  // world_size * num_workers
  // Samples this consumer reads (the same for every consumer but under
  // Remainder::kSpread); -1 when the manifest's sample counts are unknown.
  int64_t num_samples = 0;
  std::vector<ShardRange> ranges;
  // What the plan cannot guarantee; empty when counts are known. With unknown
  // counts every range is a whole shard (end == kWholeShard), every consumer
  // gets the same number of *shards*, and sample counts may differ.
  std::string caveat;
  // The epoch's header and what was delivered before this plan (shared).
  std::shared_ptr<const ResumeState> base;
};

class SHARDSTREAM_EXPORT EpochPlan {
 public:
  // Lays out the epoch. With `resume`, lays out that state's undelivered
  // samples instead (resume must come from the same manifest, seed and epoch).
  // On failure returns kConfig for invalid options (world_size < 1, rank out
  // of range, node_local without a dividing local_world_size, a node without
  // shards while padding), a state from another manifest, seed or epoch, or a
  // resume over a manifest with unknown sample counts.
  // Cost: O(shards) time and memory (shuffle and prefix sums).
  static Result<EpochPlan> Create(const Manifest& manifest, const PlanOptions& options,
                                  const ResumeState* resume = nullptr);
  // The same from bare sample counts (-1 = unknown) and the manifest's
  // Fingerprint(); lets callers plan without holding ShardEntry objects.
  static Result<EpochPlan> Create(const std::vector<int64_t>& nsamples,
                                  const std::string& fingerprint, const PlanOptions& options,
                                  const ResumeState* resume = nullptr);

  // The plan of consumer (rank, worker). O(log shards + ranges).
  // REQUIRES: 0 <= rank < world_size, 0 <= worker < num_workers.
  ConsumerPlan Consumer(int rank, int worker) const;
  // Consumer(options.rank, options.worker).
  ConsumerPlan ThisConsumer() const;

  const PlanOptions& options() const;
  int64_t num_consumers() const;
  // Samples per consumer; -1 with unknown counts (then shards per consumer
  // is shards_per_consumer()).
  int64_t samples_per_consumer() const;
  int64_t shards_per_consumer() const;
  // Samples of this layout not read by anyone (remainder, drop mode).
  int64_t dropped() const;
  // Samples read twice to even out the counts (pad mode).
  int64_t padded() const;
  bool counts_known() const;
  // The caveat of ConsumerPlan; empty when counts are known.
  const std::string& caveat() const;
  // The state before anything of this plan is delivered.
  const std::shared_ptr<const ResumeState>& base() const;

  struct Impl;

 private:
  explicit EpochPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// The same as EpochPlan::Create(...).ThisConsumer(), cheaper: a fresh global
// plan shuffles only as far as this consumer's last shard (on average half
// the epoch's order). Use EpochPlan where one process needs several
// consumers.
SHARDSTREAM_EXPORT Result<ConsumerPlan> PlanConsumer(const Manifest& manifest,
                                                     const PlanOptions& options,
                                                     const ResumeState* resume = nullptr);
// The same from bare sample counts and the manifest's Fingerprint(), which a
// caller planning every epoch computes once.
SHARDSTREAM_EXPORT Result<ConsumerPlan> PlanConsumer(const std::vector<int64_t>& nsamples,
                                                     const std::string& fingerprint,
                                                     const PlanOptions& options,
                                                     const ResumeState* resume = nullptr);

}  // namespace shardstream

#endif  // SHARDSTREAM_SHARD_SPLIT_H_
