// ShardLanes: the reader side of the pipeline. The consumer's ranges are
// dealt to `lanes` lanes (range j to lane j % lanes); each lane reads its
// ranges one after another into a bounded ring of samples, and reader
// threads serve the lanes (lane l on thread l % threads). The consumer pops
// from whichever lane it chooses, so the order of samples it sees is its own
// choice, independent of how fast each thread reads.
//
// Ring items are swapped in and out, so sample storage is recycled and the
// steady state allocates nothing here.
//
// Thread-safety: Pop() from one consumer thread; Stop() from any thread.
#ifndef SHARDSTREAM_PIPELINE_SHARD_LANES_H_
#define SHARDSTREAM_PIPELINE_SHARD_LANES_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shardstream/decode.h"
#include "shardstream/shard_cache.h"
#include "shardstream/tar_reader.h"

namespace shardstream::internal {

struct LaneRange {
  int64_t shard = 0;   // manifest index
  int64_t first = 0;
  int64_t end = 0;     // -1: the whole shard
  ShardRef ref;        // resolved url, size, checksum
};

struct LaneItem {
  enum Kind { kSample, kEnd, kError };
  Kind kind = kSample;
  int64_t shard = -1;  // manifest index of the sample's shard
  uint64_t bytes = 0;  // the sample's field bytes (what it holds in memory)
  Sample sample;
  Status status;
  // Set by LaneConfig::prepare in the reader thread: a field decoded ahead
  // (a view into `sample`), or why it could not be.
  size_t decoded_field = 0;  // index in sample.fields
  DecodedField decoded;
  Status decode_status;
  // Member-wise (the shuffle buffer and the rings swap items).
  friend void swap(LaneItem& a, LaneItem& b) noexcept {
    using std::swap;
    swap(a.kind, b.kind);
    swap(a.shard, b.shard);
    swap(a.bytes, b.bytes);
    swap(a.sample, b.sample);
    swap(a.status, b.status);
    swap(a.decoded_field, b.decoded_field);
    swap(a.decoded, b.decoded);
    swap(a.decode_status, b.decode_status);
  }
};

struct LaneConfig {
  TarReaderOptions tar;
  ShardCache* cache = nullptr;
  size_t ring = 256;
  // A lane stops reading ahead at `ring` samples or at this many bytes of
  // samples, whichever comes first (large samples would otherwise keep
  // ring x their size in memory).
  uint64_t ring_bytes = uint64_t{4} << 20;
  int lanes = 4;
  int threads = 2;
  // Per-sample work moved off the consumer's thread: runs in the reader
  // thread on each sample item before it is published (pure: it may read the
  // sample and fill the item's decoded fields, nothing else).
  std::function<void(LaneItem*)> prepare;
};

struct LaneCounters {
  std::atomic<uint64_t> bytes_file{0}, bytes_http{0}, bytes_s3{0}, bytes_other{0};
  std::atomic<uint64_t> bytes_cache{0};
  std::atomic<uint64_t> cache_hits{0}, cache_opens{0};
  std::atomic<uint64_t> skipped_samples{0}, skipped_shards{0};
  std::atomic<uint64_t> consumer_wait_ns{0};  // Pop() blocked on an empty lane
};

class ShardLanes {
 public:
  ShardLanes(std::vector<LaneRange> ranges, LaneConfig config, LaneCounters* counters);
  ~ShardLanes();

  int lanes() const { return static_cast<int>(lanes_.size()); }
  // Indices into the ranges, in the order lane `l` reads them.
  const std::vector<size_t>& lane_ranges(int l) const { return lanes_[l]->ranges; }
  const LaneRange& range(size_t i) const { return ranges_[i]; }

  void Start();
  // Waits for lane l's next item and swaps it into *out. Returns false after
  // Stop(). Items leave the ring in batches of TakeBatch(ring) (one lock per
  // batch), so a lane holds up to ring + TakeBatch(ring) samples.
  static size_t TakeBatch(size_t ring) { return std::max<size_t>(1, std::min<size_t>(16, ring / 4)); }
  bool Pop(int l, LaneItem* out);
  // Stops and joins the reader threads; idempotent.
  void Stop();
  // Wakes every reader and Pop without joining; safe from any thread.
  void Cancel();

 private:
  struct Group;
  struct Lane {
    Group* group = nullptr;
    std::vector<size_t> ranges;
    std::vector<LaneItem> ring;
    size_t head = 0, count = 0;   // guarded by group->mu
    uint64_t bytes = 0;           // of the `count` samples; guarded by group->mu
    // Consumer side: items already taken from the ring, not yet popped.
    std::vector<LaneItem> taken;
    size_t taken_pos = 0, taken_count = 0;
    bool finished = false;        // reader side: nothing more to produce
    // Reader-thread state.
    size_t next_range = 0;
    int64_t read = 0;
    uint64_t unpublished_bytes = 0;  // read since the last burst, not yet counted
    std::unique_ptr<TarReader> reader;
    // Shared with the reader's stream so Cancel() can reach a read blocked
    // in TarReader::Open as safely as one blocked later. Guarded by group->mu.
    std::shared_ptr<CachedShard> cached;
  };
  struct Group {
    std::mutex mu;
    std::condition_variable space, data;
    int consumers_waiting = 0;  // in Pop, on `data`; guarded by mu
    std::vector<Lane*> lanes;
    std::thread thread;
  };

  // Whether the reader should refill the lane: below three quarters of
  // both limits (hysteresis: refills come in bursts). Under group->mu.
  bool WantsMore(const Lane& lane) const {
    return lane.count <= lane.ring.size() * 3 / 4 && lane.bytes <= config_.ring_bytes * 3 / 4;
  }
  void Run(Group* g);
  void Produce(Lane* lane, LaneItem* item);
  Status OpenRange(Lane* lane, const LaneRange& r, LaneItem* scratch);
  void CloseReader(Lane* lane);
  void FlushCount(Lane* lane);
  void Count(size_t range, uint64_t bytes);

  std::vector<LaneRange> ranges_;
  std::vector<uint8_t> kinds_;  // per range: 0 cache, 1 file, 2 http, 3 s3, 4 other
  LaneConfig config_;
  LaneCounters* counters_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::vector<std::unique_ptr<Group>> groups_;
  std::atomic<bool> stop_{false};
  bool started_ = false;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_SHARD_LANES_H_
