#include "shardstream/delivery_tracker.h"

#include <cassert>

namespace shardstream {

DeliveryTracker::DeliveryTracker(const ConsumerPlan& plan) : base_(plan.base) { AddPlan(plan); }

DeliveryTracker::DeliveryTracker(const std::vector<ConsumerPlan>& plans) {
  assert(!plans.empty());
  if (!plans.empty()) base_ = plans[0].base;
  for (const ConsumerPlan& p : plans) {
    assert(p.base == base_ && "plans of different EpochPlans");
    AddPlan(p);
  }
}

void DeliveryTracker::AddPlan(const ConsumerPlan& plan) {
  counts_known_ = counts_known_ && plan.num_samples >= 0;
  for (const ShardRange& r : plan.ranges) {
    by_shard_[r.shard].push_back(static_cast<uint32_t>(ranges_.size()));
    ranges_.push_back(r);
    if (counts_known_) total_ += r.size();
  }
  progress_.resize(ranges_.size());
}

Status DeliveryTracker::MarkDelivered(int64_t shard, int64_t sample) {
  if (!counts_known_)
    return Status::Config("delivery tracking needs known sample counts (a manifest, not a pattern)");
  auto it = by_shard_.find(shard);
  bool seen = false;
  if (it != by_shard_.end()) {
    for (uint32_t i : it->second) {
      const ShardRange& r = ranges_[i];
      if (sample < r.first || sample >= r.end) continue;
      seen = true;
      RangeProgress& p = progress_[i];
      const int64_t off = sample - r.first;
      if (off < p.prefix || p.beyond.count(off)) continue;  // this copy is taken; try the next
      if (off == p.prefix) {
        ++p.prefix;
        // Samples that arrived early join the prefix once the gap closes.
        while (!p.beyond.empty() && *p.beyond.begin() == p.prefix) {
          p.beyond.erase(p.beyond.begin());
          ++p.prefix;
        }
      } else {
        p.beyond.insert(off);
      }
      ++delivered_;
      return Status::OK();
    }
  }
  if (seen)
    return Status::Config("sample " + std::to_string(sample) + " of shard " +
                          std::to_string(shard) + " delivered twice");
  return Status::Config("sample " + std::to_string(sample) + " of shard " + std::to_string(shard) +
                        " is not in this consumer's plan");
}

Status DeliveryTracker::MarkDelivered(int64_t shard, int64_t first, int64_t end) {
  for (int64_t s = first; s < end; ++s) SHARDSTREAM_RETURN_IF_ERROR(MarkDelivered(shard, s));
  return Status::OK();
}

void DeliveryTracker::ForEachRemaining(
    const std::function<void(int64_t, int64_t, int64_t)>& fn) const {
  if (!counts_known_) return;
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const ShardRange& r = ranges_[i];
    const RangeProgress& p = progress_[i];
    int64_t at = p.prefix;  // offsets from r.first
    for (int64_t off : p.beyond) {
      if (off > at) fn(r.shard, r.first + at, r.first + off);
      at = off + 1;
    }
    if (r.first + at < r.end) fn(r.shard, r.first + at, r.end);
  }
}

ResumeState DeliveryTracker::State() const {
  ResumeState state = base_ ? *base_ : ResumeState();
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const ShardRange& r = ranges_[i];
    if (r.repeat) continue;  // its positions belong to the original copy
    const RangeProgress& p = progress_[i];
    state.delivered.emplace_back(r.position, r.position + p.prefix);
    // Runs of consecutive early samples become one interval each.
    auto it = p.beyond.begin();
    while (it != p.beyond.end()) {
      int64_t begin = *it, end = begin + 1;
      for (++it; it != p.beyond.end() && *it == end; ++it) ++end;
      state.delivered.emplace_back(r.position + begin, r.position + end);
    }
  }
  state.Normalize();
  return state;
}

}  // namespace shardstream
