// The pipeline's random numbers: the plan's generator (plan/prng.h:
// xoshiro256** seeded through SplitMix64, Lemire's unbiased bounded draw),
// with a stream number folded into the seed so the interleaving and the
// shuffle buffer draw independent sequences from one seed. Same numbers on
// every machine.
#ifndef SHARDSTREAM_PIPELINE_PRNG_H_
#define SHARDSTREAM_PIPELINE_PRNG_H_

#include <cstdint>

#include "plan/prng.h"

namespace shardstream::internal {

// One SplitMix64 step: advances *state and returns its mix.
inline uint64_t SplitMix64(uint64_t* state) { return Mix64(*state += 0x9e3779b97f4a7c15ULL); }

class Prng {
 public:
  // Distinct (seed, stream) pairs give independent sequences.
  explicit Prng(uint64_t seed = 0, uint64_t stream = 0) : x_(StreamSeed(seed, stream)) {}
  void Seed(uint64_t seed, uint64_t stream) { x_ = Xoshiro256(StreamSeed(seed, stream)); }
  uint64_t Next() { return x_.Next(); }
  // Uniform in [0, n). REQUIRES: n > 0.
  uint64_t Below(uint64_t n) { return x_.Bounded(n); }

 private:
  static uint64_t StreamSeed(uint64_t seed, uint64_t stream) {
    return seed ^ (stream * 0xd1342543de82ef95ULL + 0x2545f4914f6cdd1dULL);
  }
  Xoshiro256 x_;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_PRNG_H_
