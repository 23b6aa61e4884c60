// Image fields: JPEG (libjpeg-turbo), PNG (libspng) and WebP (libwebp)
// decoded to uint8 RGB, with the crop, flip and antialiased resize of a
// training or evaluation transform fused into the decode, so that only the
// pixels the output needs are decoded (JPEG: DCT-domain scaling and the
// crop's rows and columns only).
//
// Colour as Pillow's Image.convert("RGB") gives it: grayscale repeated,
// CMYK/YCCK JPEGs (Adobe inverted) converted as Pillow does, palettes
// expanded, alpha dropped, 16-bit samples to their high byte (16-bit
// grayscale PNGs clipped to 255, as Pillow does).
//
// The geometry of a sample is drawn from (seed, epoch, sample key) alone, so
// the same pixels come out on every machine, thread count and resumed run;
// two image fields of one sample with the same size get the same crop (a
// mask follows its image). Random resized crop samples its box as
// torchvision's RandomResizedCrop.get_params does (ten tries, then the
// central fallback); the resize is Pillow's/torchvision's antialiased
// bilinear (a triangle filter widened by the downscale factor), within a
// mean absolute difference of about 1 of theirs on the same box.
//
// Bad input (truncated or corrupt data, an unsupported format, dimensions
// over max_pixels) gives kCorrupt naming the sample key, field, shard and
// offset; decoding never allocates more than max_pixels x 3 bytes.
//
// Thread-safety: plain functions; scratch memory is per thread.
#ifndef SHARDSTREAM_IMAGE_H_
#define SHARDSTREAM_IMAGE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardstream/export.h"
#include "shardstream/image_spec.h"
#include "shardstream/result.h"

namespace shardstream {

struct FieldContext;  // decode.h
struct DecodedField;

enum class ImageFormat { kUnknown, kJpeg, kPng, kWebp };

// A crop box in the source image's pixels (fractional for a center crop,
// whose box is the output's footprint on the source), and whether the
// output is flipped. `whole`: the resize filter may reach past the box into
// the rest of the image (resize, then crop); otherwise it sees the box
// alone (crop, then resize).
struct CropBox {
  double x = 0, y = 0, width = 0, height = 0;
  bool flip = false;
  bool whole = false;
};

// What an image's header says.
struct ImageInfo {
  ImageFormat format = ImageFormat::kUnknown;
  int width = 0, height = 0;
};

// Where a sample's geometry comes from.
struct ImageDraw {
  uint64_t seed = 0;
  int64_t epoch = 0;
  std::string_view key;  // the sample key
};

// The format, from the first bytes (kUnknown when none of the three).
SHARDSTREAM_EXPORT ImageFormat SniffImageFormat(std::string_view bytes);

// The image's size from its header. On failure returns kCorrupt with ctx.
SHARDSTREAM_EXPORT Result<ImageInfo> ReadImageInfo(std::string_view bytes, const FieldContext& ctx);

// The box and flip `spec` takes from a width x height image for `draw`.
SHARDSTREAM_EXPORT CropBox DrawCropBox(const ImageSpec& spec, int width, int height,
                                       const ImageDraw& draw);

// Decodes the image in `bytes` per `spec`, its box drawn for `draw`, into
// *pixels (reused; resized to fit). The result is a uint8 tensor viewing
// *pixels: [H, W, 3] or [3, H, W]. On failure returns kCorrupt naming ctx,
// or kConfig for an unusable spec.
SHARDSTREAM_EXPORT Result<DecodedField> DecodeImage(std::string_view bytes, const ImageSpec& spec,
                                                    const ImageDraw& draw,
                                                    std::vector<uint8_t>* pixels,
                                                    const FieldContext& ctx);

// As DecodeImage, with the box given (its coordinates within the image; the
// output size is spec's, or the box's when spec has none). For tests and for
// callers that draw their own geometry.
SHARDSTREAM_EXPORT Result<DecodedField> DecodeImageBox(std::string_view bytes,
                                                       const ImageSpec& spec, const CropBox& box,
                                                       std::vector<uint8_t>* pixels,
                                                       const FieldContext& ctx);

// Checks a spec: sizes, ranges. On failure returns kConfig naming `field`.
SHARDSTREAM_EXPORT Status ValidateImageSpec(const ImageSpec& spec, std::string_view field);

}  // namespace shardstream

#endif  // SHARDSTREAM_IMAGE_H_
