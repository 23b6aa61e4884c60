// PrefetchQueue<T>: a bounded FIFO between one or more producer threads and
// a consumer, carrying values, errors and an end marker in order. A producer
// error is delivered at the consumer's Pop() exactly where it happened in
// the stream; after Cancel() every blocked or later call returns kCancelled.
// Push blocks while the queue is full (backpressure); Pop blocks while it is
// empty. Storage is allocated once, at construction.
//
// Thread-safety: all methods are thread-safe.
#ifndef SHARDSTREAM_PREFETCH_QUEUE_H_
#define SHARDSTREAM_PREFETCH_QUEUE_H_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

#include "shardstream/result.h"

namespace shardstream {

template <typename T>
class PrefetchQueue {
 public:
  // REQUIRES: capacity >= 1. T must be default-constructible and movable.
  explicit PrefetchQueue(size_t capacity) : slots_(capacity) {}
  PrefetchQueue(const PrefetchQueue&) = delete;
  PrefetchQueue& operator=(const PrefetchQueue&) = delete;

  // Appends a value, waiting for room. Returns kCancelled after Cancel().
  Status Push(T value) { return Put(std::move(value), Status::OK(), false); }
  // Appends an error; Pop returns it in order.
  Status PushError(Status error) { return Put(T(), std::move(error), false); }
  // Appends the end marker; Pop returns a default-constructed T for it.
  Status PushEnd() { return Put(T(), Status::OK(), true); }

  // Removes the oldest entry, waiting for one: the value, the queued error,
  // or T() for the end marker. After Cancel() returns kCancelled.
  Result<T> Pop() { return Pop(std::chrono::milliseconds::max()); }
  // The same, waiting at most `timeout`; returns kUnavailable when it passes
  // (as a queued kUnavailable error would: tell them apart with the form
  // below).
  Result<T> Pop(std::chrono::milliseconds timeout) { return Pop(timeout, nullptr); }
  // The same; *timed_out (when given) says whether `timeout` passed.
  Result<T> Pop(std::chrono::milliseconds timeout, bool* timed_out) {
    if (timed_out != nullptr) *timed_out = false;
    std::unique_lock<std::mutex> lock(mu_);
    auto ready = [&] { return cancelled_ || size_ > 0; };
    if (timeout == std::chrono::milliseconds::max()) {
      not_empty_.wait(lock, ready);
    } else if (!not_empty_.wait_for(lock, timeout, ready)) {
      if (timed_out != nullptr) *timed_out = true;
      return Status::Unavailable("prefetch queue empty");
    }
    if (cancelled_) return Status::Cancelled("prefetch queue stopped");
    Slot& s = slots_[head_];
    head_ = (head_ + 1) % slots_.size();
    --size_;
    T value = std::move(s.value);
    s.value = T();
    Status status = std::move(s.status);
    s.status = Status::OK();
    lock.unlock();
    not_full_.notify_one();
    if (!status.ok()) return status;
    return Result<T>(std::move(value));
  }

  // Wakes every waiter; all later calls return kCancelled. Idempotent.
  void Cancel() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
    }
    not_empty_.notify_all();
    not_full_.notify_all();
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return size_;
  }
  size_t capacity() const { return slots_.size(); }

 private:
  struct Slot {
    T value{};
    Status status;
    bool end = false;
  };

  Status Put(T value, Status status, bool end) {
    std::unique_lock<std::mutex> lock(mu_);
    not_full_.wait(lock, [&] { return cancelled_ || size_ < slots_.size(); });
    if (cancelled_) return Status::Cancelled("prefetch queue stopped");
    Slot& s = slots_[(head_ + size_) % slots_.size()];
    s.value = std::move(value);
    s.status = std::move(status);
    s.end = end;
    ++size_;
    lock.unlock();
    not_empty_.notify_one();
    return Status::OK();
  }

  mutable std::mutex mu_;
  std::condition_variable not_empty_, not_full_;
  std::vector<Slot> slots_;
  size_t head_ = 0, size_ = 0;
  bool cancelled_ = false;
};

}  // namespace shardstream

#endif  // SHARDSTREAM_PREFETCH_QUEUE_H_
