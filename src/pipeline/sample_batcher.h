// SampleBatcher: stacks the decoded fields of `batch_size` samples into a
// slot of its SlotSource (fixed shapes stacked, ragged fields in the slot's
// arena) and emits each batch when full. Each optional field also gets a
// bool column "<output>.present" [B]: whether the sample had it (a missing
// field's value is zeros, or empty bytes). A ragged field (FieldSpec::
// ragged, or an image without a size) has its rows' elements in the arena
// and an int64 column "<output>.shape" [B, ndim].
//
// Thread-safety: used by one thread (the assembler).
#ifndef SHARDSTREAM_PIPELINE_SAMPLE_BATCHER_H_
#define SHARDSTREAM_PIPELINE_SAMPLE_BATCHER_H_

#include <cstdint>
#include <vector>

#include "pipeline/row_input.h"
#include "pipeline/slot_source.h"
#include "shardstream/decode.h"
#include "shardstream/options.h"

namespace shardstream::internal {

class SHARDSTREAM_EXPORT SampleBatcher {
 public:
  SampleBatcher(std::vector<FieldSpec> fields, int64_t batch_size, PoolConfig pool, EmitFn emit);
  SlotSource& slots() { return slots_; }
  const SlotSource& slots() const { return slots_; }
  // Where image geometry is drawn from (images not decoded ahead).
  void set_draw(uint64_t seed, int64_t epoch) {
    seed_ = seed;
    epoch_ = epoch;
  }
  // Decodes row's fields into the batch in progress; emits it when full.
  Status Add(const RowInput& row);
  // Emits the partial batch, if any, or drops it (drop_last).
  Status Flush(bool drop = false);
  // Emits `batches` full batches of padding after the last (Flush first):
  // every row zeros (empty bytes, shape 0, present 0) and no samples. Keeps
  // a consumer that skipped data in step with the others; the shapes are
  // the batches' before, or, where no sample was batched, the specs' (as
  // Absent); a spec that does not fix its field's type is kConfig.
  Status Pad(int64_t batches);

 private:
  Status InitLayout(const std::vector<DecodedField>& decoded);
  // The value of an optional field the first sample lacks, when its spec
  // alone fixes its type (bytes, text, JSON, labels, images, raw scalars,
  // raw with a full shape, ragged raw).
  Result<DecodedField> Absent(const FieldSpec& spec) const;

  std::vector<FieldSpec> fields_;
  int64_t batch_size_;
  SlotSource slots_;
  std::vector<DecodedField> decoded_;  // reused
  std::vector<size_t> optional_;       // indices of optional fields: one mask column each
  std::vector<Ragged> ragged_;         // per field
  std::vector<size_t> shape_col_;      // per field: its shape column (ragged fields)
  std::vector<std::vector<uint8_t>> pixels_;  // per field: images decoded here
  uint64_t seed_ = 0;
  int64_t epoch_ = 0;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_SAMPLE_BATCHER_H_
