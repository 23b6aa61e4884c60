// Batch: what Loader::next() returns. Its tensors live in one slot of a
// BufferPool (pinned when CUDA is present), so the caller can start an
// asynchronous copy to the device straight from them, and Python can view
// them without copying: owner() keeps the slot out of the pool until the last
// copy of the Batch (or of owner()) is dropped.
//
// Fixed-shape fields are stacked into one C-order tensor [rows, ...]. Byte
// and string fields are variable-length: TensorView::bytes(row); so are
// ragged tensors, whose shapes are in a companion "<name>.shape" tensor. Packed or
// padded token batches have the tensors described in options.h
// (TokenOptions).
//
// Thread-safety: a Batch is an immutable value once returned; copies may be
// used from different threads. Copying costs a few reference counts.
#ifndef SHARDSTREAM_BATCH_H_
#define SHARDSTREAM_BATCH_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardstream/decode.h"
#include "shardstream/dtype.h"
#include "shardstream/export.h"
#include "shardstream/pinned_pool.h"

namespace shardstream {

namespace internal {
struct BatchLayout;
struct SlotHeader;
class BatchWriter;
class ShardNames;
}  // namespace internal

// A view of one tensor of a batch; valid while the Batch (or its owner()) is.
struct TensorView {
  std::string_view name;
  DType dtype = DType::kUint8;
  bool is_bytes = false;    // variable-length bytes, one string per row
  bool is_string = false;   // bytes checked to be UTF-8
  bool is_json = false;     // ... and to be JSON text (rows of absent optional fields are empty)
  // A ragged field (FieldSpec::ragged): is_bytes rows holding elements of
  // `dtype`, row r's shape in row r of the int64 tensor "<name>.shape".
  Ragged ragged = Ragged::kError;
  int ndim = 0;             // dimensions including the leading batch one
  int64_t shape[kMaxDims] = {};
  void* data = nullptr;     // fixed-shape tensors: C-order elements
  size_t nbytes = 0;        // fixed-shape tensors: bytes at data

  // For is_bytes tensors: the bytes of `row`. REQUIRES: 0 <= row < shape[0].
  std::string_view bytes(int64_t row) const {
    return {arena_ + spans_[2 * row], static_cast<size_t>(spans_[2 * row + 1] - spans_[2 * row])};
  }

  const char* arena_ = nullptr;  // internal
  const int64_t* spans_ = nullptr;
};

// Which sample of the epoch's shard list a batch row (or packed document)
// came from.
struct SampleId {
  int32_t shard = -1;   // index into the epoch's shard list (Batch::url)
  int64_t index = -1;   // sample number within the shard
};

class SHARDSTREAM_EXPORT Batch {
 public:
  Batch() = default;

  bool empty() const { return header_ == nullptr; }
  // Rows of every tensor: samples, or sequences for token batches.
  int64_t rows() const;
  size_t num_tensors() const;
  TensorView tensor(size_t i) const;
  // The tensor called `name`, or one with data == nullptr and empty name.
  TensorView tensor(std::string_view name) const;
  // Bytes of all fixed-shape tensors plus variable-length bytes.
  size_t nbytes() const;

  // The samples in this batch, in row order (for token batches: the
  // documents whose first token is in this batch).
  int64_t num_samples() const;
  std::string_view key(int64_t i) const;
  const std::string& url(int64_t i) const;
  SampleId sample(int64_t i) const;

  // Token batches: the document that goes on in the next batch, and how
  // many of its tokens (end-of-document token included) are in this and
  // earlier batches. Returns false when none does.
  bool continued(SampleId* id, int64_t* tokens) const;

  int64_t epoch() const { return epoch_; }
  // Position of this batch in its epoch for this consumer, from 0.
  int64_t index() const { return index_; }

  // The pool slot the tensors live in (null for an empty batch).
  const std::shared_ptr<HostBuffer>& owner() const { return owner_; }
  HostMemoryKind memory_kind() const;

 private:
  friend class internal::BatchWriter;
  std::shared_ptr<const internal::BatchLayout> layout_;
  std::shared_ptr<HostBuffer> owner_;
  std::shared_ptr<void> overflow_;  // heap arena when the slot's was too small
  std::shared_ptr<const internal::ShardNames> urls_;
  const internal::SlotHeader* header_ = nullptr;
  int64_t epoch_ = 0;
  int64_t index_ = 0;
};

}  // namespace shardstream

#endif  // SHARDSTREAM_BATCH_H_
