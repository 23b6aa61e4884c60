// Antialiased bilinear resampling as Pillow's ImagingResample does it (and
// torchvision's resize(antialias=True), which follows Pillow): a triangle
// filter whose support widens with the downscale factor, weights normalised
// per output pixel. Weights are 14-bit fixed point in int16 (as
// Pillow-SIMD's), so that the horizontal pass can multiply two taps of all
// three channels with one pmaddwd; every path computes the same exact
// integer sums, so SIMD and scalar machines give the same pixels. The
// vertical pass goes first, so the horizontal one (three interleaved
// channels: the costlier) runs on output rows only; the order changes a
// result by rounding alone.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "image/image_internal.h"

namespace shardstream::internal {
namespace {

constexpr int kPrecision = 14;
constexpr int32_t kHalf = int32_t{1} << (kPrecision - 1);
// Rows of the vertical pass's output carry this much slack beyond 3 x taps
// bytes, so that the horizontal pass may load past a row's last pixel.
constexpr size_t kRowSlack = 16;

struct Coeffs {
  int taps = 0;  // even: weights come in pairs
  std::vector<int> start, count;
  std::vector<int16_t> k;  // out x taps, zero beyond count
};

// What the passes read of a Coeffs, by value: handed a reference to the
// thread's scratch, the compiler would look its address up (a TLS call)
// inside the pixel loops.
struct Weights {
  int taps;
  const int* start;
  const int* count;
  const int16_t* k;
};
Weights View(const Coeffs& c) { return {c.taps, c.start.data(), c.count.data(), c.k.data()}; }

// Windows over [lo, hi) for outputs covering [b0, b1) in `out` steps.
void Precompute(double b0, double b1, int lo, int hi, int out, Coeffs* c) {
  const double scale = (b1 - b0) / out;
  const double fscale = std::max(scale, 1.0);
  const double support = fscale;  // the triangle's support, 1, widened
  const int window = static_cast<int>(std::ceil(support)) * 2 + 1;
  c->taps = (window + 1) & ~1;
  c->start.assign(static_cast<size_t>(out), 0);
  c->count.assign(static_cast<size_t>(out), 0);
  c->k.assign(static_cast<size_t>(out) * static_cast<size_t>(c->taps), 0);
  std::vector<double> w(static_cast<size_t>(window));
  for (int xx = 0; xx < out; ++xx) {
    const double center = b0 + (xx + 0.5) * scale;
    int xmin = static_cast<int>(center - support + 0.5);
    int xmax = static_cast<int>(center + support + 0.5);
    xmin = std::max(xmin, lo);
    xmax = std::min(xmax, hi);
    int n = std::min(xmax - xmin, window);
    double sum = 0;
    for (int x = 0; x < n; ++x) {
      const double t = std::fabs((x + xmin - center + 0.5) / fscale);
      w[static_cast<size_t>(x)] = t < 1.0 ? 1.0 - t : 0.0;
      sum += w[static_cast<size_t>(x)];
    }
    if (n <= 0 || sum <= 0) {  // a window that missed every pixel: the nearest one
      xmin = std::min(std::max(static_cast<int>(std::floor(center)), lo), hi - 1);
      n = 1;
      w[0] = sum = 1.0;
    }
    c->start[static_cast<size_t>(xx)] = xmin;
    c->count[static_cast<size_t>(xx)] = n;
    int16_t* k = &c->k[static_cast<size_t>(xx) * static_cast<size_t>(c->taps)];
    for (int x = 0; x < n; ++x)
      k[x] = static_cast<int16_t>(0.5 + w[static_cast<size_t>(x)] / sum * (1 << kPrecision));
  }
}

inline uint8_t Clip8(int32_t v) {
  v >>= kPrecision;
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// One output row of the vertical pass: the weighted sum of n input rows.
// Contiguous bytes: the compiler vectorises it, for AVX2 in VerticalRowAvx2
// (chosen at run time with the horizontal pass's level, so that a test can
// compare both; not an ifunc clone, whose resolver runs before TSan's
// runtime is up).
inline __attribute__((always_inline)) void VerticalRowBody(const uint8_t* src, size_t stride,
                                                           int first, int n, const int16_t* k,
                                                           size_t row_bytes, int32_t* acc,
                                                           uint8_t* out) {
  for (size_t i = 0; i < row_bytes; ++i) acc[i] = kHalf;
  for (int t = 0; t < n; ++t) {
    const uint8_t* in = src + static_cast<size_t>(first + t) * stride;
    const int32_t kt = k[t];
    for (size_t i = 0; i < row_bytes; ++i) acc[i] += in[i] * kt;
  }
  for (size_t i = 0; i < row_bytes; ++i) out[i] = Clip8(acc[i]);
}

void VerticalRow(const uint8_t* src, size_t stride, int first, int n, const int16_t* k,
                 size_t row_bytes, int32_t* acc, uint8_t* out) {
  VerticalRowBody(src, stride, first, n, k, row_bytes, acc, out);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) void VerticalRowAvx2(const uint8_t* src, size_t stride,
                                                     int first, int n, const int16_t* k,
                                                     size_t row_bytes, int32_t* acc,
                                                     uint8_t* out) {
  VerticalRowBody(src, stride, first, n, k, row_bytes, acc, out);
}
#endif

// Stores output pixel i of a row, R G B in the low bytes of `rgb`. Pixels
// are stored left to right: an HWC store writes 4 bytes, the fourth the
// next pixel's (written next), but for the row's last pixel.
inline void Store(uint8_t* out, size_t plane, ImageLayout layout, size_t out_row, int out_width,
                  int i, uint32_t rgb) {
  const size_t at = out_row + static_cast<size_t>(i);
  if (layout == ImageLayout::kHWC) {
    uint8_t* o = out + at * 3;
    if (i + 1 < out_width) {
      std::memcpy(o, &rgb, 4);
    } else {
      o[0] = static_cast<uint8_t>(rgb);
      o[1] = static_cast<uint8_t>(rgb >> 8);
      o[2] = static_cast<uint8_t>(rgb >> 16);
    }
  } else {
    out[at] = static_cast<uint8_t>(rgb);
    out[plane + at] = static_cast<uint8_t>(rgb >> 8);
    out[2 * plane + at] = static_cast<uint8_t>(rgb >> 16);
  }
}

// Output pixel xx of a row in plain C, packed as Store takes it.
inline uint32_t PixelScalar(const uint8_t* row, const Weights& h, int cx0, int xx) {
  const int16_t* k = h.k + static_cast<size_t>(xx) * static_cast<size_t>(h.taps);
  const uint8_t* p = row + static_cast<size_t>(h.start[xx] - cx0) * 3;
  int32_t r = kHalf, g = kHalf, b = kHalf;
  for (int t = 0; t < h.count[xx]; ++t, p += 3) {
    r += p[0] * k[t];
    g += p[1] * k[t];
    b += p[2] * k[t];
  }
  return static_cast<uint32_t>(Clip8(r)) | static_cast<uint32_t>(Clip8(g)) << 8 |
         static_cast<uint32_t>(Clip8(b)) << 16;
}

// One output row of the horizontal pass, three channels at a time; output
// pixels left to right, the source pixel mirrored when flipped.
void HorizontalRowScalar(const uint8_t* row, Weights h, int cx0, int out_width, bool flip,
                         ImageLayout layout, size_t plane, size_t out_row, uint8_t* out) {
  for (int i = 0; i < out_width; ++i)
    Store(out, plane, layout, out_row, out_width, i,
          PixelScalar(row, h, cx0, flip ? out_width - 1 - i : i));
}

#if defined(__x86_64__) && defined(__GNUC__)
// The same sums with SSSE3: two taps of R, G and B per pmaddwd. Reads up
// to 5 bytes past the window (the row's slack); the weights past `count`
// are zero.
__attribute__((target("ssse3"))) void HorizontalRowSsse3(const uint8_t* row, Weights h,
                                                         int cx0, int out_width, bool flip,
                                                         ImageLayout layout, size_t plane,
                                                         size_t out_row, uint8_t* out) {
  // Bytes R0 G0 B0 R1 G1 B1 -> R0 R1 G0 G1 B0 B1, then to int16.
  const __m128i order = _mm_setr_epi8(0, 3, 1, 4, 2, 5, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m128i zero = _mm_setzero_si128();
  const int16_t* weights = h.k;
  for (int i = 0; i < out_width; ++i) {
    const int xx = flip ? out_width - 1 - i : i;
    const int n = h.count[xx];
    const int16_t* k = weights + static_cast<size_t>(xx) * static_cast<size_t>(h.taps);
    const uint8_t* p = row + static_cast<size_t>(h.start[xx] - cx0) * 3;
    __m128i acc = _mm_set1_epi32(kHalf);
    for (int t = 0; t < n; t += 2, p += 6) {
      __m128i px = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
      px = _mm_unpacklo_epi8(_mm_shuffle_epi8(px, order), zero);
      int32_t pair;  // weights t and t + 1, as pmaddwd pairs them
      std::memcpy(&pair, k + t, sizeof(pair));
      acc = _mm_add_epi32(acc, _mm_madd_epi16(px, _mm_set1_epi32(pair)));
    }
    acc = _mm_srai_epi32(acc, kPrecision);
    const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(acc, acc), zero);
    Store(out, plane, layout, out_row, out_width, i,
          static_cast<uint32_t>(_mm_cvtsi128_si32(bytes)));
  }
}

// Two output pixels at once, one per 128-bit lane; the same sums again.
// Reads up to 3 x taps + 5 bytes past a window (the row's slack).
__attribute__((target("avx2"))) void HorizontalRowAvx2(const uint8_t* row, Weights h, int cx0,
                                                       int out_width, bool flip,
                                                       ImageLayout layout, size_t plane,
                                                       size_t out_row, uint8_t* out) {
  const __m256i order = _mm256_setr_epi8(0, 3, 1, 4, 2, 5, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                         0, 3, 1, 4, 2, 5, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i zero = _mm256_setzero_si256();
  int i = 0;
  for (; i + 1 < out_width; i += 2) {
    const int xa = flip ? out_width - 1 - i : i;
    const int xb = flip ? out_width - 2 - i : i + 1;
    const int n = std::max(h.count[xa], h.count[xb]);  // the shorter window's extra weights are 0
    const int16_t* ka = h.k + static_cast<size_t>(xa) * static_cast<size_t>(h.taps);
    const int16_t* kb = h.k + static_cast<size_t>(xb) * static_cast<size_t>(h.taps);
    const uint8_t* pa = row + static_cast<size_t>(h.start[xa] - cx0) * 3;
    const uint8_t* pb = row + static_cast<size_t>(h.start[xb] - cx0) * 3;
    __m256i acc = _mm256_set1_epi32(kHalf);
    for (int t = 0; t < n; t += 2) {
      const __m128i va = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(pa + 3 * t));
      const __m128i vb = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(pb + 3 * t));
      __m256i px = _mm256_inserti128_si256(_mm256_castsi128_si256(va), vb, 1);
      px = _mm256_unpacklo_epi8(_mm256_shuffle_epi8(px, order), zero);
      int32_t wa, wb;
      std::memcpy(&wa, ka + t, sizeof(wa));
      std::memcpy(&wb, kb + t, sizeof(wb));
      const __m256i w = _mm256_setr_epi32(wa, wa, wa, wa, wb, wb, wb, wb);
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(px, w));
    }
    acc = _mm256_srai_epi32(acc, kPrecision);
    const __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(acc, acc), zero);
    Store(out, plane, layout, out_row, out_width, i,
          static_cast<uint32_t>(_mm256_extract_epi32(bytes, 0)));
    Store(out, plane, layout, out_row, out_width, i + 1,
          static_cast<uint32_t>(_mm256_extract_epi32(bytes, 4)));
  }
  if (i < out_width)  // an odd last pixel
    Store(out, plane, layout, out_row, out_width, i,
          PixelScalar(row, h, cx0, flip ? out_width - 1 - i : i));
}

