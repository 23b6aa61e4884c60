// Token batches: documents packed back to back (kPack) or one per row
// (kPad) into [batch_size, seq_len]. Nothing is dropped: what does not fit
// goes on in the next row or batch, and the batch records which document
// goes on and how far it got, so a resume can skip exactly those tokens.
// The per-token loops below are the pipeline's hottest code: let GCC
// vectorize them also in -O2 builds (clang vectorizes at -O2 already).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize")
#endif

#include <algorithm>
#include <cstring>

#include "pipeline/token_packer.h"
#include "format/decode_error.h"
#include "pipeline/fill_seq.h"

namespace shardstream::internal {
namespace {

int64_t LoadInt(const char* p, DType t) {
  switch (t) {
    case DType::kUint8: return static_cast<uint8_t>(*p);
    case DType::kInt8: return static_cast<int8_t>(*p);
    case DType::kUint16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::kInt16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::kUint32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::kInt32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::kUint64: { uint64_t v; std::memcpy(&v, p, 8); return static_cast<int64_t>(v); }
    case DType::kInt64: { int64_t v; std::memcpy(&v, p, 8); return v; }
    default: return 0;
  }
}

void StoreInt(char* p, DType t, int64_t v) {
  switch (DTypeSize(t)) {
    case 1: { int8_t x = static_cast<int8_t>(v); std::memcpy(p, &x, 1); break; }
    case 2: { int16_t x = static_cast<int16_t>(v); std::memcpy(p, &x, 2); break; }
    case 4: { int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); break; }
    default: std::memcpy(p, &v, 8);
  }
}

enum Col : size_t { kTokens = 0, kSecond = 1, kPositions = 2, kLengths = 3 };

}  // namespace

TokenPacker::TokenPacker(TokenOptions options, int64_t batch_size, PoolConfig pool, EmitFn emit)
    : opt_(std::move(options)), batch_size_(batch_size), slots_(std::move(pool), std::move(emit)) {}

Status TokenPacker::Init() {
  const bool pack = opt_.layout == TokenLayout::kPack;
  auto col = [&](const char* name, DType t, bool per_token) {
    ColumnLayout c;
    c.name = name;
    c.dtype = t;
    c.ndim = per_token ? 1 : 0;
    c.shape[0] = opt_.seq_len;
    c.row_bytes = DTypeSize(t) * static_cast<size_t>(per_token ? opt_.seq_len : 1);
    return c;
  };
  std::vector<ColumnLayout> cols;
  cols.push_back(col("tokens", opt_.dtype, true));
  if (!pack || opt_.document_metadata) {
    cols.push_back(pack ? col("doc_ids", DType::kInt32, true) : col("mask", DType::kUint8, true));
    cols.push_back(col("positions", DType::kInt32, true));
  }
  if (!pack) cols.push_back(col("lengths", DType::kInt32, false));
  meta_ = !pack || opt_.document_metadata;
  defer_ = (meta_ || direct_) && notify_ != nullptr;
  // Pieces of documents and row ends: enough for typical packing; more
  // grows the list once, and it keeps its capacity.
  if (defer_) {
    ops_.reserve(static_cast<size_t>(batch_size_) * 10);
    const size_t cuts = static_cast<size_t>(batch_size_ * opt_.seq_len) / kMetaJobTokens + 2;
    meta_cuts_.reserve(cuts);
    for (Pending& p : pending_) {
      p.ops.reserve(ops_.capacity());
      p.meta_cuts.reserve(cuts);
    }
  }
  // A row holds at most seq_len documents; 8 per row covers typical packing,
  // more spills the batch's sample list to the heap.
  int64_t max_docs = batch_size_ * std::min<int64_t>(opt_.seq_len, 8) + 1;
  return slots_.Init(BatchLayout::Make(std::move(cols), batch_size_, max_docs,
                                       slots_.arena_bytes()));
}

