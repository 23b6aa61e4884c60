// DeliveryTracker: records which samples of a ConsumerPlan have been handed
// to the training loop, in (shard, sample) terms, and turns that into a
// ResumeState.
//
// The pipeline marks a sample when it delivers it (after any shuffle buffer),
// in any order. Memory: per range a delivered-prefix counter plus the samples
// delivered beyond it, so O(ranges + shuffle buffer). Marking is O(log) in the
// samples beyond the prefix.
//
// Thread-safety: not thread-safe; one thread (the consumer) marks and
// snapshots, or the caller serialises.
#ifndef SHARDSTREAM_DELIVERY_TRACKER_H_
#define SHARDSTREAM_DELIVERY_TRACKER_H_

#include <cstdint>
#include <functional>
#include <set>
#include <unordered_map>
#include <vector>

#include "shardstream/export.h"
#include "shardstream/resume_state.h"
#include "shardstream/shard_split.h"

namespace shardstream {

class SHARDSTREAM_EXPORT DeliveryTracker {
 public:
  explicit DeliveryTracker(const ConsumerPlan& plan);
  // Tracks several consumers' plans of the same EpochPlan at once, e.g. all
  // DataLoader workers of a rank, marked where the batches reach the training
  // loop (the main process), so batches prefetched by a worker but never
  // consumed are not counted as delivered.
  // REQUIRES: plans non-empty and from one EpochPlan.
  explicit DeliveryTracker(const std::vector<ConsumerPlan>& plans);

  // Records sample `sample` of manifest shard `shard` as delivered. Where the
  // plan holds the sample more than once (padding), the first undelivered
  // copy counts. On failure returns kConfig when the sample is not in this
  // plan, was already delivered (every copy), or counts are unknown.
  Status MarkDelivered(int64_t shard, int64_t sample);
  // Samples [first, end) of `shard`; stops at the first error.
  Status MarkDelivered(int64_t shard, int64_t first, int64_t end);

  // Samples marked so far (copies included).
  int64_t delivered() const { return delivered_; }
  // Samples of the plan not yet marked.
  int64_t remaining() const { return total_ - delivered_; }

  // Calls fn(shard, first, end) for each run of the plan's samples not yet
  // marked, range by range (copies included). Cost O(ranges + samples beyond
  // prefixes + calls).
  void ForEachRemaining(const std::function<void(int64_t shard, int64_t first, int64_t end)>& fn) const;
  // The plan's base state plus everything marked here. Cost O(ranges +
  // samples beyond prefixes + base intervals).
  ResumeState State() const;

 private:
  void AddPlan(const ConsumerPlan& plan);

  struct RangeProgress {
    int64_t prefix = 0;           // samples [first, first + prefix) delivered
    std::set<int64_t> beyond;     // offsets >= prefix delivered out of order
  };
  bool counts_known_ = true;
  std::vector<ShardRange> ranges_;
  std::vector<RangeProgress> progress_;
  std::unordered_map<int64_t, std::vector<uint32_t>> by_shard_;
  std::shared_ptr<const ResumeState> base_;
  int64_t delivered_ = 0;
  int64_t total_ = 0;
};

}  // namespace shardstream

#endif  // SHARDSTREAM_DELIVERY_TRACKER_H_