bool HaveSsse3() {
  static const bool have = __builtin_cpu_supports("ssse3");
  return have;
}
bool HaveAvx2() {
  static const bool have = __builtin_cpu_supports("avx2");
  return have;
}
#endif

struct Scratch {
  Coeffs h, v;
  std::vector<int32_t> acc;
  std::vector<uint8_t> rows;
};

}  // namespace

namespace {
std::atomic<int> g_simd{2};
}  // namespace

void SetResampleSimd(int level) { g_simd.store(level); }

void Resample(const Region& region, int out_width, int out_height, bool flip, ImageLayout layout,
              uint8_t* out) {
  const int simd_level = g_simd.load(std::memory_order_relaxed);
  thread_local Scratch tls;
  Scratch& s = tls;  // one lookup of the thread's scratch, not one per use
  const int cx0 = region.clip_x0, cw = region.clip_x1 - region.clip_x0;
  Precompute(region.box.x0, region.box.x1, region.clip_x0, region.clip_x1, out_width, &s.h);
  Precompute(region.box.y0, region.box.y1, region.clip_y0, region.clip_y1, out_height, &s.v);
  const size_t row_bytes = static_cast<size_t>(cw) * 3;
  const size_t slack = kRowSlack + 3 * static_cast<size_t>(s.h.taps);
  const size_t row_stride = row_bytes + slack;
  const size_t stride = static_cast<size_t>(region.width) * 3;
  const uint8_t* src = region.pixels->data() + static_cast<size_t>(cx0) * 3;
  s.acc.resize(row_bytes);
  s.rows.resize(row_stride * static_cast<size_t>(out_height));
  auto vertical = VerticalRow;
#if defined(__x86_64__) && defined(__GNUC__)
  if (HaveAvx2() && simd_level >= 2) vertical = VerticalRowAvx2;
#endif
  for (int yy = 0; yy < out_height; ++yy) {
    uint8_t* row = &s.rows[static_cast<size_t>(yy) * row_stride];
    vertical(src, stride, s.v.start[static_cast<size_t>(yy)], s.v.count[static_cast<size_t>(yy)],
             &s.v.k[static_cast<size_t>(yy) * static_cast<size_t>(s.v.taps)], row_bytes,
             s.acc.data(), row);
    std::memset(row + row_bytes, 0, slack);
  }
  const size_t plane = static_cast<size_t>(out_width) * static_cast<size_t>(out_height);
  const Weights h = View(s.h);
  for (int yy = 0; yy < out_height; ++yy) {
    const uint8_t* row = &s.rows[static_cast<size_t>(yy) * row_stride];
    const size_t out_row = static_cast<size_t>(yy) * static_cast<size_t>(out_width);
#if defined(__x86_64__) && defined(__GNUC__)
    if (HaveAvx2() && simd_level >= 2) {
      HorizontalRowAvx2(row, h, cx0, out_width, flip, layout, plane, out_row, out);
      continue;
    }
    if (HaveSsse3() && simd_level >= 1) {
      HorizontalRowSsse3(row, h, cx0, out_width, flip, layout, plane, out_row, out);
      continue;
    }
#endif
    HorizontalRowScalar(row, h, cx0, out_width, flip, layout, plane, out_row, out);
  }
}

std::vector<uint8_t>& ScratchRegion() {
  thread_local std::vector<uint8_t> region;
  return region;
}

void TrimScratch() {
  // Kept up to 16 MiB (a 2300 x 2300 region): larger ones were rare images.
  std::vector<uint8_t>& r = ScratchRegion();
  if (r.capacity() > (size_t{16} << 20)) std::vector<uint8_t>().swap(r);
}

}  // namespace shardstream::internal
