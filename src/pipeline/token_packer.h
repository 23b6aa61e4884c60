// TokenPacker: packs or pads token documents into [batch_size, seq_len]
// batches in the slots of its SlotSource, with per-token metadata (doc_ids
// and positions, or mask and positions) where asked, and documents placed
// by index and read straight from their shards (direct reads).
//
// Thread-safety: used by one thread (the assembler), but for RunPending
// (any thread).
#ifndef SHARDSTREAM_PIPELINE_TOKEN_PACKER_H_
#define SHARDSTREAM_PIPELINE_TOKEN_PACKER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "tar/direct_reads.h"
#include "pipeline/row_input.h"
#include "pipeline/slot_source.h"
#include "shardstream/decode.h"
#include "shardstream/options.h"

namespace shardstream::internal {

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
  // Emits `batches` full batches of padding rows (pad_token; doc_ids -1,
  // positions 0; kPad: mask 0, lengths 0) and no documents. Call after Flush.
  Status Pad(int64_t batches);
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

#endif  // SHARDSTREAM_PIPELINE_TOKEN_PACKER_H_
