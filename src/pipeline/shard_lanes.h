// ShardLanes: the scheduler of the pipeline's threads. The consumer's ranges
// are dealt to `lanes` lanes (range j to lane j % lanes); each lane's
// LaneReader (lane_reader.h) reads its ranges one after another into a
// bounded ring of items. The consumer takes from whichever lane it
// chooses, so the order of samples it sees is its own choice, independent
// of how fast anything reads.
//
// The consumer (the assembler) is a role, not a thread: a worker thread
// runs it whenever the lane it waits for has an item and nobody runs it
// yet, and otherwise fills the emptiest lane no other worker is filling.
// With as many workers as cores, nothing sleeps while there is work, and
// the assembler and the readers hand over without waking each other.
//
// Ring items are swapped in and out, so sample storage is recycled and the
// steady state allocates nothing here. The consumer reads items in their
// ring slots: every storage passes through a reader within one ring of
// samples, whatever the timing (a side array of taken items could keep a
// storage idle, and its first fill allocating, arbitrarily long).
//
// Thread-safety: TryPop() only from the consumer step; Stop()/Cancel() from
// any thread.
#ifndef SHARDSTREAM_PIPELINE_SHARD_LANES_H_
#define SHARDSTREAM_PIPELINE_SHARD_LANES_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "pipeline/lane_reader.h"
#include "shardstream/export.h"

namespace shardstream::internal {

class SHARDSTREAM_EXPORT ShardLanes {
 public:
  ShardLanes(std::vector<LaneRange> ranges, LaneConfig config, LaneCounters* counters);
  ~ShardLanes();

  int lanes() const { return static_cast<int>(lanes_.size()); }
  // Indices into the ranges, in the order lane `l` reads them.
  const std::vector<size_t>& lane_ranges(int l) const { return lanes_[l]->reader->ranges(); }
  const LaneRange& range(size_t i) const { return ranges_[i]; }
  size_t num_ranges() const { return ranges_.size(); }

  void Start();
  // Lane l's next item, or nullptr when it has none yet. The item is the
  // consumer's until its next TryPop(l): it may read it or swap it out.
  // The consumer claims items in batches of TakeBatch(ring) (one lock per
  // batch) and hands their slots back to the reader with the next claim.
  static size_t TakeBatch(size_t ring) { return std::max<size_t>(1, std::min<size_t>(16, ring / 4)); }
  LaneItem* TryPop(int l);
  // One line per lane for the watchdog: what its reader is at, whether a
  // worker is filling it, and the samples it holds; any thread.
  std::vector<std::string> Describe() EXCLUDES(mu_);
  // Stops and joins the worker threads; idempotent.
  void Stop();
  // Wakes every worker without joining; safe from any thread.
  void Cancel();
  // Tells the workers there is side work (LaneConfig::side); any thread.
  void PostSide();
  // The consumer took the last document of one of lane l's direct chunks:
  // the lane may make another (it holds at most kDirectAhead the consumer
  // has not finished: the one it reads and the next).
  void DirectDone(int l);
  static constexpr int kDirectAhead = 2;

 private:
  struct Lane {
    int index = 0;
    std::vector<LaneItem> ring;
    size_t head = 0, count = 0;   // guarded by mu_
    uint64_t bytes = 0;           // of the `count` samples; guarded by mu_
    // A worker owns the lane's reader state (below) while it fills
    // it; the lock that clears `busy` hands the state to the next one.
    bool busy = false;            // guarded by mu_
    // Consumer side: ring[head + i] for i < claim_count are claimed (still
    // in `count` and `bytes`, so no reader writes them), the first
    // claim_pos of them popped; claim_bytes is their share of `bytes`.
    size_t claim_pos = 0, claim_count = 0;
    uint64_t claim_bytes = 0;
    bool finished = false;        // reader side: nothing more to produce; written under mu_
    // kDirect items published whose range the consumer has not finished:
    // they pace the lane instead of their bytes. Guarded by mu_.
    int direct_ahead = 0;
    // Used by the thread that holds `busy` (Cancel() from any thread).
    std::unique_ptr<LaneReader> reader;
  };

  // Whether the reader should refill the lane: below three quarters of
  // both limits (hysteresis: refills come in bursts). Under mu_.
  bool WantsMore(const Lane& lane) const REQUIRES(mu_) {
    return lane.count <= lane.ring.size() * 3 / 4 && lane.bytes <= config_.ring_bytes * 3 / 4 &&
           lane.direct_ahead < kDirectAhead;
  }
  bool HasRoom(const Lane& lane) const REQUIRES(mu_) {
    return lane.count < lane.ring.size() && lane.bytes < config_.ring_bytes &&
           lane.direct_ahead < kDirectAhead;
  }
  // The lane a free worker should fill next, or nullptr. Under mu_.
  Lane* PickLane(bool wanting_only) REQUIRES(mu_);
  // Whether a worker may run the consumer step now. Under mu_.
  bool ConsumerRunnable() const REQUIRES(mu_) {
    return !consumer_busy_ && !consumer_done_ &&
           (consumer_lane_ < 0 || lanes_[static_cast<size_t>(consumer_lane_)]->count > 0);
  }
  void Run() EXCLUDES(mu_);

  std::vector<LaneRange> ranges_;
  LaneConfig config_;
  LaneCounters* counters_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  // Guards the lanes' shared fields (Lane, above) and the members below.
  Mutex mu_;
  CondVar space_;                       // workers with nothing to do wait here
  int sleepers_ GUARDED_BY(mu_) = 0;    // waiting on space_
  bool side_ GUARDED_BY(mu_) = false;   // PostSide() not yet taken
  // The consumer role.
  bool consumer_busy_ GUARDED_BY(mu_) = false;
  bool consumer_done_ GUARDED_BY(mu_) = false;
  int consumer_lane_ GUARDED_BY(mu_) = -1;  // the lane it waits for
  // consumer_lane_ while the consumer waits (-1 while it runs), for workers
  // to read without the lock: a hint to publish sooner.
  std::atomic<int> waiting_for_{-1};
  std::chrono::steady_clock::time_point consumer_waiting_since_ GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
  int nthreads_ = 1;
  std::atomic<bool> stop_{false};
  bool started_ = false;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_SHARD_LANES_H_
