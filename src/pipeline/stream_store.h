// Bulk writes into batch slots that bypass the cache (non-temporal stores).
// A slot is written once here and read next by the device copy or another
// thread, so pulling its lines into the cache first (the read-for-ownership
// of ordinary stores) only doubles the memory traffic. Call StreamFence()
// before the written memory is handed to another thread.
#ifndef SHARDSTREAM_PIPELINE_STREAM_STORE_H_
#define SHARDSTREAM_PIPELINE_STREAM_STORE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace shardstream::internal {

// Below this many bytes ordinary stores are as good.
inline constexpr size_t kStreamMin = 256;

inline void StreamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

inline void StreamCopy(void* dst, const void* src, size_t n) {
#if defined(__SSE2__)
  if (n >= kStreamMin) {
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    const size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
    std::memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    for (; n >= 64; n -= 64, d += 64, s += 64) {
      __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
      __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
      __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
      __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
    }
    std::memcpy(d, s, n);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

// dst[i] = first + step * i for i < n (step 0: a fill).
inline void StreamSeqI32(int32_t* dst, int32_t first, int32_t step, size_t n) {
  size_t i = 0;
#if defined(__SSE2__)
  if (n * 4 >= kStreamMin) {
    for (; i < n && (reinterpret_cast<uintptr_t>(dst + i) & 15) != 0; ++i)
      dst[i] = first + step * static_cast<int32_t>(i);
    __m128i v = _mm_setr_epi32(first + step * static_cast<int32_t>(i),
                               first + step * static_cast<int32_t>(i + 1),
                               first + step * static_cast<int32_t>(i + 2),
                               first + step * static_cast<int32_t>(i + 3));
    const __m128i inc = _mm_set1_epi32(4 * step);
    for (; i + 4 <= n; i += 4) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), v);
      v = _mm_add_epi32(v, inc);
    }
  }
#endif
  for (; i < n; ++i) dst[i] = first + step * static_cast<int32_t>(i);
}

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_STREAM_STORE_H_
