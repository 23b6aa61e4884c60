// SlotSource: the batch slots of a batcher (SampleBatcher, TokenPacker).
// It creates a BufferPool on first use, sized from the batch layout (or
// reuses one kept across runs), writes batches into its slots and hands
// finished batches to an emit callback (which may block: backpressure).
//
// Thread-safety: used by one thread (the assembler), but for pool(),
// Cancel() and Emit() (any thread).
#ifndef SHARDSTREAM_PIPELINE_SLOT_SOURCE_H_
#define SHARDSTREAM_PIPELINE_SLOT_SOURCE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/shard_names.h"
#include "pipeline/batch_layout.h"
#include "shardstream/pinned_pool.h"

namespace shardstream::internal {

using EmitFn = std::function<Status(Batch&&)>;

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
  void set_epoch(int64_t epoch, std::shared_ptr<const ShardNames> urls) {
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
  std::shared_ptr<const ShardNames> urls_;
  int64_t epoch_ = 0;
  int64_t next_index_ = 0;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_SLOT_SOURCE_H_
