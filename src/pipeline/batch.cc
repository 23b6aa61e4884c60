// Batch accessors and the slot writer.
#include <algorithm>

#include "pipeline/batch_layout.h"
#include "shardstream/batch.h"

namespace shardstream {
namespace internal {
namespace {
size_t Align64(size_t n) { return (n + 63) & ~size_t{63}; }
}  // namespace

std::shared_ptr<BatchLayout> BatchLayout::Make(std::vector<ColumnLayout> columns,
                                               int64_t max_rows, int64_t max_samples,
                                               size_t arena_bytes) {
  auto l = std::make_shared<BatchLayout>();
  l->max_rows = max_rows;
  l->max_samples = max_samples;
  size_t at = Align64(sizeof(SlotHeader));
  for (ColumnLayout& c : columns) {
    c.offset = at;
    at += Align64(c.is_bytes ? sizeof(int64_t) * 2 * static_cast<size_t>(max_rows)
                             : c.row_bytes * static_cast<size_t>(max_rows));
  }
  l->columns = std::move(columns);
  l->records_offset = at;
  at += Align64(sizeof(SampleRecord) * static_cast<size_t>(max_samples));
  l->arena_offset = at;
  l->arena_bytes = arena_bytes;
  l->slot_bytes = Align64(at + arena_bytes);
  return l;
}

BatchWriter::BatchWriter(std::shared_ptr<const BatchLayout> layout) : layout_(std::move(layout)) {}

void BatchWriter::Begin(std::shared_ptr<HostBuffer> slot,
                        std::shared_ptr<const ShardNames> urls, int64_t epoch,
                        int64_t index) {
  slot_ = std::move(slot);
  urls_ = std::move(urls);
  epoch_ = epoch;
  index_ = index;
  base_ = static_cast<char*>(slot_->data());
  header_ = new (base_) SlotHeader();
  arena_ = base_ + layout_->arena_offset;
  arena_cap_ = layout_->arena_bytes;
  arena_used_ = 0;
  records_ = reinterpret_cast<SampleRecord*>(base_ + layout_->records_offset);
  records_cap_ = layout_->max_samples;
  overflow_.reset();
}

int64_t BatchWriter::Append(std::string_view bytes, size_t align) {
  // Where the bytes go: aligned first, then room made for them there.
  const size_t at = align > 1 ? (arena_used_ + align - 1) / align * align : arena_used_;
  if (at + bytes.size() > arena_cap_) {
    if (!overflow_) {
      overflow_ = std::make_shared<Overflow>();
      overflows_.fetch_add(1, std::memory_order_relaxed);
    }
    std::vector<char>& heap = overflow_->arena;
    if (arena_ != heap.data()) {  // first move: copy what the slot arena holds
      heap.assign(arena_, arena_ + arena_used_);
    }
    heap.resize(std::max(at + bytes.size(), 2 * arena_cap_ + 4096));
    arena_ = heap.data();
    arena_cap_ = heap.size();
  }
  if (!bytes.empty()) std::memcpy(arena_ + at, bytes.data(), bytes.size());
  arena_used_ = at + bytes.size();
  return static_cast<int64_t>(at);
}

void BatchWriter::SetBytes(size_t c, int64_t row, std::string_view bytes, size_t align) {
  int64_t at = Append(bytes, align);
  int64_t* spans = reinterpret_cast<int64_t*>(column(c));
  spans[2 * row] = at;
  spans[2 * row + 1] = at + static_cast<int64_t>(bytes.size());
}

void BatchWriter::AddSample(SampleId id, std::string_view key) {
  if (header_->nsamples == records_cap_) {
    if (!overflow_) {
      overflow_ = std::make_shared<Overflow>();
      overflows_.fetch_add(1, std::memory_order_relaxed);
    }
    std::vector<SampleRecord>& heap = overflow_->records;
    if (records_ != heap.data()) heap.assign(records_, records_ + header_->nsamples);
    heap.resize(static_cast<size_t>(std::max<int64_t>(2 * records_cap_, 64)));
    records_ = heap.data();
    records_cap_ = static_cast<int64_t>(heap.size());
  }
  int64_t k = Append(key);
  records_[header_->nsamples++] =
      SampleRecord{id.shard, 0, id.index, k, k + static_cast<int64_t>(key.size())};
}

Batch BatchWriter::Finish() {
  header_->arena = arena_;
  header_->records = records_;
  Batch b;
  b.layout_ = layout_;
  b.owner_ = std::move(slot_);
  b.overflow_ = std::move(overflow_);
  b.urls_ = std::move(urls_);
  b.header_ = header_;
  b.epoch_ = epoch_;
  b.index_ = index_;
  header_ = nullptr;
  base_ = nullptr;
  return b;
}

}  // namespace internal

int64_t Batch::rows() const { return header_ ? header_->rows : 0; }
size_t Batch::num_tensors() const { return layout_ ? layout_->columns.size() : 0; }
int64_t Batch::num_samples() const { return header_ ? header_->nsamples : 0; }

TensorView Batch::tensor(size_t i) const {
  const internal::ColumnLayout& c = layout_->columns[i];
  TensorView t;
  t.name = c.name;
  t.dtype = c.dtype;
  t.is_bytes = c.is_bytes;
  t.is_string = c.is_string;
  t.is_json = c.is_json;
  t.ragged = c.ragged;
  t.ndim = 1 + c.ndim;
  t.shape[0] = header_->rows;
  for (int d = 0; d < c.ndim; ++d) t.shape[d + 1] = c.shape[d];
  char* base = static_cast<char*>(owner_->data()) + c.offset;
  if (c.is_bytes) {
    t.arena_ = header_->arena;
    t.spans_ = reinterpret_cast<const int64_t*>(base);
    t.nbytes = 0;
  } else {
    t.data = base;
    t.nbytes = c.row_bytes * static_cast<size_t>(header_->rows);
  }
  return t;
}

TensorView Batch::tensor(std::string_view name) const {
  for (size_t i = 0; i < num_tensors(); ++i)
    if (layout_->columns[i].name == name) return tensor(i);
  return TensorView();
}

size_t Batch::nbytes() const {
  size_t n = 0;
  for (size_t i = 0; i < num_tensors(); ++i) {
    TensorView t = tensor(i);
    if (!t.is_bytes) {
      n += t.nbytes;
    } else {
      for (int64_t r = 0; r < rows(); ++r) n += t.bytes(r).size();
    }
  }
  return n;
}

std::string_view Batch::key(int64_t i) const {
  const internal::SampleRecord& r = header_->records[i];
  return {header_->arena + r.key_begin, static_cast<size_t>(r.key_end - r.key_begin)};
}

const std::string& Batch::url(int64_t i) const {
  static const std::string kNone;
  const int32_t s = header_->records[i].shard;
  if (!urls_ || s < 0) return kNone;
  return urls_->Url(s);
}

SampleId Batch::sample(int64_t i) const {
  const internal::SampleRecord& r = header_->records[i];
  return SampleId{r.shard, r.index};
}

bool Batch::continued(SampleId* id, int64_t* tokens) const {
  if (header_ == nullptr || header_->carry_tokens < 0) return false;
  *id = header_->carry;
  *tokens = header_->carry_tokens;
  return true;
}

HostMemoryKind Batch::memory_kind() const {
  return owner_ ? owner_->kind() : HostMemoryKind::kPageable;
}

}  // namespace shardstream
