// A bounded pool of host buffers lent as shared_ptr: the deleter returns the
// slot (DALI's RecycleTensor idea). The pool state is shared with every lent
// buffer, so a buffer held by Python may outlive the pool object.
#include <condition_variable>
#include <mutex>
#include <vector>

#include "shardstream/pinned_pool.h"

namespace shardstream {

struct BufferPool::State {
  BufferPoolOptions options;
  mutable std::mutex mu;
  std::condition_variable returned;
  std::vector<void*> free_slots;  // allocated and idle
  size_t allocated = 0;           // slots allocated so far (<= options.slots)
  bool cancelled = false;
  BufferPoolStats stats;
  std::vector<void*> all;         // every allocation, freed when the state dies

  ~State() {
    for (void* p : all) options.allocator->Free(p, options.slot_bytes);
  }
};

Result<std::shared_ptr<BufferPool>> BufferPool::Create(BufferPoolOptions options) {
  if (options.slot_bytes == 0 || options.slots == 0)
    return Status::Config("buffer pool needs slot_bytes > 0 and slots > 0");
  if (!options.allocator) options.allocator = DefaultHostAllocator();
  auto state = std::make_shared<State>();
  state->options = std::move(options);
  return std::shared_ptr<BufferPool>(new BufferPool(std::move(state)));
}

BufferPool::~BufferPool() { Cancel(); }

Result<std::shared_ptr<HostBuffer>> BufferPool::Acquire(std::chrono::milliseconds timeout) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  bool waited = false;
  auto ready = [&] {
    return s.cancelled || !s.free_slots.empty() || s.allocated < s.options.slots;
  };
  if (!ready()) {
    waited = true;
    if (timeout == std::chrono::milliseconds::max()) {
      s.returned.wait(lock, ready);
    } else if (!s.returned.wait_for(lock, timeout, ready)) {
      return Status::Unavailable("no free host buffer within " +
                                 std::to_string(timeout.count()) + " ms");
    }
  }
  if (s.cancelled) return Status::Cancelled("buffer pool stopped");
  void* p;
  if (!s.free_slots.empty()) {
    p = s.free_slots.back();
    s.free_slots.pop_back();
  } else {
    auto r = s.options.allocator->Allocate(s.options.slot_bytes);
    if (!r.ok()) return r.status();
    p = *r;
    s.all.push_back(p);
    ++s.allocated;
    ++s.stats.allocations;
  }
  ++s.stats.acquires;
  ++s.stats.in_use;
  if (waited) ++s.stats.waits;
  std::shared_ptr<State> keep = state_;
  return std::shared_ptr<HostBuffer>(
      new HostBuffer(p, s.options.slot_bytes, s.options.allocator->kind()),
      [keep](HostBuffer* b) {
        {
          std::lock_guard<std::mutex> l(keep->mu);
          keep->free_slots.push_back(b->data());
          --keep->stats.in_use;
        }
        keep->returned.notify_one();
        delete b;
      });
}

void BufferPool::Cancel() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->cancelled = true;
  }
  state_->returned.notify_all();
}

HostMemoryKind BufferPool::kind() const { return state_->options.allocator->kind(); }
size_t BufferPool::slot_bytes() const { return state_->options.slot_bytes; }
BufferPoolStats BufferPool::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->stats;
}

}  // namespace shardstream
