// One epoch's worth of pipeline threads: the reader lanes and the assembler
// (interleave -> shuffle -> decode -> batch -> prefetch queue), a step the
// lanes' workers take turns to run (see ShardLanes).
// Created at the first next() of an epoch, destroyed (stopped and joined) at
// its end, at set_epoch/restore and with the Loader.
#ifndef SHARDSTREAM_PIPELINE_LOADER_RUN_H_
#define SHARDSTREAM_PIPELINE_LOADER_RUN_H_

#include <atomic>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "manifest/shard_table.h"
#include "pipeline/shard_names.h"
#include "pipeline/sample_batcher.h"
#include "pipeline/token_packer.h"
#include "pipeline/prng.h"
#include "pipeline/shard_lanes.h"
#include "pipeline/shuffle_buffer.h"
#include "shardstream/options.h"
#include "shardstream/prefetch_queue.h"
#include "shardstream/shard_split.h"

namespace shardstream::internal {

// Bytes of samples a lane reads ahead at most: eight read chunks (4 MiB by
// default), so the ring's sample count rules for small samples and this
// for large ones.
inline uint64_t RingBytes(const LoaderOptions& o) { return 8 * static_cast<uint64_t>(o.read_chunk); }

struct RunCounters : LaneCounters {
  std::atomic<int64_t> shuffle_fill{0};
  std::atomic<int64_t> queue_depth{0};
  std::atomic<uint64_t> decode_skips{0};
  std::atomic<uint64_t> heap_spills{0};
  std::atomic<uint64_t> copy_waits{0};
  std::atomic<uint64_t> slot_bytes{0}, slots{0};
  std::atomic<int> memory_kind{0};
  std::atomic<uint64_t> caller_wait_ns{0};  // the assembler blocked on a full queue or no free slot
};

struct RunConfig {
  const LoaderOptions* options = nullptr;
  // The epoch's shard list: the mixed layout's entries, or else the data
  // set's table.
  const std::vector<ShardEntry>* shards = nullptr;
  const ShardTable* table = nullptr;
  // Per entry of `shards`: its first sample in the file (mixed streams
  // take parts of shards); null: all 0.
  const std::vector<int64_t>* offsets = nullptr;
  std::shared_ptr<const ShardNames> urls;  // redacted, of the plan's shards
  ConsumerPlan plan;
  int64_t epoch = 0;
  // Token batches after a restore: tokens of these (shard, sample) already delivered.
  std::map<std::pair<int64_t, int64_t>, int64_t> skip_tokens;
  // The Loader's slot pool, kept across epochs (see PoolConfig::keep).
  std::shared_ptr<BufferPool>* pool = nullptr;
  // Direct reads' index memory, likewise (null: none kept).
  std::shared_ptr<DirectRecycler> recycler;
  // Cached shards without a sample index, likewise (null: none kept).
  std::shared_ptr<MissingIndexes> missing_indexes;
  // Shards kept mapped across epochs, likewise (null: none kept).
  std::shared_ptr<KeptMappings> kept_mappings;
  // How the token field decodes where its name does not say (an MDS column):
  // kRaw or kNpy; kAuto goes by the name.
  FieldDecode token_decode = FieldDecode::kAuto;
  // How many batches this run must return: token batches with equal
  // batches, and sample batches of several consumers under a skip policy.
  // A run that ends short (shards or samples skipped under error_policy)
  // fills up with batches of padding, so DDP ranks still end the epoch
  // together. -1: no count.
  int64_t batch_target = -1;
};

class LoaderRun {
 public:
  LoaderRun(RunConfig config, RunCounters* counters);
  ~LoaderRun();  // Stop()
  void Start();
  void Stop();
  // Stop() without the joins: wakes every thread and waiter. Any thread.
  void Cancel();
  PrefetchQueue<Batch>& queue() { return queue_; }
  // True when the assembler waits for a batch slot while none is queued:
  // only the caller can free one (it holds every slot).
  bool StarvedOfSlots() const;
  // One line per reader lane (ShardLanes::Describe); any thread.
  std::vector<std::string> Describe() { return lanes_->Describe(); }
  // Batches of padding this run added to reach batch_target (0: none).
  int64_t padded() const { return padded_.load(); }

