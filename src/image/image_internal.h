// Shared by the image decoders (jpeg.cc, png.cc, webp.cc) and the fused
// transform (image.cc): a decoded region and the geometry it serves.
#ifndef SHARDSTREAM_IMAGE_IMAGE_INTERNAL_H_
#define SHARDSTREAM_IMAGE_IMAGE_INTERNAL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "shardstream/decode.h"
#include "shardstream/export.h"
#include "shardstream/image.h"

namespace shardstream::internal {

// A box in (possibly DCT-scaled) pixel coordinates: [x0, x1) x [y0, y1).
struct BoxF {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// RGB pixels a decoder produced: `width` x `height`, rows of width * 3 bytes
// in `*pixels`, and the box (relative to them) the output is resampled
// from. The resampling windows are clipped to [clip_x0, clip_x1) x
// [clip_y0, clip_y1): the crop's own pixels, as a crop-then-resize sees them.
struct Region {
  std::vector<uint8_t>* pixels = nullptr;
  int width = 0, height = 0;
  BoxF box;
  int clip_x0 = 0, clip_y0 = 0, clip_x1 = 0, clip_y1 = 0;
};

// What the decoder is asked for: given the image's size, the crop box and
// the pixels the filter may read (both in its pixels) and the output size,
// so that it decodes only what those need. Returns false (with *error) when
// the geometry is unusable.
struct Want {
  int out_width = 0, out_height = 0;
  BoxF box;
  int clip_x0 = 0, clip_y0 = 0, clip_x1 = 0, clip_y1 = 0;
  bool flip = false;
};

// The source rows (or columns) [*lo, *hi) that resampling [b0, b1) to `out`
// reads, within [c0, c1).
void NeedRange(double b0, double b1, int c0, int c1, int out, int* lo, int* hi);

// Fills the region's box and clip from the wanted ones (in the decoded
// image's pixels, scaled by num/denom) and the region's origin.
void PlaceRegion(const Want& want, int num, int denom, int origin_x, int origin_y, Region* region);
using Geometry = std::function<bool(int width, int height, Want* want, std::string* error)>;

// Each decoder: the region the geometry needs, into region->pixels.
// Errors are kCorrupt via FieldError(ctx, ...).
Status DecodeJpeg(std::string_view bytes, int64_t max_pixels, const Geometry& geometry,
                  Want* want, Region* region, const FieldContext& ctx);
Status DecodePng(std::string_view bytes, int64_t max_pixels, const Geometry& geometry, Want* want,
                 Region* region, const FieldContext& ctx);
Status DecodeWebp(std::string_view bytes, int64_t max_pixels, const Geometry& geometry,
                  Want* want, Region* region, const FieldContext& ctx);

Result<ImageInfo> JpegInfo(std::string_view bytes, const FieldContext& ctx);
Result<ImageInfo> PngInfo(std::string_view bytes, const FieldContext& ctx);
Result<ImageInfo> WebpInfo(std::string_view bytes, const FieldContext& ctx);

// The pixel limit check every decoder makes before allocating.
Status CheckPixels(int64_t width, int64_t height, int64_t max_pixels, const FieldContext& ctx);

// Antialiased bilinear resampling (Pillow's and torchvision's filter) of
// region's box to out_width x out_height, flipped horizontally if asked,
// into out (HWC or CHW, uint8). Exported for the tests.
SHARDSTREAM_EXPORT void Resample(const Region& region, int out_width, int out_height, bool flip,
                                 ImageLayout layout, uint8_t* out);

// The widest instructions Resample may use (2: AVX2, 1: SSSE3, 0: none;
// each only where the CPU has it). Every level gives the same pixels: the
// tests compare them.
SHARDSTREAM_EXPORT void SetResampleSimd(int level);

// Whether Resample of region's box to out_width columns takes the grouped
// (enlarging) horizontal pass at the current level: tests check which
// cases do.
SHARDSTREAM_EXPORT bool ResampleIsGrouped(const Region& region, int out_width, bool flip,
                                          ImageLayout layout);

// Per-thread scratch buffers, released when they grew past a bound after a
// large image (so one huge image does not pin its memory in every thread).
std::vector<uint8_t>& ScratchRegion();
void TrimScratch();

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_IMAGE_IMAGE_INTERNAL_H_
