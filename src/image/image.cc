// The fused image transform: the geometry drawn per sample, the decoder
// asked for just the pixels it needs, then one antialiased resample.
#include "shardstream/image.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>

#include "format/decode_error.h"
#include "image/image_internal.h"
#include "plan/prng.h"
#include "shardstream/decode.h"

namespace shardstream {
namespace {

using internal::BoxF;
using internal::FieldError;
using internal::Region;
using internal::Want;

// Python's round(): halves to even, as torchvision's int(round(x)) does.
int RoundHalfEven(double v) { return static_cast<int>(std::nearbyint(v)); }

// torchvision.transforms.RandomResizedCrop.get_params, with our generator.
CropBox RandomResized(const ImageSpec& spec, int width, int height, internal::Xoshiro256& rng) {
  const double area = static_cast<double>(width) * height;
  const double lr0 = std::log(spec.ratio_min), lr1 = std::log(spec.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (spec.scale_min + (spec.scale_max - spec.scale_min) * rng.Uniform01());
    const double aspect = std::exp(lr0 + (lr1 - lr0) * rng.Uniform01());
    const int w = RoundHalfEven(std::min(std::sqrt(target * aspect), 1e9));
    const int h = RoundHalfEven(std::min(std::sqrt(target / aspect), 1e9));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int i = static_cast<int>(rng.Bounded(static_cast<uint64_t>(height - h + 1)));
      const int j = static_cast<int>(rng.Bounded(static_cast<uint64_t>(width - w + 1)));
      return CropBox{static_cast<double>(j), static_cast<double>(i), static_cast<double>(w),
                     static_cast<double>(h)};
    }
  }
  // The fallback: a central crop at the nearest allowed aspect.
  const double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < spec.ratio_min) {
    h = RoundHalfEven(std::min(w / spec.ratio_min, 1e9));
  } else if (in_ratio > spec.ratio_max) {
    w = RoundHalfEven(std::min(h * spec.ratio_max, 1e9));
  }
  return CropBox{static_cast<double>((width - w) / 2), static_cast<double>((height - h) / 2),
                 static_cast<double>(w), static_cast<double>(h)};
}

// torchvision's Resize(shorter side) then CenterCrop, as the footprint of
// the output on the source image.
CropBox Center(const ImageSpec& spec, int width, int height) {
  const int r = spec.resize > 0 ? spec.resize : std::max(spec.height, spec.width);
  // In double, clamped: a 1 x 10^7 image must not overflow an int.
  auto side = [](double v) { return static_cast<int>(std::min(v, 1e9)); };
  int nw, nh;
  if (width <= height) {
    nw = r;
    nh = side(static_cast<double>(r) * height / width);
  } else {
    nh = r;
    nw = side(static_cast<double>(r) * width / height);
  }
  nw = std::max(nw, spec.width);
  nh = std::max(nh, spec.height);
  const int top = RoundHalfEven((nh - spec.height) / 2.0);
  const int left = RoundHalfEven((nw - spec.width) / 2.0);
  const double fx = static_cast<double>(width) / nw, fy = static_cast<double>(height) / nh;
  CropBox b{left * fx, top * fy, spec.width * fx, spec.height * fy};
  b.whole = true;
  return b;
}

bool Fill(const ImageSpec& spec, const CropBox& box, int width, int height, Want* want,
          std::string* error) {
  auto refuse = [&](const std::string& why) {
    *error = "crop box (" + std::to_string(box.x) + ", " + std::to_string(box.y) + ", " +
             std::to_string(box.width) + " x " + std::to_string(box.height) + ") " + why;
    return false;
  };
  if (!(box.width > 0 && box.height > 0 && box.x >= 0 && box.y >= 0 &&
        box.x + box.width <= width + 1e-9 && box.y + box.height <= height + 1e-9))
    return refuse("is not within the " + std::to_string(width) + " x " + std::to_string(height) +
                  " image");
  want->box = BoxF{box.x, box.y, box.x + box.width, box.y + box.height};
  if (spec.height > 0) {
    want->out_width = spec.width;
    want->out_height = spec.height;
  } else {
    want->out_width = std::max(1, RoundHalfEven(box.width));
    want->out_height = std::max(1, RoundHalfEven(box.height));
  }
  if (box.whole) {
    want->clip_x0 = want->clip_y0 = 0;
    want->clip_x1 = width;
    want->clip_y1 = height;
  } else {
    want->clip_x0 = static_cast<int>(std::floor(box.x + 1e-9));
    want->clip_y0 = static_cast<int>(std::floor(box.y + 1e-9));
    want->clip_x1 = std::min(width, static_cast<int>(std::ceil(box.x + box.width - 1e-9)));
    want->clip_y1 = std::min(height, static_cast<int>(std::ceil(box.y + box.height - 1e-9)));
  }
  if (want->clip_x1 <= want->clip_x0 || want->clip_y1 <= want->clip_y0)
    return refuse("holds no whole pixel");
  want->flip = box.flip;
  return true;
}