Status TokenPacker::EndRow() {
  BatchWriter& w = slots_.writer();
  const size_t L = static_cast<size_t>(opt_.seq_len);
  const size_t c = static_cast<size_t>(col_);
  const size_t r = static_cast<size_t>(row_);
  const size_t tsz = DTypeSize(opt_.dtype);
  char* tok = w.column(kTokens) + r * L * tsz;
  for (size_t i = c; i < L; ++i) StoreInt(tok + i * tsz, opt_.dtype, opt_.pad_token);
  if (meta_ && c < L) {
    const int32_t second = opt_.layout == TokenLayout::kPack ? -1 : 0;
    AddMeta(MetaOp{r * L + c, L - c, 0, 0, second});
  }
  if (opt_.layout == TokenLayout::kPad)
    reinterpret_cast<int32_t*>(w.column(kLengths))[r] = static_cast<int32_t>(col_);
  ++row_;
  col_ = 0;
  doc_in_row_ = 0;
  w.set_rows(row_);
  return Status::OK();
}

void TokenPacker::Apply(const CopyOp& op) {
  BatchWriter& w = slots_.writer();
  const bool pack = opt_.layout == TokenLayout::kPack;
  const size_t tsz = DTypeSize(opt_.dtype);
  const size_t isz = DTypeSize(op.dtype);
  char* tok = w.column(kTokens) + op.base * tsz;
  if (op.real == 0) {
    // only the end-of-document token in this piece
  } else if (op.direct != nullptr) {
    reads_.AddValues(*op.direct, op.from, tok, static_cast<size_t>(op.real) * tsz);
  } else if (op.dtype == opt_.dtype) {
    std::memcpy(tok, op.src, static_cast<size_t>(op.real) * tsz);
  } else {
    for (int64_t i = 0; i < op.real; ++i)
      StoreInt(tok + i * tsz, opt_.dtype, LoadInt(op.src + i * isz, op.dtype));
  }
  if (op.real < op.k) StoreInt(tok + op.real * tsz, opt_.dtype, opt_.eod_token);
  if (meta_) AddMeta(MetaOp{op.base, static_cast<size_t>(op.k), op.pos0, 1, pack ? op.doc : 1});
}

void TokenPacker::Meta(const MetaOp& op, char* positions, char* second) const {
  FillSeq(reinterpret_cast<int32_t*>(positions) + op.base, op.first, op.step, op.k);
  if (opt_.layout == TokenLayout::kPack) {
    FillSeq(reinterpret_cast<int32_t*>(second) + op.base, op.second, 0, op.k);
  } else {
    uint8_t* mask = reinterpret_cast<uint8_t*>(second) + op.base;
    std::fill(mask, mask + op.k, static_cast<uint8_t>(op.second));
  }
}

void TokenPacker::AddMeta(const MetaOp& op) {
  if (defer_) {
    ops_.push_back(op);
  } else {
    BatchWriter& w = slots_.writer();
    Meta(op, w.column(kPositions), w.column(kSecond));
  }
}

