#include "pipeline/shard_lanes.h"

#include <cassert>
#include <chrono>

#include <pthread.h>

#include <utility>

#include "common/log.h"
#include "common/thread_controls.h"
#include "pipeline/wait_histogram.h"
#include "tar/direct_reads.h"

namespace shardstream::internal {

ShardLanes::ShardLanes(std::vector<LaneRange> ranges, LaneConfig config, LaneCounters* counters)
    : ranges_(std::move(ranges)), config_(std::move(config)), counters_(counters) {
  assert(config_.consume);  // workers leave only when the consumer is done
  const int nlanes = std::max(1, config_.lanes);
  nthreads_ = std::max(1, std::min(config_.threads, nlanes));
  std::vector<std::vector<size_t>> mine(static_cast<size_t>(nlanes));
  for (size_t j = 0; j < ranges_.size(); ++j) mine[j % mine.size()].push_back(j);
  for (int l = 0; l < nlanes; ++l) {
    auto lane = std::make_unique<Lane>();
    lane->index = l;
    lane->ring.resize(std::max<size_t>(config_.ring, 1));
    lane->finished = mine[static_cast<size_t>(l)].empty();
    lane->reader = std::make_unique<LaneReader>(&ranges_, std::move(mine[static_cast<size_t>(l)]),
                                                &config_, counters_);
    lanes_.push_back(std::move(lane));
  }
}

ShardLanes::~ShardLanes() { Stop(); }

void ShardLanes::Start() {
  if (started_) return;
  started_ = true;
  for (int t = 0; t < nthreads_; ++t) threads_.emplace_back([this] { Run(); });
}

std::vector<std::string> ShardLanes::Describe() {
  std::vector<std::string> out;
  for (const auto& lane : lanes_) {
    bool busy, finished;
    size_t count;
    {
      MutexLock lock(&mu_);
      busy = lane->busy;
      finished = lane->finished;
      count = lane->count;
    }
    // The reader's own state is published by whichever worker holds it.
    out.push_back("lane " + std::to_string(lane->index) + ": " +
                  (finished ? std::string("done") : lane->reader->Describe()) + "; " +
                  std::to_string(count) + " samples ready" +
                  (busy ? ", a worker reading" : ", no worker on it"));
  }
  return out;
}

void ShardLanes::Stop() {
  Cancel();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  // Lanes a thread left mid-range (stopped) still hold their readers.
  for (auto& lane : lanes_) lane->reader->Close();
}

void ShardLanes::Cancel() {
  stop_.store(true);
  for (auto& lane : lanes_) lane->reader->Cancel();  // a read blocked on a download
  space_.NotifyAll();
}

LaneItem* ShardLanes::TryPop(int l) {
  Lane* lane = lanes_[static_cast<size_t>(l)].get();
  const size_t n = lane->ring.size();
  if (lane->claim_pos == lane->claim_count) {
    // Hand back the claimed slots and claim the next batch under one lock:
    // one lock round trip (and one contended cache line) per batch instead
    // of per sample. Order is kept: the batch is the lane's next items.
    bool wake;
    size_t k;
    {
      MutexLock lock(&mu_);
      const bool wanted = WantsMore(*lane);
      lane->head = (lane->head + lane->claim_count) % n;
      lane->count -= lane->claim_count;
      lane->bytes -= lane->claim_bytes;
      k = std::min(lane->count, TakeBatch(n));
      lane->claim_pos = 0;
      lane->claim_count = k;
      lane->claim_bytes = 0;
      // The claimed items were written by the reader's core: fetch all their
      // lines now, in parallel, rather than one miss at a time as the
      // consumer reaches each field (measured: 4-5% of loader speed).
      for (size_t i = 0; i < k; ++i) {
        const LaneItem& item = lane->ring[(lane->head + i) % n];
        lane->claim_bytes += item.bytes;
        const char* p = reinterpret_cast<const char*>(&item);
        for (size_t off = 0; off < sizeof(LaneItem); off += 64) __builtin_prefetch(p + off, 1);
      }
      // Wake a worker only when the ring drops below three quarters, so it
      // refills in a burst instead of one context switch per sample.
      wake = !wanted && WantsMore(*lane);
    }
    if (wake) space_.NotifyOne();
    if (k == 0) return nullptr;
  }
  return &lane->ring[(lane->head + lane->claim_pos++) % n];
}

void ShardLanes::DirectDone(int l) {
  bool wake;
  {
    MutexLock lock(&mu_);
    Lane* lane = lanes_[static_cast<size_t>(l)].get();
    const bool wanted = WantsMore(*lane);
    --lane->direct_ahead;
    wake = !wanted && WantsMore(*lane) && !lane->finished;
  }
  if (wake) space_.NotifyOne();
}

void ShardLanes::PostSide() {
  if (!config_.side) return;
  MutexLock lock(&mu_);
  side_ = true;
  if (sleepers_ > 0) space_.NotifyOne();
}

ShardLanes::Lane* ShardLanes::PickLane(bool wanting_only) {
  // The emptiest lane (by the fuller of its two limits) no thread is
  // filling: the one the consumer is about to wait on, if any. The lane
  // the consumer waits for comes first.
  if (consumer_lane_ >= 0) {
    Lane* want = lanes_[static_cast<size_t>(consumer_lane_)].get();
    if (!want->busy && !want->finished && want->count == 0 && HasRoom(*want)) return want;
  }
  Lane* best = nullptr;
  double best_fill = 2;
  for (auto& p : lanes_) {
    Lane* lane = p.get();
    if (lane->busy || lane->finished || !HasRoom(*lane)) continue;
    if (wanting_only && !WantsMore(*lane)) continue;
    const double fill = std::max(static_cast<double>(lane->count) / static_cast<double>(lane->ring.size()),
                                 static_cast<double>(lane->bytes) / static_cast<double>(config_.ring_bytes));
    if (fill < best_fill) {
      best = lane;
      best_fill = fill;
    }
  }
  return best;
}

void ShardLanes::Run() {
  pthread_setname_np(pthread_self(), "ss-worker");
  if (!config_.cpus.empty() || config_.nice > 0) {
    // Checked when the loader was made; a failure now (a CPU taken from the
    // process since) leaves the thread as it was, which only costs speed.
    const Status st = ApplyThreadControls(config_.cpus, config_.nice);
    if (!st.ok()) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) Log().warn("{}", st.ToString());
    }
  }
  // After the move to its CPUs: the buffers then come from their memory.
  if (config_.direct) DirectReads::PrepareThread();
  mu_.Lock();
  // After a burst a worker goes on with any lane that has room; once none
  // has, it sleeps until one drops below three quarters (TryPop wakes it),
  // so refills come in bursts rather than a wake per sample.
  bool after_burst = false;
  bool handed_off = false;  // this worker just woke another for the consumer
  while (!stop_.load() && !consumer_done_) {
    if (!handed_off && ConsumerRunnable()) {
      consumer_busy_ = true;
      waiting_for_.store(-1, std::memory_order_relaxed);
      if (consumer_lane_ >= 0) AddWaitSince(&counters_->consumer_wait_ns, consumer_waiting_since_);
      mu_.Unlock();
      const int want = config_.consume();
      mu_.Lock();
      consumer_busy_ = false;
      consumer_lane_ = want;
      waiting_for_.store(want, std::memory_order_relaxed);
      consumer_waiting_since_ = std::chrono::steady_clock::now();
      if (want < 0) {
        consumer_done_ = true;
        space_.NotifyAll();  // the others leave too
      }
      continue;
    }
    handed_off = false;
    if (side_) {
      side_ = false;
      mu_.Unlock();
      const bool did = config_.side();
      mu_.Lock();
      if (did) {
        // There may be more (a batch's reads come in several jobs): this
        // worker comes back for it, and a sleeping one may help.
        side_ = true;
        if (sleepers_ > 0) space_.NotifyOne();
      }
      continue;
    }
    Lane* lane = PickLane(/*wanting_only=*/!after_burst);
    if (lane == nullptr) {
      if (after_burst) {
        after_burst = false;
        continue;
      }
      // Nothing to fill and the consumer busy or waiting on a busy lane;
      // when the consumer is done (every lane finished, or an error), it
      // wakes everyone to leave.
      ++sleepers_;
      space_.Wait(&mu_);
      --sleepers_;
      continue;
    }
    lane->busy = true;
    size_t slot = (lane->head + lane->count) % lane->ring.size();
    const size_t free = lane->ring.size() - lane->count;
    const uint64_t bytes = lane->bytes;
    const int ahead = lane->direct_ahead;  // the consumer may lower it meanwhile: a stricter bound
    mu_.Unlock();
    // Fill the free slots (they are ours until published), publishing in
    // bursts: a quarter of the ring (what the hysteresis frees) keeps the
    // lane's read chunk in this core's cache across many samples, and costs
    // one lock round trip. While the consumer waits for this lane, a burst
    // is a few samples; never more bytes than the ring's limit.
    const size_t burst = std::min(free, std::max<size_t>(8, lane->ring.size() / 4));
    size_t made = 0;
    uint64_t made_bytes = 0;
    int made_direct = 0;
    bool done = false;
    while (made < burst && !done) {
      if (lane->reader->Produce(&lane->ring[slot])) {
        MutexLock guard(&mu_);
        lane->finished = true;
      }
      made_bytes += lane->ring[slot].bytes;
      const bool direct = lane->ring[slot].kind == LaneItem::kDirect;
      made_direct += direct ? 1 : 0;
      slot = (slot + 1) % lane->ring.size();
      ++made;
      // Only the worker holding `busy` writes `finished` (under the lock,
      // for the other workers' predicates); reading it here needs no lock.
      done = lane->finished;
      if (bytes + made_bytes >= config_.ring_bytes || ahead + made_direct == kDirectAhead ||
          (direct && waiting_for_.load(std::memory_order_relaxed) == lane->index) ||
          (made >= 8 && waiting_for_.load(std::memory_order_relaxed) == lane->index))
        break;
    }
    // Byte counters once per burst: an atomic add per sample is a cache
    // line bouncing between the workers.
    lane->reader->FlushCount();
    mu_.Lock();
    lane->count += made;
    lane->bytes += made_bytes;
    lane->direct_ahead += made_direct;
    lane->busy = false;
    after_burst = true;
    if (lane->index == consumer_lane_ && ConsumerRunnable() && sleepers_ > 0 && !done) {
      // The consumer waited for this lane, which is likely the one holding
      // everything up (a lane with more shards than the others): a sleeping
      // worker runs the consumer while this one goes on reading.
      handed_off = true;
      space_.NotifyOne();
    }
    // Otherwise nobody needs waking for the consumer: this worker checks
    // the role first on its next turn.
  }
  mu_.Unlock();
}

}  // namespace shardstream::internal