Result<DecodedField> Decode(std::string_view bytes, const ImageSpec& spec,
                            const internal::Geometry& geometry, std::vector<uint8_t>* pixels,
                            const FieldContext& ctx) {
  Want want;
  Region region;
  region.pixels = &internal::ScratchRegion();
  Status st;
  switch (SniffImageFormat(bytes)) {
    case ImageFormat::kJpeg:
      st = internal::DecodeJpeg(bytes, spec.max_pixels, geometry, &want, &region, ctx);
      break;
    case ImageFormat::kPng:
      st = internal::DecodePng(bytes, spec.max_pixels, geometry, &want, &region, ctx);
      break;
    case ImageFormat::kWebp:
      st = internal::DecodeWebp(bytes, spec.max_pixels, geometry, &want, &region, ctx);
      break;
    case ImageFormat::kUnknown: {
      std::string head;
      static const char* hex = "0123456789abcdef";
      for (size_t i = 0; i < std::min<size_t>(bytes.size(), 8); ++i) {
        const unsigned char c = static_cast<unsigned char>(bytes[i]);
        head += (i ? " " : "");
        head += hex[c >> 4];
        head += hex[c & 15];
      }
      return FieldError(ctx, 0,
                        "not a JPEG, PNG or WebP image (first bytes: " +
                            (head.empty() ? std::string("none, the field is empty") : head) + ")");
    }
  }
  if (!st.ok()) {
    internal::TrimScratch();
    return st;
  }
  const size_t n = static_cast<size_t>(want.out_width) * static_cast<size_t>(want.out_height) * 3;
  pixels->resize(n);
  internal::Resample(region, want.out_width, want.out_height, want.flip, spec.layout, pixels->data());
  internal::TrimScratch();
  DecodedField f;
  f.is_tensor = true;
  f.dtype = DType::kUint8;
  f.ndim = 3;
  if (spec.layout == ImageLayout::kHWC) {
    f.shape[0] = want.out_height;
    f.shape[1] = want.out_width;
    f.shape[2] = 3;
  } else {
    f.shape[0] = 3;
    f.shape[1] = want.out_height;
    f.shape[2] = want.out_width;
  }
  f.data = std::string_view(reinterpret_cast<const char*>(pixels->data()), n);
  return f;
}

}  // namespace

namespace internal {

void NeedRange(double b0, double b1, int c0, int c1, int out, int* lo, int* hi) {
  const double support = std::max((b1 - b0) / out, 1.0);
  *lo = std::max(c0, static_cast<int>(std::floor(b0 - support - 1)));
  *hi = std::min(c1, static_cast<int>(std::ceil(b1 + support + 1)));
  if (*hi <= *lo) *hi = std::min(c1, *lo + 1);
}

void PlaceRegion(const Want& want, int num, int denom, int origin_x, int origin_y, Region* region) {
  const double s = static_cast<double>(num) / denom;
  auto down = [&](int v) { return static_cast<int>(static_cast<int64_t>(v) * num / denom); };
  auto up = [&](int v) { return static_cast<int>((static_cast<int64_t>(v) * num + denom - 1) / denom); };
  region->box = {want.box.x0 * s - origin_x, want.box.y0 * s - origin_y, want.box.x1 * s - origin_x,
                 want.box.y1 * s - origin_y};
  auto clamp = [](int v, int n) { return v < 0 ? 0 : v > n ? n : v; };
  region->clip_x0 = clamp(down(want.clip_x0) - origin_x, region->width);
  region->clip_y0 = clamp(down(want.clip_y0) - origin_y, region->height);
  region->clip_x1 = clamp(up(want.clip_x1) - origin_x, region->width);
  region->clip_y1 = clamp(up(want.clip_y1) - origin_y, region->height);
  if (region->clip_x1 <= region->clip_x0) region->clip_x1 = std::min(region->width, region->clip_x0 + 1);
  if (region->clip_y1 <= region->clip_y0) region->clip_y1 = std::min(region->height, region->clip_y0 + 1);
}

Status CheckPixels(int64_t width, int64_t height, int64_t max_pixels, const FieldContext& ctx) {
  if (width <= 0 || height <= 0)
    return FieldError(ctx, 0, "image is " + std::to_string(width) + " x " + std::to_string(height) +
                                  " pixels: nothing to decode");
  if (width * height > max_pixels)
    return FieldError(ctx, 0,
                      "image is " + std::to_string(width) + " x " + std::to_string(height) + " = " +
                          std::to_string(width * height) + " pixels, over the limit of " +
                          std::to_string(max_pixels) +
                          " (a decompression bomb? raise max_pixels to accept it)");
  return Status::OK();
}

}  // namespace internal

