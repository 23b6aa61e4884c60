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
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pipeline/batch_layout.h"
#include "pipeline/direct_reads.h"
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
  // already delivered before a restore and are not emitted again. With
  // `direct`, `tokens` has no data: the document is read from its shard
  // into the batch before the batch is emitted (its dtype must be the
  // batch's).
  Status Add(const RowInput& row, const DecodedField& tokens, int64_t skip = 0,
             const DirectDoc* direct = nullptr);
  // Emits the partial batch (rows filled so far, the last padded).
  Status Flush();
  // Where the document being written stands (for resume state).
  int64_t row() const { return row_; }
  int64_t col() const { return col_; }

  // Completing batches elsewhere. With `notify` set, a full batch's
  // direct reads and per-token metadata (doc_ids and positions, or mask and
  // positions) are not done by Add: the batch waits, with the list of its
  // reads and stores, for threads that call RunPending (the loader's idle
  // workers), while Add goes on packing the next ones; `notify` tells the
  // workers there is one. Its reads and its metadata stores are cut into
  // jobs that several threads run at once; batches are emitted in order,
  // each once its jobs are done, by the thread that finds it so. Without
  // `notify`, or with neither direct documents (set_direct) nor metadata,
  // batches are completed and emitted by Add and Flush. At most
  // kMaxPending batches wait: Add helps complete the oldest before handing
  // over another. Set both before the first Add.
  void set_notify(std::function<void()> notify) { notify_ = std::move(notify); }
  void set_direct(bool direct) { direct_ = direct; }
  // Runs a job of the oldest waiting batch that has one left, then emits
  // the batches whose jobs are done; false when there was nothing to do
  // or another thread holds the list. Any thread.
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
    const DirectDoc* direct = nullptr;  // instead of src: read at value byte `from`
    uint64_t from = 0;
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
  // Under pending_mu_ (released while a job runs): RunPending's work;
  // false when there was nothing to do.
  bool StepLocked(std::unique_lock<std::mutex>& lock);
  // Under pending_mu_: until at most `left` batches wait, runs their jobs
  // or waits for the threads running them.
  void DrainLocked(std::unique_lock<std::mutex>& lock, size_t left);
  struct Pending;
  void FinishLocked(Pending* p);  // its metadata and emit, under pending_mu_
  // Without notify: the batch's reads, here and now.
  Status RunReads();

  TokenOptions opt_;
  int64_t batch_size_;
  SlotSource slots_;
  int64_t row_ = 0;      // row being filled
  int64_t col_ = 0;      // next column in it
  int32_t doc_in_row_ = 0;
  bool meta_ = false;    // the layout has per-token metadata
  bool direct_ = false;  // documents may come with a DirectDoc
  bool defer_ = false;   // (meta_ or direct_) and a notify: completed by RunPending
  std::function<void()> notify_;
  std::vector<MetaOp> ops_;  // of the batch being packed (defer_)
  DirectReads reads_;        // of the batch being packed
  std::vector<size_t> meta_cuts_;  // its metadata jobs (Pending::meta_cuts), swapped in
  // A batch handed over, waiting for its reads and metadata stores.
  struct Pending {
    Batch batch;
    std::vector<MetaOp> ops;  // swapped with ops_: both keep their capacity
    DirectReads reads;        // swapped with reads_, likewise
    // Jobs: the reads' first, then the metadata stores in parts of about
    // kMetaJobTokens tokens (ops [meta_cuts[m], meta_cuts[m + 1])).
    std::vector<size_t> meta_cuts;  // swapped with meta_cuts_
    size_t jobs = 0, next_job = 0, jobs_done = 0;
    Status read_error;
    char* positions = nullptr;
    char* second = nullptr;
  };
  // Two: the workers go on with the next batch's reads while the last job
  // of the previous one ends, rather than sleep until it is handed over.
  static constexpr size_t kMaxPending = 2;
  static constexpr size_t kMetaJobTokens = size_t{64} << 10;
  // Runs job j of p (a read job or a part of its metadata); no lock held.
  Status RunJob(Pending* p, size_t j) const;
  std::mutex pending_mu_;
  std::condition_variable pending_cv_;  // a waiting batch was emitted
  Pending pending_[kMaxPending];        // a ring; guarded by pending_mu_
  size_t pending_head_ = 0, pending_count_ = 0;
  Status pending_error_;  // the first failed read or emit; guarded by pending_mu_
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_BATCHER_H_
