// Antialiased bilinear resampling as Pillow's ImagingResample does it (and
// torchvision's resize(antialias=True), which follows Pillow): a triangle
// filter whose support widens with the downscale factor, weights normalised
// per output pixel. Weights are 14-bit fixed point in int16 (as
// Pillow-SIMD's), so that the horizontal pass can multiply two taps of all
// three channels with one pmaddwd; every path computes the same exact
// integer sums, so SIMD and scalar machines give the same pixels. The
// vertical pass goes first, so the horizontal one (three interleaved
// channels: the costlier) runs on output rows only; the order changes a
// result by rounding alone. An enlarging row (every window two taps or
// fewer, as when a small image's crop grows to the output) takes the
// grouped pass: four output pixels' twelve sums from one 16-byte load, by
// byte shuffles and weights laid out once per image.
#include <algorithm>
#include <climits>
#include <atomic>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common/cpu_features.h"
#include "image/image_internal.h"

namespace shardstream::internal {
namespace {

constexpr int kPrecision = 14;
constexpr int32_t kHalf = int32_t{1} << (kPrecision - 1);
// Rows of the vertical pass's output carry this much slack beyond 3 x taps
// bytes, so that the horizontal pass may load past a row's last pixel.
// What it loads there meets only zero weights or zeroing shuffles, and is
// never uninitialised (the buffer is a vector): the slack is not cleared.
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
    int16_t* k = &c->k[static_cast<size_t>(xx) * static_cast<size_t>(c->taps)];
    for (int x = 0; x < n; ++x)
      k[x] = static_cast<int16_t>(0.5 + w[static_cast<size_t>(x)] / sum * (1 << kPrecision));
    // Weights that round to zero add nothing to any sum: dropped from the
    // window's ends, an enlarging window is two taps, not three.
    int first = 0, last = n;
    while (first + 1 < last && k[first] == 0) ++first;
    while (last - 1 > first && k[last - 1] == 0) --last;
    c->start[static_cast<size_t>(xx)] = xmin + first;
    c->count[static_cast<size_t>(xx)] = last - first;
    if (first > 0) std::memmove(k, k + first, sizeof(int16_t) * static_cast<size_t>(last - first));
    std::fill(k + (last - first), k + n, int16_t{0});
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
  if (n <= 2) {  // an enlarging window: one pass, no accumulator row
    const uint8_t* a = src + static_cast<size_t>(first) * stride;
    const int32_t k0 = k[0];
    if (n == 1) {
      for (size_t i = 0; i < row_bytes; ++i) out[i] = Clip8(kHalf + a[i] * k0);
      return;
    }
    const uint8_t* b = a + stride;
    const int32_t k1 = k[1];
    for (size_t i = 0; i < row_bytes; ++i) out[i] = Clip8(kHalf + a[i] * k0 + b[i] * k1);
    return;
  }
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
// (kHalf + a * k0 + b * k1) >> 14 for eight (a, b) int16 pairs.
__attribute__((target("avx2"))) inline __m256i PairSum(__m256i w, __m256i half, __m256i pairs) {
  return _mm256_srai_epi32(_mm256_add_epi32(_mm256_madd_epi16(pairs, w), half), kPrecision);
}

__attribute__((target("avx2"))) void VerticalRowAvx2(const uint8_t* src, size_t stride,
                                                     int first, int n, const int16_t* k,
                                                     size_t row_bytes, int32_t* acc,
                                                     uint8_t* out) {
  if (n > 2) {
    VerticalRowBody(src, stride, first, n, k, row_bytes, acc, out);
    return;
  }
  // Two taps (an enlarging window), by hand: the rows' bytes paired as
  // int16, one pmaddwd per pair, where the compiler's version widens to
  // int32 and multiplies each row alone. One tap is two with a zero weight.
  const uint8_t* a = src + static_cast<size_t>(first) * stride;
  const uint8_t* b = n == 2 ? a + stride : a;
  const int32_t k0 = k[0], k1 = n == 2 ? k[1] : 0;
  const __m256i w = _mm256_set1_epi32(static_cast<int32_t>(
      static_cast<uint32_t>(static_cast<uint16_t>(k1)) << 16 | static_cast<uint16_t>(k0)));
  const __m256i half = _mm256_set1_epi32(kHalf), zero = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 32 <= row_bytes; i += 32) {
    const __m256i va = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
    const __m256i vb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i));
    const __m256i alo = _mm256_unpacklo_epi8(va, zero), ahi = _mm256_unpackhi_epi8(va, zero);
    const __m256i blo = _mm256_unpacklo_epi8(vb, zero), bhi = _mm256_unpackhi_epi8(vb, zero);
    const __m256i lo = _mm256_packs_epi32(PairSum(w, half, _mm256_unpacklo_epi16(alo, blo)),
                                          PairSum(w, half, _mm256_unpackhi_epi16(alo, blo)));
    const __m256i hi = _mm256_packs_epi32(PairSum(w, half, _mm256_unpacklo_epi16(ahi, bhi)),
                                          PairSum(w, half, _mm256_unpackhi_epi16(ahi, bhi)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_packus_epi16(lo, hi));
  }
  for (; i < row_bytes; ++i) out[i] = Clip8(kHalf + a[i] * k0 + b[i] * k1);
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

// The grouped horizontal pass. Output pixels go in groups of four, two
// groups to a block (a 256-bit register's two lanes). A group's sources
// lie within 16 bytes of the row from base[group]; per block, three byte
// shuffles (32 bytes each: a lane per group) pick each sum's two source
// bytes as int16 pairs, in the order the layout stores (HWC: R0 G0 B0 R1 |
// G1 B1 R2 G2 | B2 R3 G3 B3; CHW: R0..R3 | G0..G3 | B0..B3), and three
// weight vectors hold each pair's two weights. A flip is only another
// order of the sources. Pixels past the row's end have zero weights.
struct Groups {
  int groups = 0;
  std::vector<int32_t> base;
  std::vector<uint8_t> shuffle;  // per block: 3 x 32 bytes
  std::vector<int16_t> weight;   // per block: 3 x 16 int16
};

// Lays the groups out for one image's rows; false when a window has more
// than two taps or a group's sources span more than 16 bytes (a shrinking
// row: the per-pixel pass then runs).
bool BuildGroups(const Weights& h, int cx0, int out_width, bool flip, ImageLayout layout,
                 Groups* g) {
  for (int xx = 0; xx < out_width; ++xx)
    if (h.count[xx] > 2) return false;
  g->groups = (out_width + 3) / 4;
  const size_t blocks = static_cast<size_t>(g->groups + 1) / 2;
  g->base.assign(blocks * 2, 0);
  g->shuffle.assign(blocks * 96, 0x80);  // 0x80: a zero byte
  g->weight.assign(blocks * 48, 0);
  for (int grp = 0; grp < g->groups; ++grp) {
    const int n = std::min(4, out_width - grp * 4);
    int xs[4];
    int lo = INT32_MAX;
    for (int j = 0; j < n; ++j) {
      const int i = grp * 4 + j;
      xs[j] = flip ? out_width - 1 - i : i;
      lo = std::min(lo, h.start[xs[j]]);
    }
    g->base[static_cast<size_t>(grp)] = (lo - cx0) * 3;
    const size_t block = static_cast<size_t>(grp) / 2, lane = static_cast<size_t>(grp) % 2;
    for (int j = 0; j < n; ++j) {
      const int taps = h.count[xs[j]];
      const int off = (h.start[xs[j]] - lo) * 3;
      if (off + 3 * (taps - 1) + 2 > 15) return false;
      const int16_t* k = h.k + static_cast<size_t>(xs[j]) * static_cast<size_t>(h.taps);
      for (int c = 0; c < 3; ++c) {
        const int q = layout == ImageLayout::kHWC ? j * 3 + c : c * 4 + j;
        const size_t v = static_cast<size_t>(q / 4), slot = static_cast<size_t>(q % 4);
        uint8_t* m = &g->shuffle[block * 96 + v * 32 + lane * 16 + slot * 4];
        m[0] = static_cast<uint8_t>(off + c);
        if (taps == 2) m[2] = static_cast<uint8_t>(off + 3 + c);
        int16_t* w = &g->weight[block * 48 + v * 16 + lane * 8 + slot * 2];
        w[0] = k[0];
        w[1] = taps == 2 ? k[1] : 0;
      }
    }
  }
  return true;
}

// Stores a group's 12 bytes (R G B of 4 pixels, or 4 of each plane), only
// the first `n` pixels' where the row ends within it.
inline void StoreGroup(const uint8_t* bytes, ImageLayout layout, size_t plane, size_t out_row,
                       int grp, int n, uint8_t* out) {
  const size_t at = out_row + static_cast<size_t>(grp) * 4;
  if (n == 4) {  // constant sizes: inlined moves, not calls
    if (layout == ImageLayout::kHWC) {
      std::memcpy(out + at * 3, bytes, 12);
    } else {
      std::memcpy(out + at, bytes, 4);
      std::memcpy(out + plane + at, bytes + 4, 4);
      std::memcpy(out + 2 * plane + at, bytes + 8, 4);
    }
    return;
  }
  if (layout == ImageLayout::kHWC) {
    std::memcpy(out + at * 3, bytes, static_cast<size_t>(n) * 3);
  } else {
    std::memcpy(out + at, bytes, static_cast<size_t>(n));
    std::memcpy(out + plane + at, bytes + 4, static_cast<size_t>(n));
    std::memcpy(out + 2 * plane + at, bytes + 8, static_cast<size_t>(n));
  }
}

__attribute__((target("ssse3"))) void GroupedRowSsse3(const uint8_t* row, const Groups& g,
                                                      int out_width, ImageLayout layout,
                                                      size_t plane, size_t out_row,
                                                      uint8_t* out) {
  const __m128i half = _mm_set1_epi32(kHalf);
  for (int grp = 0; grp < g.groups; ++grp) {
    const size_t block = static_cast<size_t>(grp) / 2, lane = static_cast<size_t>(grp) % 2;
    const __m128i src = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(row + g.base[static_cast<size_t>(grp)]));
    __m128i sum[3];
    for (size_t v = 0; v < 3; ++v) {
      const __m128i m = _mm_loadu_si128(
          reinterpret_cast<const __m128i*>(&g.shuffle[block * 96 + v * 32 + lane * 16]));
      const __m128i w = _mm_loadu_si128(
          reinterpret_cast<const __m128i*>(&g.weight[block * 48 + v * 16 + lane * 8]));
      sum[v] = _mm_srai_epi32(_mm_add_epi32(_mm_madd_epi16(_mm_shuffle_epi8(src, m), w), half),
                              kPrecision);
    }
    alignas(16) uint8_t bytes[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(bytes),
                    _mm_packus_epi16(_mm_packs_epi32(sum[0], sum[1]),
                                     _mm_packs_epi32(sum[2], sum[2])));
    StoreGroup(bytes, layout, plane, out_row, grp, std::min(4, out_width - grp * 4), out);
  }
}

