// Batch assembly: SampleBatcher stacks the decoded fields of `batch_size`
// samples into a pool slot; TokenPacker packs or pads token documents into
// [batch_size, seq_len]. Both hand finished batches to an emit callback
// (which may block: backpressure) and take slots from a BufferPool they
// create on first use, sized from the layout.
//
// Thread-safety: each object is used by one thread (the assembler), but for
// TokenPacker::RunPending (any thread).
#ifndef SHARDSTREAM_PIPELINE_BATCHER_H_
#define SHARDSTREAM_PIPELINE_BATCHER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pipeline/batch_layout.h"
#include "shardstream/decode.h"
#include "shardstream/options.h"
#include "shardstream/pinned_pool.h"

namespace shardstream::internal {

using EmitFn = std::function<Status(Batch&&)>;

// One field of an input sample, found by the caller; data.data() == nullptr
// when the sample lacks it.
struct FieldRef {
  std::string_view data;
  uint64_t offset = 0;
  bool present = false;
};

struct RowInput {
  SampleId id;
  std::string_view key;
  std::string_view url;
  uint64_t offset = 0;               // of the sample in the shard
  const FieldRef* fields = nullptr;  // one per FieldSpec, in order
};

struct PoolConfig {
  size_t slots = 4;
  std::shared_ptr<HostAllocator> allocator;  // null: DefaultHostAllocator()
  size_t arena_bytes = size_t{1} << 20;
  // Adds the time spent waiting for a free slot, if set.
  std::atomic<uint64_t>* wait_ns = nullptr;
  // A pool kept across runs (the Loader's epochs), if set: reused when its
  // slot size, count and memory kind fit, so slots are not allocated and
  // pinned again every epoch.
  std::shared_ptr<BufferPool>* keep = nullptr;
};

// Holds the pool and the writer shared by both batchers.
class SHARDSTREAM_EXPORT SlotSource {
 public:
  SlotSource(PoolConfig config, EmitFn emit) : config_(std::move(config)), emit_(std::move(emit)) {}
  Status Init(std::shared_ptr<const BatchLayout> layout);
  bool ready() const { return writer_ != nullptr; }
  BatchWriter& writer() { return *writer_; }
  // Starts a batch if none is in progress (may block for a free slot).
  Status EnsureBatch();
  Status EmitBatch();
  // EmitBatch in two steps, so the batch can be completed elsewhere before
  // it is emitted. Emit is safe from any thread, once per batch, in order.
  Batch FinishBatch() { return writer_->Finish(); }
  Status Emit(Batch&& b) { return emit_(std::move(b)); }
  // Whether EnsureBatch would get a slot without waiting (only the
  // assembler takes slots, so the answer holds until it does).
  bool HasFreeSlot() const {
    BufferPool* p = pool();
    return p == nullptr || p->stats().in_use < p->slots();
  }
  void set_epoch(int64_t epoch, std::shared_ptr<const std::vector<std::string>> urls) {
    epoch_ = epoch;
    urls_ = std::move(urls);
    next_index_ = 0;
  }
  void set_next_index(int64_t i) { next_index_ = i; }
  // Safe from any thread (null until the first batch).
  BufferPool* pool() const { return pool_ptr_.load(std::memory_order_acquire); }
  size_t arena_bytes() const { return config_.arena_bytes; }
  void Cancel() {
    if (BufferPool* p = pool()) p->Cancel();
  }

 private:
  PoolConfig config_;
  EmitFn emit_;
  std::shared_ptr<BufferPool> pool_;
  std::atomic<BufferPool*> pool_ptr_{nullptr};
  std::unique_ptr<BatchWriter> writer_;
  std::shared_ptr<const std::vector<std::string>> urls_;
  int64_t epoch_ = 0;
  int64_t next_index_ = 0;
};

class SHARDSTREAM_EXPORT SampleBatcher {
 public:
  SampleBatcher(std::vector<FieldSpec> fields, int64_t batch_size, PoolConfig pool, EmitFn emit);
  SlotSource& slots() { return slots_; }
  const SlotSource& slots() const { return slots_; }
  // Decodes row's fields into the batch in progress; emits it when full.
  Status Add(const RowInput& row);
  // Emits the partial batch, if any, or drops it (drop_last).
  Status Flush(bool drop = false);

