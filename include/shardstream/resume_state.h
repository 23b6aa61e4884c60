// ResumeState: what of an epoch has been delivered, as a compact, versioned
// record that survives a restart with another world size or worker count
// (format in docs/resume-state.md).
//
// An epoch plan numbers its planned samples 0..positions()-1 in the epoch's
// global order (shards shuffled, samples concatenated, per node in
// node-local mode; padding included). Every consumer reads one contiguous
// span of these positions, so what it delivered is a prefix of its span plus
// the few samples beyond it that a shuffle buffer let out early: a handful
// of intervals. The state is the sorted union of those intervals, plus what
// identifies the epoch (manifest fingerprint, seed, epoch, node count,
// segment length). EpochPlan::Create(manifest, options, &state) lays out the
// rest; DeliveryTracker produces states; MergeResumeStates joins the states
// of several ranks, IntersectResumeStates the own shares of several
// consumers (Loader::own_state).
//
// Thread-safety: a value type.
#ifndef SHARDSTREAM_RESUME_STATE_H_
#define SHARDSTREAM_RESUME_STATE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardstream/export.h"
#include "shardstream/result.h"

namespace shardstream {

struct SHARDSTREAM_EXPORT ResumeState {
  static constexpr int kVersion = 1;

  std::string fingerprint;  // Manifest::Fingerprint() of the data set
  uint64_t seed = 0;
  int64_t epoch = 0;
  // Position space: `nodes` segments of `segment_length` positions each;
  // nodes == 1 outside node-local mode.
  int64_t nodes = 1;
  int64_t segment_length = 0;
  // Delivered positions: sorted, disjoint, non-adjacent [begin, end) pairs.
  std::vector<std::pair<int64_t, int64_t>> delivered;

  int64_t positions() const { return nodes * segment_length; }
  int64_t DeliveredCount() const;
  // Adds [begin, end) to delivered, keeping it sorted and merged.
  void AddDelivered(int64_t begin, int64_t end);
  // Sorts and merges `delivered` (after editing it by hand).
  void Normalize();
  // True when both describe the same epoch layout (everything but delivered).
  bool SameEpoch(const ResumeState& other) const;

  // JSON object, e.g. {"format":"shardstream-resume","version":1,...}.
  std::string ToJson() const;
  // On failure returns kCorrupt naming what is malformed, or kConfig for an
  // unsupported version.
  static Result<ResumeState> FromJson(std::string_view json);
  // Binary: magic "SSRS", version, varints, delta-coded intervals, checksum.
  std::string ToBytes() const;
  // On failure returns kCorrupt (bad magic, truncated, checksum mismatch) or
  // kConfig (unsupported version).
  static Result<ResumeState> FromBytes(std::string_view bytes);
};

// The union of states of the same epoch (e.g. one per rank). On failure
// returns kConfig when they describe different epochs or data sets, or
// `states` is empty.
SHARDSTREAM_EXPORT Result<ResumeState> MergeResumeStates(const std::vector<ResumeState>& states);

// The intersection of states of the same epoch: a position is delivered when
// every state says so. This joins consumers' own shares (each counts the
// positions it does not owe as delivered). On failure returns kConfig as
// MergeResumeStates does.
SHARDSTREAM_EXPORT Result<ResumeState> IntersectResumeStates(
    const std::vector<ResumeState>& states);

}  // namespace shardstream

#endif  // SHARDSTREAM_RESUME_STATE_H_
