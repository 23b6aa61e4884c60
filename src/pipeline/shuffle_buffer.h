// ShuffleBuffer<T>: WebDataset's sample shuffle, deterministic. Items enter
// by swap (so their storage is recycled, nothing is allocated after the
// buffer's construction); once `initial` items are held, each new item lets
// out one item chosen by the seeded PRNG, and the buffer grows up to
// `capacity`. At the end Drain() lets the rest out in random order. The
// output depends only on the input sequence and the seed, never on timing.
//
// Thread-safety: one thread.
#ifndef SHARDSTREAM_PIPELINE_SHUFFLE_BUFFER_H_
#define SHARDSTREAM_PIPELINE_SHUFFLE_BUFFER_H_

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "pipeline/prng.h"

namespace shardstream::internal {

template <typename T>
class ShuffleBuffer {
 public:
  // capacity <= 1 passes items straight through. initial is clamped to
  // [1, capacity].
  ShuffleBuffer(size_t capacity, size_t initial, uint64_t seed, uint64_t stream)
      : capacity_(std::max<size_t>(capacity, 1)),
        threshold_(std::clamp<size_t>(initial, 1, std::max<size_t>(capacity, 1))),
        prng_(seed, stream),
        items_(capacity_ + 1) {}

  // Takes *in (swapping storage with a spare slot). Returns true with an item
  // swapped into *out when one is due.
  bool Put(T* in, T* out) {
    using std::swap;
    if (capacity_ == 1) {
      swap(*in, *out);
      return true;
    }
    swap(items_[size_], *in);
    ++size_;
    if (!started_) {
      if (size_ < threshold_) return false;
      started_ = true;
      return Take(out);
    }
    // Between initial and capacity the buffer grows by one item every two
    // inputs (WebDataset's rate), so output starts early but mixing deepens.
    if (size_ < capacity_ && (skip_ = !skip_)) return false;
    return Take(out);
  }

  // Lets out one of the remaining items; false when empty.
  bool Drain(T* out) {
    if (size_ == 0) return false;
    return Take(out);
  }

  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }

 private:
  bool Take(T* out) {
    using std::swap;
    size_t j = static_cast<size_t>(prng_.Below(size_));
    swap(items_[j], items_[size_ - 1]);
    swap(*out, items_[size_ - 1]);
    --size_;
    return true;
  }

  size_t capacity_;
  size_t threshold_;
  bool started_ = false;
  bool skip_ = false;
  Prng prng_;
  std::vector<T> items_;
  size_t size_ = 0;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_SHUFFLE_BUFFER_H_