 private:
  Status InitLayout(const std::vector<DecodedField>& decoded);

  std::vector<FieldSpec> fields_;
  int64_t batch_size_;
  SlotSource slots_;
  std::vector<DecodedField> decoded_;  // reused
};

class SHARDSTREAM_EXPORT TokenPacker {
 public:
  TokenPacker(TokenOptions options, int64_t batch_size, PoolConfig pool, EmitFn emit);
  SlotSource& slots() { return slots_; }
  const SlotSource& slots() const { return slots_; }
  // Appends one document (a 1-D integer tensor). Tokens that do not fit are
  // carried into the next row and batch. `skip` tokens at its start were
  // already delivered before a restore and are not emitted again.
  Status Add(const RowInput& row, const DecodedField& tokens, int64_t skip = 0);
  // Emits the partial batch (rows filled so far, the last padded).
  Status Flush();
  // Where the document being written stands (for resume state).
  int64_t row() const { return row_; }
  int64_t col() const { return col_; }

  // Completing batches elsewhere. With `notify` set, a full batch's
  // per-token metadata (doc_ids and positions, or mask and positions) is
  // not written by Add: the batch waits, with the list of its stores, until
  // some thread calls RunPending (the loader's idle worker), while Add goes
  // on packing the next one; `notify` tells the workers there is one.
  // Without it, or without metadata, batches are written whole and emitted
  // by Add and Flush. At most one batch waits: Add completes it itself
  // before handing over the next. Set before the first Add.
  void set_notify(std::function<void()> notify) { notify_ = std::move(notify); }
  // Writes the waiting batch's metadata and emits it; false when there is
  // none or another thread is at it. Any thread.
  bool RunPending();
  // Emits the waiting batch, if any (waiting for a thread at it): before
  // the end of the data or an error, so batches keep their order. Returns
  // the first error of an emit done elsewhere.
  Status FinishPending();

 private:
  // One piece of a document: k tokens (the last one the end-of-document
  // token when real < k) from src into the token row at `base`.
  struct CopyOp {
    const char* src = nullptr;
    size_t base = 0;
    int64_t real = 0, k = 0;
    int32_t pos0 = 0, doc = 0;
    DType dtype = DType::kInt32;  // of src
  };
  // The per-token metadata of k tokens at `base`: positions first,
  // first + step, ...; the second column (doc_ids, or the mask) `second`.
  struct MetaOp {
    size_t base = 0, k = 0;
    int32_t first = 0, step = 0, second = 0;
  };
  Status Init();
  Status EndRow();
  void Apply(const CopyOp& op);
  void Meta(const MetaOp& op, char* positions, char* second) const;
  void AddMeta(const MetaOp& op);
  // The batch is full: emit it, or hand it over with its metadata stores.
  Status Complete();
  // EnsureBatch, but never waiting for a slot while a batch waits to be
  // completed (the caller may need that batch to give a slot back).
  Status StartBatch();
  void RunLocked();  // under pending_mu_, with a batch waiting

  TokenOptions opt_;
  int64_t batch_size_;
  SlotSource slots_;
  int64_t row_ = 0;      // row being filled
  int64_t col_ = 0;      // next column in it
  int32_t doc_in_row_ = 0;
  bool meta_ = false;    // the layout has per-token metadata
  bool defer_ = false;   // meta_ and a notify: metadata written by RunPending
  std::function<void()> notify_;
  std::vector<MetaOp> ops_;  // of the batch being packed (defer_)
  // The batch handed over, waiting for its metadata.
  struct Pending {
    bool waiting = false;
    Batch batch;
    std::vector<MetaOp> ops;  // swapped with ops_: both keep their capacity
    char* positions = nullptr;
    char* second = nullptr;
  };
  std::mutex pending_mu_;
  Pending pending_;       // guarded by pending_mu_
  Status pending_error_;  // the first failed emit; guarded by pending_mu_
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_BATCHER_H_