__attribute__((target("avx2"))) void GroupedRowAvx2(const uint8_t* row, const Groups& g,
                                                    int out_width, ImageLayout layout,
                                                    size_t plane, size_t out_row, uint8_t* out) {
  const __m256i half = _mm256_set1_epi32(kHalf);
  for (int grp = 0; grp < g.groups; grp += 2) {
    const size_t block = static_cast<size_t>(grp) / 2;
    const __m128i a = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(row + g.base[static_cast<size_t>(grp)]));
    const __m128i b = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(row + g.base[static_cast<size_t>(grp) + 1]));
    const __m256i src = _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
    __m256i sum[3];
    for (size_t v = 0; v < 3; ++v) {
      const __m256i m = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(&g.shuffle[block * 96 + v * 32]));
      const __m256i w = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(&g.weight[block * 48 + v * 16]));
      sum[v] = _mm256_srai_epi32(
          _mm256_add_epi32(_mm256_madd_epi16(_mm256_shuffle_epi8(src, m), w), half), kPrecision);
    }
    const __m256i packed = _mm256_packus_epi16(_mm256_packs_epi32(sum[0], sum[1]),
                                               _mm256_packs_epi32(sum[2], sum[2]));
    if ((grp + 2) * 4 <= out_width) {  // eight whole pixels: stored from registers
      const size_t at = out_row + static_cast<size_t>(grp) * 4;
      if (layout == ImageLayout::kHWC) {  // the lanes' 12 bytes each, made contiguous
        const __m256i rgb =
            _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + at * 3), _mm256_castsi256_si128(rgb));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(out + at * 3 + 16),
                         _mm256_extracti128_si256(rgb, 1));
      } else {  // R0..R7, G0..G7, B0..B7
        const __m256i planes =
            _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        const __m128i rg = _mm256_castsi256_si128(planes);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(out + at), rg);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(out + plane + at), _mm_unpackhi_epi64(rg, rg));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(out + 2 * plane + at),
                         _mm256_extracti128_si256(planes, 1));
      }
      continue;
    }
    alignas(32) uint8_t bytes[32];
    _mm256_store_si256(reinterpret_cast<__m256i*>(bytes), packed);
    StoreGroup(bytes, layout, plane, out_row, grp, std::min(4, out_width - grp * 4), out);
    if (grp + 1 < g.groups)
      StoreGroup(bytes + 16, layout, plane, out_row, grp + 1,
                 std::min(4, out_width - (grp + 1) * 4), out);
  }
}