 private:
  // The assembler's step: returns the lane it waits for, or -1 when done.
  int Assemble();
  // Runs the pipeline until a lane it needs is empty (*want = the lane) or
  // the epoch is complete (*want = -1).
  Status Advance(int* want);
  Status Process(LaneItem* item);  // after the shuffle: decode and batch
  // A lane's chunk of a direct range (LaneItem::kDirect), taken a document
  // at a time straight from its records.
  struct DirectCursor {
    DirectDoc doc;       // the chunk, and the next sample
    int64_t left = 0;    // documents not yet taken
    int64_t shard = -1;  // index in the epoch's shard list
    int64_t offset = 0;  // its LaneRange::index_offset
    int lane = 0;
    ByteSource source = ByteSource::kFile;  // where the chunk's bytes come from
    DecodedField tokens;
    uint64_t bytes = 0, taken = 0;  // not yet counted
    uint64_t released = 0;  // of a mapped shard, the bytes before this left RSS
  };
  // What the shuffle buffer holds (a document goes through three swaps, so
  // 48 bytes, not a LaneItem): a document read directly, or the slot in
  // held_ of an item read the usual way.
  struct Shuffled {
    DirectDoc direct;  // valid(): a document
    int64_t shard = -1, index_offset = 0;
    uint32_t held = 0;
    ByteSource source = ByteSource::kFile;
  };
  // The cursor's next document: into the batch (TakeDirect), or into the
  // shuffle buffer (ShuffleDirect), which lets it out later to
  // TakeShuffled. PlaceDirect hands c->doc to the packer.
  Status TakeDirect(DirectCursor* c);
  Status ShuffleDirect(DirectCursor* c);
  Status TakeShuffled(Shuffled* e);
  Status PlaceDirect(DirectCursor* c);
  // An item read the usual way into the shuffle buffer (swapped into held_).
  Status ShuffleItem(LaneItem* item);
  // What the buffer let out, to the batch.
  Status LetOut(Shuffled* e);
  void FlushDirect(DirectCursor* c);
  static void ReleaseChunks(LaneItem* item);  // once its bytes are placed
  Status Emit(Batch&& b);
  // At the end of the data: batches of padding up to config_.batch_target.
  Status PadToTarget();

  RunConfig config_;
  const LoaderOptions& opt_;
  RunCounters* counters_;
  PrefetchQueue<Batch> queue_;
  std::unique_ptr<ShardLanes> lanes_;
  std::unique_ptr<SampleBatcher> batcher_;
  // kConfig naming the fields of `s` when it lacks a required field.
  Status CheckFirstSampleFields(const Sample& s) const;
  std::unique_ptr<TokenPacker> packer_;
  std::vector<FieldRef> refs_;
  // Fixed-size image fields, decoded by the readers (LaneItem::images):
  // their field indices, and per field its entry there (-1: none).
  std::vector<size_t> image_fields_;
  std::vector<int> image_slot_;
  // The first sample of the run was checked for the fields asked for.
  bool first_checked_ = false;
  // kConfig when an image field of `s` holds no image at all.
  Status CheckFirstSampleImages(const Sample& s) const;
  bool image_checked_ = false;
  static constexpr int kNonImagesForConfig = 16;
  int non_images_ = 0;  // samples from the run's start without an image where one is asked
  // Eval mode: the plan range being read (ranges are taken in order).
  size_t next_range_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> emitted_{0}, padded_{0};
  // Assembler state, kept between steps (the step's worker changes).
  bool known_ = false;
  bool draining_ = false;
  int picked_ = -1;  // the lane drawn for the next sample, not yet served
  std::vector<int64_t> weight_;
  std::vector<size_t> ends_seen_;
  Prng pick_;
  std::unique_ptr<ShuffleBuffer<Shuffled>> buffer_;
  bool shuffle_ = false;
  Shuffled in_;   // on its way into the buffer
  Shuffled out_;  // what the buffer lets out
  // Items read the usual way while in the buffer (and the one let out,
  // while it is processed), and the slots free.
  std::vector<LaneItem> held_;
  std::vector<uint32_t> free_held_;
  DirectCursor shuffled_;  // counts the shuffled direct documents placed
  std::vector<DirectCursor> direct_;  // per lane
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_LOADER_RUN_H_
