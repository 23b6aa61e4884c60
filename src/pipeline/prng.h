// The pipeline's own PRNG: xoshiro256** seeded through splitmix64, with an
// unbiased bounded draw (Lemire's multiply-shift with rejection). std::
// distributions differ between standard libraries; this gives the same
// numbers everywhere.
#ifndef SHARDSTREAM_PIPELINE_PRNG_H_
#define SHARDSTREAM_PIPELINE_PRNG_H_

#include <cstdint>

namespace shardstream::internal {

inline uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class Prng {
 public:
  // Distinct (seed, stream) pairs give independent sequences.
  explicit Prng(uint64_t seed = 0, uint64_t stream = 0) { Seed(seed, stream); }
  void Seed(uint64_t seed, uint64_t stream) {
    uint64_t sm = seed ^ (stream * 0xd1342543de82ef95ULL + 0x2545f4914f6cdd1dULL);
    for (uint64_t& w : s_) w = SplitMix64(&sm);
  }
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, n). REQUIRES: n > 0.
  uint64_t Below(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(Next()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(Next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_PRNG_H_
