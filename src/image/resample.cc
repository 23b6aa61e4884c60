// Antialiased bilinear resampling as Pillow's ImagingResample does it (and
// torchvision's resize(antialias=True), which follows Pillow): a triangle
// filter whose support widens with the downscale factor, weights normalised
// per output pixel and applied in 22-bit fixed point. The vertical pass goes
// first, so the horizontal one (the costlier, three interleaved channels)
// runs on output rows only; the order changes a result by rounding alone.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "image/image_internal.h"

namespace shardstream::internal {
namespace {

constexpr int kPrecision = 22;
constexpr int32_t kHalf = int32_t{1} << (kPrecision - 1);

struct Coeffs {
  int taps = 0;
  std::vector<int> start, count;
  std::vector<int32_t> k;  // out x taps
};

// Windows over [lo, hi) for outputs covering [b0, b1) in `out` steps.
void Precompute(double b0, double b1, int lo, int hi, int out, Coeffs* c) {
  const double scale = (b1 - b0) / out;
  const double fscale = std::max(scale, 1.0);
  const double support = fscale;  // the triangle's support, 1, widened
  c->taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  c->start.assign(static_cast<size_t>(out), 0);
  c->count.assign(static_cast<size_t>(out), 0);
  c->k.assign(static_cast<size_t>(out) * static_cast<size_t>(c->taps), 0);
  std::vector<double> w(static_cast<size_t>(c->taps));
  for (int xx = 0; xx < out; ++xx) {
    const double center = b0 + (xx + 0.5) * scale;
    int xmin = static_cast<int>(center - support + 0.5);
    int xmax = static_cast<int>(center + support + 0.5);
    xmin = std::max(xmin, lo);
    xmax = std::min(xmax, hi);
    int n = std::min(xmax - xmin, c->taps);
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
    int32_t* k = &c->k[static_cast<size_t>(xx) * static_cast<size_t>(c->taps)];
    for (int x = 0; x < n; ++x)
      k[x] = static_cast<int32_t>(0.5 + w[static_cast<size_t>(x)] / sum * (1 << kPrecision));
  }
}

inline uint8_t Clip8(int32_t v) {
  v >>= kPrecision;
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

struct Scratch {
  Coeffs h, v;
  std::vector<int32_t> acc;
  std::vector<uint8_t> rows;
};

}  // namespace

void Resample(const Region& region, int out_width, int out_height, bool flip, ImageLayout layout,
              uint8_t* out) {
  thread_local Scratch s;
  const int cx0 = region.clip_x0, cw = region.clip_x1 - region.clip_x0;
  Precompute(region.box.x0, region.box.x1, region.clip_x0, region.clip_x1, out_width, &s.h);
  Precompute(region.box.y0, region.box.y1, region.clip_y0, region.clip_y1, out_height, &s.v);
  const size_t row_bytes = static_cast<size_t>(cw) * 3;
  const size_t stride = static_cast<size_t>(region.width) * 3;
  const uint8_t* src = region.pixels->data();
  s.acc.resize(row_bytes);
  s.rows.resize(row_bytes * static_cast<size_t>(out_height));
  // Vertical: each output row from its window of input rows (contiguous
  // bytes, so the compiler vectorises the multiply-adds).
  for (int yy = 0; yy < out_height; ++yy) {
    int32_t* acc = s.acc.data();
    std::fill(acc, acc + row_bytes, kHalf);
    const int first = s.v.start[static_cast<size_t>(yy)];
    const int n = s.v.count[static_cast<size_t>(yy)];
    const int32_t* k = &s.v.k[static_cast<size_t>(yy) * static_cast<size_t>(s.v.taps)];
    for (int t = 0; t < n; ++t) {
      const uint8_t* in = src + static_cast<size_t>(first + t) * stride + static_cast<size_t>(cx0) * 3;
      const int32_t kt = k[t];
      for (size_t i = 0; i < row_bytes; ++i) acc[i] += in[i] * kt;
    }
    uint8_t* row = &s.rows[static_cast<size_t>(yy) * row_bytes];
    for (size_t i = 0; i < row_bytes; ++i) row[i] = Clip8(acc[i]);
  }
  // Horizontal, three channels at a time, written flipped or not, HWC or CHW.
  const size_t plane = static_cast<size_t>(out_width) * static_cast<size_t>(out_height);
  for (int yy = 0; yy < out_height; ++yy) {
    const uint8_t* row = &s.rows[static_cast<size_t>(yy) * row_bytes];
    for (int xx = 0; xx < out_width; ++xx) {
      const int first = s.h.start[static_cast<size_t>(xx)] - cx0;
      const int n = s.h.count[static_cast<size_t>(xx)];
      const int32_t* k = &s.h.k[static_cast<size_t>(xx) * static_cast<size_t>(s.h.taps)];
      int32_t r = kHalf, g = kHalf, b = kHalf;
      const uint8_t* p = row + static_cast<size_t>(first) * 3;
      for (int t = 0; t < n; ++t, p += 3) {
        r += p[0] * k[t];
        g += p[1] * k[t];
        b += p[2] * k[t];
      }
      const int xo = flip ? out_width - 1 - xx : xx;
      if (layout == ImageLayout::kHWC) {
        uint8_t* o = out + (static_cast<size_t>(yy) * static_cast<size_t>(out_width) + static_cast<size_t>(xo)) * 3;
        o[0] = Clip8(r);
        o[1] = Clip8(g);
        o[2] = Clip8(b);
      } else {
        const size_t at = static_cast<size_t>(yy) * static_cast<size_t>(out_width) + static_cast<size_t>(xo);
        out[at] = Clip8(r);
        out[plane + at] = Clip8(g);
        out[2 * plane + at] = Clip8(b);
      }
    }
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
