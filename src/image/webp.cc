// WebP through libwebp, cropped in the decoder (its crop offsets must be
// even, so the region starts at most a pixel early). Animated files are
// refused: which frame is meant is not ours to guess.
#include <webp/decode.h>

#include "format/decode_error.h"
#include "image/image_internal.h"

namespace shardstream::internal {
namespace {

const char* Why(VP8StatusCode s) {
  switch (s) {
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "not enough data (truncated)";
    default: return "error";
  }
}

Status Features(std::string_view bytes, WebPBitstreamFeatures* f, const FieldContext& ctx) {
  VP8StatusCode s = WebPGetFeatures(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), f);
  if (s != VP8_STATUS_OK) return FieldError(ctx, 0, std::string("WebP header: ") + Why(s));
  if (f->has_animation)
    return FieldError(ctx, 0, "animated WebP is not supported in an image field (decode its frames "
                              "in a map hook)");
  return Status::OK();
}

}  // namespace

Result<ImageInfo> WebpInfo(std::string_view bytes, const FieldContext& ctx) {
  WebPBitstreamFeatures f;
  SHARDSTREAM_RETURN_IF_ERROR(Features(bytes, &f, ctx));
  return ImageInfo{ImageFormat::kWebp, f.width, f.height};
}

Status DecodeWebp(std::string_view bytes, int64_t max_pixels, const Geometry& geometry, Want* want,
                  Region* region, const FieldContext& ctx) {
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) return Status::Config("libwebp: version mismatch");
  SHARDSTREAM_RETURN_IF_ERROR(Features(bytes, &config.input, ctx));
  const int width = config.input.width, height = config.input.height;
  SHARDSTREAM_RETURN_IF_ERROR(CheckPixels(width, height, max_pixels, ctx));
  std::string problem;
  if (!geometry(width, height, want, &problem)) return FieldError(ctx, 0, problem);
  int x0, x1, y0, y1;
  NeedRange(want->box.x0, want->box.x1, want->clip_x0, want->clip_x1, want->out_width, &x0, &x1);
  NeedRange(want->box.y0, want->box.y1, want->clip_y0, want->clip_y1, want->out_height, &y0, &y1);
  const int left = x0 & ~1, top = y0 & ~1;
  const int cw = x1 - left, ch = y1 - top;
  std::vector<uint8_t>& px = *region->pixels;
  px.resize(static_cast<size_t>(cw) * static_cast<size_t>(ch) * 3);
  config.options.use_cropping = 1;
  config.options.crop_left = left;
  config.options.crop_top = top;
  config.options.crop_width = cw;
  config.options.crop_height = ch;
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = px.data();
  config.output.u.RGBA.stride = cw * 3;
  config.output.u.RGBA.size = px.size();
  VP8StatusCode s = WebPDecode(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &config);
  WebPFreeDecBuffer(&config.output);
  if (s != VP8_STATUS_OK) return FieldError(ctx, 0, std::string("WebP data: ") + Why(s));
  region->width = cw;
  region->height = ch;
  PlaceRegion(*want, 1, 1, left, top, region);
  return Status::OK();
}

}  // namespace shardstream::internal
