#include "pipeline/slot_source.h"

#include <chrono>

#include "pipeline/wait_histogram.h"

namespace shardstream::internal {

Status SlotSource::Init(std::shared_ptr<const BatchLayout> layout) {
  if (config_.keep != nullptr && *config_.keep != nullptr) {
    const std::shared_ptr<BufferPool>& kept = *config_.keep;
    const HostMemoryKind kind =
        (config_.allocator ? config_.allocator : DefaultHostAllocator())->kind();
    if (kept->slot_bytes() == layout->slot_bytes && kept->slots() == config_.slots &&
        kept->kind() == kind) {
      kept->Resume();  // the previous run, which cancelled it, has stopped
      pool_ = kept;
    }
  }
  if (pool_ == nullptr) {
    BufferPoolOptions o;
    o.slot_bytes = layout->slot_bytes;
    o.slots = config_.slots;
    o.allocator = config_.allocator;
    o.preallocate = true;  // no allocation (or pinning) once batches flow
    SHARDSTREAM_ASSIGN_OR_RETURN(pool_, BufferPool::Create(std::move(o)));
    if (config_.keep != nullptr) *config_.keep = pool_;
  }
  pool_ptr_.store(pool_.get(), std::memory_order_release);
  writer_ = std::make_unique<BatchWriter>(std::move(layout));
  return Status::OK();
}

Status SlotSource::EnsureBatch() {
  if (writer_->active()) return Status::OK();
  const auto t0 = std::chrono::steady_clock::now();
  auto acquired = pool_->Acquire();
  if (config_.wait_ns != nullptr) AddWaitSince(config_.wait_ns, t0);
  SHARDSTREAM_ASSIGN_OR_RETURN(std::shared_ptr<HostBuffer> slot, std::move(acquired));
  writer_->Begin(std::move(slot), urls_, epoch_, next_index_++);
  return Status::OK();
}

Status SlotSource::EmitBatch() {
  if (!writer_ || !writer_->active()) return Status::OK();
  return emit_(writer_->Finish());
}

}  // namespace shardstream::internal