#endif

struct Scratch {
  Coeffs h, v;
  Groups groups;
  std::vector<int32_t> acc;
  std::vector<uint8_t> rows;
};

}  // namespace

namespace {
std::atomic<int> g_simd{2};
}  // namespace

void SetResampleSimd(int level) { g_simd.store(level); }

namespace {

// The thread's scratch comes in as an argument: the compiler would look a
// thread_local's address up again (a call, in a shared library) in every
// row loop, and, given the chance, propagates the argument back in.
#if defined(__x86_64__) && defined(__GNUC__)
// Whether the horizontal pass runs by groups (enlarging rows, SSSE3 or
// better at `simd_level`), with the groups laid out in *g if so: the one
// place this choice is made, for Resample and for ResampleIsGrouped.
bool GroupedPass(int simd_level, const Weights& h, int cx0, int out_width, bool flip,
                 ImageLayout layout, Groups* g) {
  return CpuHasSsse3() && simd_level >= 1 && BuildGroups(h, cx0, out_width, flip, layout, g);
}
#endif

#if defined(__GNUC__) && !defined(__clang__)
#define SHARDSTREAM_OPAQUE __attribute__((noipa))
#else
#define SHARDSTREAM_OPAQUE __attribute__((noinline))
#endif
SHARDSTREAM_OPAQUE void ResampleWith(Scratch& s, const Region& region, int out_width,
                                            int out_height, bool flip, ImageLayout layout,
                                            uint8_t* out) {
  const int simd_level = g_simd.load(std::memory_order_relaxed);
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
  if (CpuHasAvx2() && simd_level >= 2) vertical = VerticalRowAvx2;
#endif
  for (int yy = 0; yy < out_height; ++yy) {
    uint8_t* row = &s.rows[static_cast<size_t>(yy) * row_stride];
    vertical(src, stride, s.v.start[static_cast<size_t>(yy)], s.v.count[static_cast<size_t>(yy)],
             &s.v.k[static_cast<size_t>(yy) * static_cast<size_t>(s.v.taps)], row_bytes,
             s.acc.data(), row);
  }
  const size_t plane = static_cast<size_t>(out_width) * static_cast<size_t>(out_height);
  const Weights h = View(s.h);
#if defined(__x86_64__) && defined(__GNUC__)
  if (GroupedPass(simd_level, h, cx0, out_width, flip, layout, &s.groups)) {
    const bool avx2 = CpuHasAvx2() && simd_level >= 2;
    for (int yy = 0; yy < out_height; ++yy) {
      const uint8_t* row = &s.rows[static_cast<size_t>(yy) * row_stride];
      const size_t out_row = static_cast<size_t>(yy) * static_cast<size_t>(out_width);
      if (avx2) {
        GroupedRowAvx2(row, s.groups, out_width, layout, plane, out_row, out);
      } else {
        GroupedRowSsse3(row, s.groups, out_width, layout, plane, out_row, out);
      }
    }
    return;
  }
#endif
  for (int yy = 0; yy < out_height; ++yy) {
    const uint8_t* row = &s.rows[static_cast<size_t>(yy) * row_stride];
    const size_t out_row = static_cast<size_t>(yy) * static_cast<size_t>(out_width);
#if defined(__x86_64__) && defined(__GNUC__)
    if (CpuHasAvx2() && simd_level >= 2) {
      HorizontalRowAvx2(row, h, cx0, out_width, flip, layout, plane, out_row, out);
      continue;
    }
    if (CpuHasSsse3() && simd_level >= 1) {
      HorizontalRowSsse3(row, h, cx0, out_width, flip, layout, plane, out_row, out);
      continue;
    }
#endif
    HorizontalRowScalar(row, h, cx0, out_width, flip, layout, plane, out_row, out);
  }
}

}  // namespace

void Resample(const Region& region, int out_width, int out_height, bool flip, ImageLayout layout,
              uint8_t* out) {
  thread_local Scratch tls;
  ResampleWith(tls, region, out_width, out_height, flip, layout, out);
}

bool ResampleIsGrouped(const Region& region, int out_width, bool flip, ImageLayout layout) {
#if defined(__x86_64__) && defined(__GNUC__)
  Scratch s;
  Precompute(region.box.x0, region.box.x1, region.clip_x0, region.clip_x1, out_width, &s.h);
  return GroupedPass(g_simd.load(std::memory_order_relaxed), View(s.h), region.clip_x0, out_width,
                     flip, layout, &s.groups);
#else
  (void)region, (void)out_width, (void)flip, (void)layout;
  return false;
#endif
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