ImageFormat SniffImageFormat(std::string_view b) {
  auto at = [&](size_t i) { return static_cast<unsigned char>(b[i]); };
  if (b.size() >= 3 && at(0) == 0xFF && at(1) == 0xD8 && at(2) == 0xFF) return ImageFormat::kJpeg;
  if (b.size() >= 8 && b.substr(0, 8) == std::string_view("\x89PNG\r\n\x1a\n", 8)) return ImageFormat::kPng;
  if (b.size() >= 12 && b.substr(0, 4) == "RIFF" && b.substr(8, 4) == "WEBP") return ImageFormat::kWebp;
  return ImageFormat::kUnknown;
}

Result<ImageInfo> ReadImageInfo(std::string_view bytes, const FieldContext& ctx) {
  switch (SniffImageFormat(bytes)) {
    case ImageFormat::kJpeg: return internal::JpegInfo(bytes, ctx);
    case ImageFormat::kPng: return internal::PngInfo(bytes, ctx);
    case ImageFormat::kWebp: return internal::WebpInfo(bytes, ctx);
    case ImageFormat::kUnknown: break;
  }
  return FieldError(ctx, 0, "not a JPEG, PNG or WebP image");
}

CropBox DrawCropBox(const ImageSpec& spec, int width, int height, const ImageDraw& draw) {
  const uint64_t key = XXH64(draw.key.data(), draw.key.size(), 0);
  internal::Xoshiro256 rng(internal::DeriveSeed(draw.seed, internal::Domain::kImage,
                                                static_cast<uint64_t>(draw.epoch), key));
  CropBox box;
  switch (spec.crop) {
    case ImageCrop::kNone:
      box = CropBox{0, 0, static_cast<double>(width), static_cast<double>(height)};
      box.whole = true;
      break;
    case ImageCrop::kCenter:
      box = Center(spec, width, height);
      break;
    case ImageCrop::kRandomResized:
      box = RandomResized(spec, width, height, rng);
      break;
  }
  box.flip = spec.flip > 0 && rng.Uniform01() < spec.flip;
  return box;
}

Status ValidateImageSpec(const ImageSpec& spec, std::string_view field) {
  const std::string f = "field '" + std::string(field) + "': ";
  if (spec.height < 0 || spec.width < 0 || (spec.height == 0) != (spec.width == 0))
    return Status::Config(f + "image size must be two positive numbers [height, width]");
  if (spec.height > 65535 || spec.width > 65535)
    return Status::Config(f + "image size over 65535");
  if (spec.crop != ImageCrop::kNone && spec.height == 0)
    return Status::Config(f + "a crop needs an output size");
  if (spec.crop == ImageCrop::kCenter && spec.resize != 0 &&
      spec.resize < std::max(spec.height, spec.width))
    return Status::Config(f + "resize " + std::to_string(spec.resize) +
                          " is smaller than the center crop");
  if (!(spec.scale_min > 0 && spec.scale_min <= spec.scale_max && spec.scale_max <= 1))
    return Status::Config(f + "scale must satisfy 0 < min <= max <= 1");
  if (!(spec.ratio_min > 0 && spec.ratio_min <= spec.ratio_max))
    return Status::Config(f + "ratio must satisfy 0 < min <= max");
  if (!(spec.flip >= 0 && spec.flip <= 1)) return Status::Config(f + "flip must be in [0, 1]");
  if (spec.max_pixels < 1) return Status::Config(f + "max_pixels must be positive");
  return Status::OK();
}

Result<DecodedField> DecodeImage(std::string_view bytes, const ImageSpec& spec,
                                 const ImageDraw& draw, std::vector<uint8_t>* pixels,
                                 const FieldContext& ctx) {
  auto geometry = [&](int width, int height, Want* want, std::string* error) {
    return Fill(spec, DrawCropBox(spec, width, height, draw), width, height, want, error);
  };
  return Decode(bytes, spec, geometry, pixels, ctx);
}

Result<DecodedField> DecodeImageBox(std::string_view bytes, const ImageSpec& spec,
                                    const CropBox& box, std::vector<uint8_t>* pixels,
                                    const FieldContext& ctx) {
  auto geometry = [&](int width, int height, Want* want, std::string* error) {
    return Fill(spec, box, width, height, want, error);
  };
  return Decode(bytes, spec, geometry, pixels, ctx);
}

}  // namespace shardstream
