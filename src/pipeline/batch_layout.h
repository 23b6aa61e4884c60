// How a batch is laid out in its pool slot, and the writer that fills one.
//
// Slot: [SlotHeader][fixed tensors ... | byte-column spans ...][sample records]
//       [arena: bytes of byte columns and sample keys]
// Every region is 64-byte aligned. When the arena or the record region is
// too small for one batch, that batch moves it to the heap (counted in
// overflows); steady state with fixed-shape fields never does.
#ifndef SHARDSTREAM_PIPELINE_BATCH_LAYOUT_H_
#define SHARDSTREAM_PIPELINE_BATCH_LAYOUT_H_

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/shard_names.h"
#include "shardstream/batch.h"

namespace shardstream::internal {

struct ColumnLayout {
  std::string name;
  bool is_bytes = false;
  bool is_string = false;
  bool is_json = false;
  // Ragged: bytes per row holding elements of dtype, their shape in
  // another column (ndim here is theirs).
  Ragged ragged = Ragged::kError;
  DType dtype = DType::kUint8;
  int ndim = 0;  // per row
  int64_t shape[kMaxDims] = {};
  size_t row_bytes = 0;  // fixed-shape: bytes per row
  size_t offset = 0;     // slot offset: the tensor, or the spans of a byte column
};

struct SampleRecord {
  int32_t shard;
  int32_t reserved;
  int64_t index;
  int64_t key_begin;  // in the arena
  int64_t key_end;
};

struct SHARDSTREAM_EXPORT BatchLayout {
  std::vector<ColumnLayout> columns;
  int64_t max_rows = 0;
  int64_t max_samples = 0;
  size_t records_offset = 0;
  size_t arena_offset = 0;
  size_t arena_bytes = 0;
  size_t slot_bytes = 0;

  // Places the columns; row_bytes must be set for fixed-shape columns.
  static std::shared_ptr<BatchLayout> Make(std::vector<ColumnLayout> columns, int64_t max_rows,
                                           int64_t max_samples, size_t arena_bytes);
};

struct SlotHeader {
  int64_t rows = 0;
  int64_t nsamples = 0;
  const char* arena = nullptr;
  const SampleRecord* records = nullptr;
  // Token batches: the document continuing into the next batch.
  SampleId carry;
  int64_t carry_tokens = -1;
};

// Fills one slot. Used by one thread; Finish() hands the batch over.
class SHARDSTREAM_EXPORT BatchWriter {
 public:
  explicit BatchWriter(std::shared_ptr<const BatchLayout> layout);

  bool active() const { return header_ != nullptr; }
  void Begin(std::shared_ptr<HostBuffer> slot, std::shared_ptr<const ShardNames> urls,
             int64_t epoch, int64_t index);
  char* column(size_t c) { return base_ + layout_->columns[c].offset; }
  // `align`: the bytes start at a multiple of it in the arena (ragged
  // tensors' elements).
  void SetBytes(size_t c, int64_t row, std::string_view bytes, size_t align = 1);
  void AddSample(SampleId id, std::string_view key);
  void set_rows(int64_t rows) { header_->rows = rows; }
  void set_carry(SampleId id, int64_t tokens) {
    header_->carry = id;
    header_->carry_tokens = tokens;
  }
  int64_t rows() const { return header_->rows; }
  int64_t nsamples() const { return header_->nsamples; }
  Batch Finish();

  const BatchLayout& layout() const { return *layout_; }
  // Readable from any thread (the loader's stats).
  uint64_t overflows() const { return overflows_.load(std::memory_order_relaxed); }

 private:
  int64_t Append(std::string_view bytes, size_t align = 1);  // into the arena; returns its offset

  struct Overflow {
    std::vector<char> arena;
    std::vector<SampleRecord> records;
  };

  std::shared_ptr<const BatchLayout> layout_;
  std::shared_ptr<HostBuffer> slot_;
  std::shared_ptr<const ShardNames> urls_;
  std::shared_ptr<Overflow> overflow_;
  char* base_ = nullptr;
  SlotHeader* header_ = nullptr;
  char* arena_ = nullptr;
  size_t arena_cap_ = 0;
  size_t arena_used_ = 0;
  SampleRecord* records_ = nullptr;
  int64_t records_cap_ = 0;
  int64_t epoch_ = 0, index_ = 0;
  std::atomic<uint64_t> overflows_{0};
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_BATCH_LAYOUT_H_
