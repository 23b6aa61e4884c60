// A bounded pool of host buffers lent as shared_ptr: the deleter returns the
// slot (DALI's RecycleTensor idea). The pool state is shared with every lent
// buffer, so a buffer held by Python may outlive the pool object.
//
// Steady state allocates nothing: each slot has one HostBuffer for its whole
// life, and the shared_ptr control blocks come from a free list kept in the
// pool state (BlockAllocator below) instead of operator new.
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#include "shardstream/pinned_pool.h"

namespace shardstream {

struct BufferPool::State {
  BufferPoolOptions options;
  mutable std::mutex mu;
  std::condition_variable returned;
  std::vector<HostBuffer*> free_slots;  // allocated and idle; capacity reserved
  size_t allocated = 0;                 // slots allocated so far (<= options.slots)
  bool cancelled = false;
  BufferPoolStats stats;
  std::vector<std::unique_ptr<HostBuffer>> all;  // every slot, freed when the state dies

  // Recycled control blocks (all of one size: only one shared_ptr type is
  // ever made here). Guarded by mu.
  std::vector<void*> free_blocks;
  size_t block_bytes = 0;

  ~State() {
    for (auto& b : all) {
      options.allocator->DropFence(b.get());
      options.allocator->Free(b->data(), options.slot_bytes);
    }
    for (void* p : free_blocks) std::free(p);
  }
};

namespace {

// Allocator for the shared_ptr control block. It holds the pool state, so
// the state (and its free list) outlives every control block it handed out;
// libstdc++ and libc++ both copy the allocator out of the block before
// destroying the block and deallocating through the copy.
template <typename T>
struct BlockAllocator {
  using value_type = T;
  std::shared_ptr<BufferPool::State> state;

  explicit BlockAllocator(std::shared_ptr<BufferPool::State> s) : state(std::move(s)) {}
  template <typename U>
  BlockAllocator(const BlockAllocator<U>& other) : state(other.state) {}  // NOLINT

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    std::lock_guard<std::mutex> l(state->mu);
    if (bytes == state->block_bytes && !state->free_blocks.empty()) {
      void* p = state->free_blocks.back();
      state->free_blocks.pop_back();
      return static_cast<T*>(p);
    }
    if (state->block_bytes == 0) {
      state->block_bytes = bytes;
      // One block per slot can be out at a time, plus one being released.
      state->free_blocks.reserve(state->options.slots + 1);
    }
    void* p = std::malloc(bytes);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    std::lock_guard<std::mutex> l(state->mu);
    if (bytes == state->block_bytes &&
        state->free_blocks.size() < state->free_blocks.capacity()) {
      state->free_blocks.push_back(p);
    } else {
      std::free(p);
    }
  }
  template <typename U>
  bool operator==(const BlockAllocator<U>& o) const { return state == o.state; }
  template <typename U>
  bool operator!=(const BlockAllocator<U>& o) const { return state != o.state; }
};

// Returns the slot. Holds the state by raw pointer: the control block's
// allocator keeps it alive while the deleter runs.
struct ReturnSlot {
  BufferPool::State* state;
  void operator()(HostBuffer* b) const {
    // In the dropping thread, which queued any copy from the slot.
    state->options.allocator->Fence(b);
    {
      std::lock_guard<std::mutex> l(state->mu);
      state->free_slots.push_back(b);
      --state->stats.in_use;
    }
    state->returned.notify_one();
  }
};

}  // namespace

Result<std::shared_ptr<BufferPool>> BufferPool::Create(BufferPoolOptions options) {
  if (options.slot_bytes == 0 || options.slots == 0)
    return Status::Config("buffer pool needs slot_bytes > 0 and slots > 0");
  if (!options.allocator) options.allocator = DefaultHostAllocator();
  auto state = std::make_shared<State>();
  state->options = std::move(options);
  state->free_slots.reserve(state->options.slots);
  state->all.reserve(state->options.slots);
  if (state->options.preallocate) {
    for (size_t i = 0; i < state->options.slots; ++i) {
      SHARDSTREAM_ASSIGN_OR_RETURN(void* p, state->options.allocator->Allocate(state->options.slot_bytes));
      state->all.push_back(std::make_unique<HostBuffer>(p, state->options.slot_bytes,
                                                        state->options.allocator->kind()));
      state->free_slots.push_back(state->all.back().get());
      ++state->allocated;
      ++state->stats.allocations;
    }
  }
  return std::shared_ptr<BufferPool>(new BufferPool(std::move(state)));
}

BufferPool::~BufferPool() { Cancel(); }

Result<std::shared_ptr<HostBuffer>> BufferPool::Acquire(std::chrono::milliseconds timeout) {
  State& s = *state_;
  HostBuffer* buffer;
  {
    std::unique_lock<std::mutex> lock(s.mu);
    bool waited = false;
    auto ready = [&] {
      return s.cancelled || !s.free_slots.empty() || s.allocated < s.options.slots;
    };
    if (!ready()) {
      waited = true;
      ++s.stats.waiting;
      bool got = true;
      if (timeout == std::chrono::milliseconds::max()) {
        s.returned.wait(lock, ready);
      } else {
        got = s.returned.wait_for(lock, timeout, ready);
      }
      --s.stats.waiting;
      if (!got)
        return Status::Unavailable("no free host buffer within " +
                                   std::to_string(timeout.count()) + " ms");
    }
    if (s.cancelled) return Status::Cancelled("buffer pool stopped");
    if (!s.free_slots.empty()) {
      buffer = s.free_slots.back();
      s.free_slots.pop_back();
    } else {
      auto r = s.options.allocator->Allocate(s.options.slot_bytes);
      if (!r.ok()) return r.status();
      s.all.push_back(std::make_unique<HostBuffer>(*r, s.options.slot_bytes,
                                                   s.options.allocator->kind()));
      buffer = s.all.back().get();
      ++s.allocated;
      ++s.stats.allocations;
    }
    ++s.stats.acquires;
    ++s.stats.in_use;
    if (waited) ++s.stats.waits;
  }
  // Outside the lock: a copy from the slot may still be in flight, and the
  // control block allocator takes the lock.
  if (s.options.allocator->WaitFence(buffer)) {
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.stats.fence_waits;
  }
  return std::shared_ptr<HostBuffer>(buffer, ReturnSlot{state_.get()},
                                     BlockAllocator<HostBuffer>(state_));
}

void BufferPool::Cancel() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->cancelled = true;
  }
  state_->returned.notify_all();
}

void BufferPool::Resume() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->cancelled = false;
}

size_t BufferPool::slots() const { return state_->options.slots; }

HostMemoryKind BufferPool::kind() const { return state_->options.allocator->kind(); }
size_t BufferPool::slot_bytes() const { return state_->options.slot_bytes; }
BufferPoolStats BufferPool::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->stats;
}

}  // namespace shardstream