Status TokenPacker::Complete() {
  BatchWriter& w = slots_.writer();
  if (!defer_) {
    if (!reads_.empty()) {
      Status s = RunReads();
      if (!s.ok()) {
        if (w.active()) (void)slots_.FinishBatch();  // not emitted: its tokens are not all there
        return s;
      }
    }
    return slots_.EmitBatch();
  }
  if (!w.active()) return Status::OK();
  char* positions = meta_ ? w.column(kPositions) : nullptr;
  char* second = meta_ ? w.column(kSecond) : nullptr;
  Batch b = slots_.FinishBatch();
  reads_.Plan();
  // The metadata in parts, so several workers write it, alongside the reads.
  meta_cuts_.clear();
  size_t tokens = 0;
  for (size_t i = 0; i < ops_.size(); ++i) {
    if (i == 0 || tokens >= kMetaJobTokens) {
      meta_cuts_.push_back(i);
      tokens = 0;
    }
    tokens += ops_[i].k;
  }
  if (!ops_.empty()) meta_cuts_.push_back(ops_.size());
  std::unique_lock<std::mutex> lock(pending_mu_);
  DrainLocked(lock, kMaxPending - 1);  // room for this one: help the oldest along
  if (!pending_error_.ok()) {
    ops_.clear();
    reads_.Clear();
    return pending_error_;
  }
  Pending& p = pending_[(pending_head_ + pending_count_) % kMaxPending];
  p.batch = std::move(b);
  p.ops.swap(ops_);  // ops_ gets the list FinishLocked emptied
  swap(p.reads, reads_);
  p.meta_cuts.swap(meta_cuts_);
  p.jobs = p.reads.jobs() + (p.meta_cuts.empty() ? 0 : p.meta_cuts.size() - 1);
  p.next_job = 0;
  p.jobs_done = 0;
  p.read_error = Status::OK();
  p.positions = positions;
  p.second = second;
  ++pending_count_;
  lock.unlock();
  notify_();
  return Status::OK();
}

Status TokenPacker::RunReads() {
  reads_.Plan();
  Status s;
  for (size_t j = 0; j < reads_.jobs() && s.ok(); ++j) s = reads_.RunJob(j);
  reads_.Clear();
  return s;
}

Status TokenPacker::StartBatch() {
  if (defer_ && !slots_.writer().active() && !slots_.HasFreeSlot())
    SHARDSTREAM_RETURN_IF_ERROR(FinishPending());
  return slots_.EnsureBatch();
}

bool TokenPacker::StepLocked(std::unique_lock<std::mutex>& lock) {
  bool did = false;
  for (size_t k = 0; k < pending_count_; ++k) {
    Pending& p = pending_[(pending_head_ + k) % kMaxPending];
    if (p.next_job == p.jobs) continue;
    const size_t j = p.next_job++;
    const bool failed = !p.read_error.ok() || !pending_error_.ok();
    lock.unlock();
    // p stays put: it is not emitted (nor its slot reused) before this job
    // is counted, and nobody else touches its lists until then.
    Status s = failed ? Status::OK() : RunJob(&p, j);
    lock.lock();
    if (!s.ok() && p.read_error.ok()) p.read_error = std::move(s);
    ++p.jobs_done;
    did = true;
    break;
  }
  while (pending_count_ > 0) {
    Pending& p = pending_[pending_head_];
    if (p.jobs_done < p.jobs) break;
    FinishLocked(&p);
    pending_head_ = (pending_head_ + 1) % kMaxPending;
    --pending_count_;
    pending_cv_.notify_all();
    did = true;
  }
  return did;
}

void TokenPacker::FinishLocked(Pending* p) {
  if (!p->read_error.ok() && pending_error_.ok()) pending_error_ = p->read_error;
  // After an error nothing more is emitted: a batch whose tokens are not
  // all there, or any after it, would break the order.
  if (pending_error_.ok()) {
    Status s = slots_.Emit(std::move(p->batch));
    if (!s.ok()) pending_error_ = std::move(s);
  }
  p->batch = Batch();
  p->ops.clear();
  p->reads.Clear();
}

Status TokenPacker::RunJob(Pending* p, size_t j) const {
  if (j < p->reads.jobs()) return p->reads.RunJob(j);
  const size_t m = j - p->reads.jobs();
  for (size_t i = p->meta_cuts[m]; i < p->meta_cuts[m + 1]; ++i)
    Meta(p->ops[i], p->positions, p->second);
  return Status::OK();
}

void TokenPacker::DrainLocked(std::unique_lock<std::mutex>& lock, size_t left) {
  while (pending_count_ > left)
    if (!StepLocked(lock)) pending_cv_.wait(lock);
}

