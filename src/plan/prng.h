// The plan's own random numbers. std::shuffle and the std distributions give
// different sequences on different standard libraries, and the plan must be
// the same on every machine, so everything here is spelled out:
// SplitMix64 (seeding and hashing), xoshiro256** (the stream), Lemire's
// unbiased bounded integers, and Fisher-Yates. docs/plan.md pins the details;
// plan_test's golden test fails if any of them changes.
#ifndef SHARDSTREAM_SRC_PLAN_PRNG_H_
#define SHARDSTREAM_SRC_PLAN_PRNG_H_

#include <cstddef>
#include <cstdint>
#include <utility>

namespace shardstream::internal {

// The SplitMix64 finalizer: a bijective 64-bit mix.
inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// What a derived seed is for, so that streams for different purposes differ.
enum class Domain : uint64_t {
  kShardOrder = 1,  // per-epoch shard order (per node)
  kNodeAssign = 2,  // node-local assignment of shards to nodes (once)
  kResampled = 3,   // resampled draws
  kImage = 4,       // image crops and flips (per epoch and sample key)
  kMix = 5,         // the subset of a mixed stream an epoch takes
};

// A 64-bit seed for one purpose, from the user's seed and up to three
// counters (epoch, node, consumer, draw ...). Chained mixes, so that nearby
// inputs give unrelated seeds.
inline uint64_t DeriveSeed(uint64_t seed, Domain domain, uint64_t a = 0, uint64_t b = 0,
                           uint64_t c = 0) {
  uint64_t h = Mix64(seed ^ 0x9e3779b97f4a7c15ULL);
  h = Mix64(h ^ static_cast<uint64_t>(domain));
  h = Mix64(h ^ a);
  h = Mix64(h ^ b);
  return Mix64(h ^ c);
}

// xoshiro256** 1.0 (Blackman and Vigna), state filled by SplitMix64.
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed) {
    for (auto& w : s_) {
      seed += 0x9e3779b97f4a7c15ULL;
      w = Mix64(seed);
    }
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

  // Uniform in [0, n) without bias (Lemire, "Fast Random Integer Generation
  // in an Interval", 2019). REQUIRES: n > 0.
  uint64_t Bounded(uint64_t n) {
    __uint128_t m = static_cast<__uint128_t>(Next()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<__uint128_t>(Next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Uniform in [0, 1) with 53 random bits; exact on every IEEE-754 machine.
  double Uniform01() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// One step of Fisher-Yates, front to back: fixes position i by swapping it
// with a uniform position in [i, n). After step i, data[0..i] is final, so a
// caller that needs only a prefix of the order can stop early.
// REQUIRES: i < n.
template <typename T>
void FisherYatesStep(T* data, size_t i, size_t n, Xoshiro256& rng) {
  if (n - i < 2) return;
  size_t j = i + static_cast<size_t>(rng.Bounded(n - i));
  std::swap(data[i], data[j]);
}

// Fisher-Yates (Durstenfeld), front to back: steps i = 0 .. n-2.
template <typename T>
void FisherYates(T* data, size_t n, Xoshiro256& rng) {
  for (size_t i = 0; i + 1 < n; ++i) FisherYatesStep(data, i, n, rng);
}

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_SRC_PLAN_PRNG_H_
