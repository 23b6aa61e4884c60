// Host memory for batches: a bounded pool of equally sized slots, allocated
// once as page-locked (pinned) memory when a CUDA runtime and device are
// present, else as aligned pageable memory. A slot is lent as a
// shared_ptr<HostBuffer>; it returns to the pool when the last holder (C++
// or a Python tensor) drops it, so steady state allocates nothing.
//
// CUDA is loaded at run time (dlopen of libcudart), so the library needs CUDA
// neither to build nor to run.
//
// Asynchronous copies: `.cuda(non_blocking=True)` of a batch (or the C++
// cudaMemcpyAsync) only queues the copy, so a slot dropped right after may
// still be read by the device. A pinned slot therefore records a CUDA event
// on the legacy default stream (PyTorch's default stream) when it comes back,
// in the thread that dropped it, and the pool waits for that event before it
// lends the slot again. Copies queued on other, non-blocking streams are not
// covered: keep the batch until that stream has passed the copy, as with any
// pinned memory PyTorch's own allocator did not hand out.
//
// Thread-safety: all BufferPool methods are thread-safe. A lent HostBuffer
// may outlive its pool.
#ifndef SHARDSTREAM_PINNED_POOL_H_
#define SHARDSTREAM_PINNED_POOL_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "shardstream/export.h"
#include "shardstream/result.h"

namespace shardstream {

enum class HostMemoryKind { kPageable, kCudaPinned };

SHARDSTREAM_EXPORT const char* HostMemoryKindName(HostMemoryKind kind);

class HostBuffer;

// Allocates and frees host memory of one kind.
class SHARDSTREAM_EXPORT HostAllocator {
 public:
  virtual ~HostAllocator();
  virtual HostMemoryKind kind() const = 0;
  // On failure returns kIo (out of memory / pinned allocation failed).
  virtual Result<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* p, size_t bytes) = 0;
  // Device work that may still read a buffer (see above): Fence is called in
  // the thread that returns the buffer to its pool and marks the work queued
  // so far; WaitFence, before the buffer is written again, blocks until that
  // work is done and returns whether it had to wait. Pageable memory has no
  // device reader, so the defaults do nothing.
  virtual void Fence(HostBuffer* b);
  virtual bool WaitFence(HostBuffer* b);
  // Releases what Fence kept for the buffer (before Free).
  virtual void DropFence(HostBuffer* b);
};

// Pageable memory aligned to 4 KiB (so DMA-friendly and SIMD-safe).
SHARDSTREAM_EXPORT std::shared_ptr<HostAllocator> PageableAllocator();
// cudaHostAlloc/cudaFreeHost through a dynamically loaded libcudart, or null
// when no CUDA runtime or no device is present. Setting the environment
// variable SHARDSTREAM_PINNED=0 disables it.
SHARDSTREAM_EXPORT std::shared_ptr<HostAllocator> CudaPinnedAllocator();
// CudaPinnedAllocator() when available, else PageableAllocator().
SHARDSTREAM_EXPORT std::shared_ptr<HostAllocator> DefaultHostAllocator();

// One slot of pool memory.
class SHARDSTREAM_EXPORT HostBuffer {
 public:
  HostBuffer(void* data, size_t capacity, HostMemoryKind kind)
      : data_(data), capacity_(capacity), kind_(kind) {}
  void* data() const { return data_; }
  size_t capacity() const { return capacity_; }
  HostMemoryKind kind() const { return kind_; }

  // The allocator's record of device work on this buffer (a CUDA event and
  // its device); only the allocator's Fence/WaitFence/DropFence touch it.
  struct FenceState {
    void* event = nullptr;
    int device = -1;
    bool pending = false;
  };
  FenceState& fence() { return fence_; }

 private:
  void* data_;
  size_t capacity_;
  HostMemoryKind kind_;
  FenceState fence_;
};

struct BufferPoolOptions {
  // Bytes per slot. Default: 64 MiB.
  size_t slot_bytes = size_t{64} << 20;
  // Number of slots; the pool's memory is slot_bytes * slots. Default: 4.
  size_t slots = 4;
  // Allocator; null means DefaultHostAllocator(). Default: null.
  std::shared_ptr<HostAllocator> allocator;
  // Allocate every slot in Create (pinning is slow, and a slot first needed
  // mid-epoch would stall that batch); otherwise on first need. Default: false.
  bool preallocate = false;
};

struct BufferPoolStats {
  uint64_t allocations = 0;  // slots allocated from the allocator (ever)
  uint64_t acquires = 0;     // buffers lent out (ever)
  uint64_t in_use = 0;       // buffers lent out now
  uint64_t waits = 0;        // Acquire calls that had to wait for a return
  uint64_t waiting = 0;      // Acquire calls waiting now
  uint64_t fence_waits = 0;  // slots lent only after waiting for the device to copy them
};

class SHARDSTREAM_EXPORT BufferPool {
 public:
  // Slots are allocated lazily, the first time each is needed.
  static Result<std::shared_ptr<BufferPool>> Create(BufferPoolOptions options);
  ~BufferPool();

  // Lends a free slot, waiting up to `timeout` for one to be returned.
  // On failure returns kCancelled after Cancel(), kUnavailable on timeout,
  // kIo if allocation fails.
  Result<std::shared_ptr<HostBuffer>> Acquire(
      std::chrono::milliseconds timeout = std::chrono::milliseconds::max());
  // Wakes every waiter in Acquire with kCancelled; later Acquire calls fail.
  void Cancel();
  // Undoes Cancel(), so the pool (its slots allocated, pinned) serves again;
  // call only once nothing waits in Acquire any more.
  void Resume();

  HostMemoryKind kind() const;
  size_t slot_bytes() const;
  size_t slots() const;
  BufferPoolStats stats() const;

  struct State;  // internal; public only for the implementation's helpers

 private:
  explicit BufferPool(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace shardstream

#endif  // SHARDSTREAM_PINNED_POOL_H_
