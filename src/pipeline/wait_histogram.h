// Where the pipeline waits: the next() wait histogram (power-of-two
// microsecond buckets, fixed size, so recording a wait allocates nothing)
// and the counters of the reader and caller waits.
#ifndef SHARDSTREAM_PIPELINE_WAIT_HISTOGRAM_H_
#define SHARDSTREAM_PIPELINE_WAIT_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "shardstream/loader.h"

namespace shardstream::internal {

// Adds the nanoseconds since t0 to a wait counter (the stats' reader and
// caller waits).
inline void AddWaitSince(std::atomic<uint64_t>* ns, std::chrono::steady_clock::time_point t0) {
  *ns += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count());
}

class WaitHistogram {
 public:
  static constexpr int kBuckets = 26;  // < 1 us, < 2 us, ..., < 2^24 us (~17 s), more

  void Add(double us) {
    int b = 0;
    double bound = 1;
    while (b < kBuckets - 1 && us >= bound) {
      bound *= 2;
      ++b;
    }
    ++counts_[static_cast<size_t>(b)];
    total_us_ += us;
  }

  void Fill(LoaderStats* s) const {
    uint64_t n = 0;
    for (uint64_t c : counts_) n += c;
    s->wait_bucket_us.clear();
    s->wait_counts.assign(counts_.begin(), counts_.end());
    double bound = 1;
    for (int b = 0; b < kBuckets; ++b, bound *= 2) s->wait_bucket_us.push_back(bound);
    s->wait_seconds = total_us_ / 1e6;
    s->wait_p50_us = Quantile(0.5, n);
    s->wait_p99_us = Quantile(0.99, n);
  }

 private:
  // Upper bound of the bucket holding the q-quantile.
  double Quantile(double q, uint64_t n) const {
    if (n == 0) return 0;
    uint64_t want = static_cast<uint64_t>(q * static_cast<double>(n));
    uint64_t seen = 0;
    double bound = 1;
    for (int b = 0; b < kBuckets; ++b, bound *= 2) {
      seen += counts_[static_cast<size_t>(b)];
      if (seen > want) return bound;
    }
    return bound;
  }

  std::array<uint64_t, kBuckets> counts_{};
  double total_us_ = 0;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_WAIT_HISTOGRAM_H_