bool TokenPacker::RunPending() {
  std::unique_lock<std::mutex> lock(pending_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  return StepLocked(lock);
}

Status TokenPacker::FinishPending() {
  std::unique_lock<std::mutex> lock(pending_mu_);
  DrainLocked(lock, 0);
  return pending_error_;
}

Status TokenPacker::Add(const RowInput& row, const DecodedField& tokens, int64_t skip,
                        const DirectDoc* direct) {
  if (!tokens.is_tensor || tokens.ndim != 1 || !IsInteger(tokens.dtype))
    return FieldError(FieldContext{row.key, opt_.field, row.url, row.offset}, 0,
                      "token field is not a 1-D integer array");
  if (direct != nullptr && tokens.dtype != opt_.dtype)
    return FieldError(FieldContext{row.key, opt_.field, row.url, row.offset}, 0,
                      "a document read directly must have the batch's dtype");
  if (!slots_.ready()) SHARDSTREAM_RETURN_IF_ERROR(Init());
  const bool pack = opt_.layout == TokenLayout::kPack;
  const int64_t n = tokens.shape[0];
  const int64_t total = n + (pack && opt_.eod_token >= 0 ? 1 : 0);
  const int64_t L = opt_.seq_len;
  const size_t isz = DTypeSize(tokens.dtype);
  const char* src = tokens.data.data();
  int64_t done = std::min(skip, total);
  if (!pack && col_ > 0) SHARDSTREAM_RETURN_IF_ERROR(EndRow());  // a fresh row per document
  if (done == total) {  // nothing (left) to write: record it in the current batch
    SHARDSTREAM_RETURN_IF_ERROR(StartBatch());
    slots_.writer().AddSample(row.id, row.key);
    return Status::OK();
  }
  bool check = direct != nullptr;
  while (done < total) {
    if (!slots_.writer().active()) SHARDSTREAM_RETURN_IF_ERROR(StartBatch());
    BatchWriter& w = slots_.writer();
    if (check) {  // the headers, in the batch that takes its first tokens
      reads_.AddCheck(*direct);
      check = false;
    }
    CopyOp op;
    op.k = std::min(total - done, L - col_);
    op.base = static_cast<size_t>(row_ * L + col_);
    op.real = std::max<int64_t>(0, std::min(op.k, n - done));  // document tokens
    op.src = direct ? nullptr : src + static_cast<size_t>(std::min(done, n)) * isz;
    op.direct = direct;
    op.from = static_cast<uint64_t>(std::min(done, n)) * isz;
    op.pos0 = static_cast<int32_t>(done);
    op.doc = doc_in_row_;
    op.dtype = tokens.dtype;
    const int64_t k = op.k;
    Apply(op);
    done += k;
    col_ += k;
    if (done == total) {
      w.AddSample(row.id, row.key);
      ++doc_in_row_;
    }
    if (col_ == L || (!pack && done == total)) {
      SHARDSTREAM_RETURN_IF_ERROR(EndRow());
      if (row_ == batch_size_) {
        if (done < total) w.set_carry(row.id, done);
        row_ = 0;
        SHARDSTREAM_RETURN_IF_ERROR(Complete());
      }
    } else {
      w.set_rows(row_ + 1);
    }
  }
  return Status::OK();
}

Status TokenPacker::Flush() {
  if (!slots_.ready() || !slots_.writer().active()) return Status::OK();
  if (col_ > 0) SHARDSTREAM_RETURN_IF_ERROR(EndRow());
  row_ = 0;
  return Complete();
}

Status TokenPacker::Pad(int64_t batches) {
  if (!slots_.ready()) SHARDSTREAM_RETURN_IF_ERROR(Init());
  for (int64_t b = 0; b < batches; ++b) {
    SHARDSTREAM_RETURN_IF_ERROR(StartBatch());
    while (row_ < batch_size_) SHARDSTREAM_RETURN_IF_ERROR(EndRow());  // each row all padding
    row_ = 0;
    SHARDSTREAM_RETURN_IF_ERROR(Complete());
  }
  return Status::OK();
}

}  // namespace shardstream::internal
