// PNG through libspng: row by row for non-interlaced images, keeping only
// the crop's rows and columns (every row is still inflated and checked, so
// damage anywhere is an error whatever the crop); interlaced images whole.
#include <spng.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "format/decode_error.h"
#include "image/image_internal.h"

namespace shardstream::internal {
namespace {

struct CtxDeleter {
  void operator()(spng_ctx* c) const { spng_ctx_free(c); }
};
using Ctx = std::unique_ptr<spng_ctx, CtxDeleter>;

Status Fail(const FieldContext& ctx, const char* what, int err) {
  return FieldError(ctx, 0, std::string("PNG ") + what + ": " + spng_strerror(err));
}

Result<Ctx> Open(std::string_view bytes, spng_ihdr* ihdr, const FieldContext& ctx) {
  Ctx c(spng_ctx_new(0));
  if (!c) return Status::Io("spng_ctx_new failed (out of memory)");
  // Ancillary chunks (text, ICC ...) are kept within a bound, so a crafted
  // file cannot make the decoder hold much more than the image.
  spng_set_chunk_limits(c.get(), size_t{16} << 20, size_t{64} << 20);
  int e = spng_set_png_buffer(c.get(), bytes.data(), bytes.size());
  if (e == 0) e = spng_get_ihdr(c.get(), ihdr);
  if (e != 0) return Fail(ctx, "header", e);
  return c;
}

// 16-bit grayscale, as Pillow converts its "I;16" to RGB: clipped at 255.
void Gray16ToRgb(const uint8_t* in, uint8_t* out, int width) {
  for (int x = 0; x < width; ++x, in += 2, out += 3) {
    const int v = (in[0] << 8) | in[1];
    out[0] = out[1] = out[2] = static_cast<uint8_t>(v > 255 ? 255 : v);
  }
}

}  // namespace

Result<ImageInfo> PngInfo(std::string_view bytes, const FieldContext& ctx) {
  spng_ihdr ihdr;
  SHARDSTREAM_ASSIGN_OR_RETURN(Ctx c, Open(bytes, &ihdr, ctx));
  return ImageInfo{ImageFormat::kPng, static_cast<int>(ihdr.width), static_cast<int>(ihdr.height)};
}

Status DecodePng(std::string_view bytes, int64_t max_pixels, const Geometry& geometry, Want* want,
                 Region* region, const FieldContext& ctx) {
  spng_ihdr ihdr;
  SHARDSTREAM_ASSIGN_OR_RETURN(Ctx c, Open(bytes, &ihdr, ctx));
  const int width = static_cast<int>(ihdr.width), height = static_cast<int>(ihdr.height);
  SHARDSTREAM_RETURN_IF_ERROR(CheckPixels(width, height, max_pixels, ctx));
  std::string problem;
  if (!geometry(width, height, want, &problem)) return FieldError(ctx, 0, problem);
  const bool gray16 = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth == 16;
  const int fmt = gray16 ? SPNG_FMT_RAW : SPNG_FMT_RGB8;
  int x0, x1, y0, y1;
  NeedRange(want->box.x0, want->box.x1, want->clip_x0, want->clip_x1, want->out_width, &x0, &x1);
  NeedRange(want->box.y0, want->box.y1, want->clip_y0, want->clip_y1, want->out_height, &y0, &y1);
  const int rw = x1 - x0;
  std::vector<uint8_t>& px = *region->pixels;
  px.resize(static_cast<size_t>(rw) * static_cast<size_t>(y1 - y0) * 3);
  const size_t in_row = static_cast<size_t>(width) * (gray16 ? 2 : 3);
  thread_local std::vector<uint8_t> row, whole;
  auto place = [&](const uint8_t* src, int y) {
    if (y < y0 || y >= y1) return;
    uint8_t* dst = px.data() + static_cast<size_t>(y - y0) * static_cast<size_t>(rw) * 3;
    if (gray16) {
      Gray16ToRgb(src + static_cast<size_t>(x0) * 2, dst, x1 - x0);
    } else {
      std::memcpy(dst, src + static_cast<size_t>(x0) * 3, static_cast<size_t>(x1 - x0) * 3);
    }
  };
  if (ihdr.interlace_method == SPNG_INTERLACE_NONE) {
    int e = spng_decode_image(c.get(), nullptr, 0, fmt, SPNG_DECODE_PROGRESSIVE);
    if (e != 0) return Fail(ctx, "data", e);
    row.resize(in_row);
    for (;;) {
      spng_row_info info;
      e = spng_get_row_info(c.get(), &info);
      if (e != 0) return Fail(ctx, "data", e);
      e = spng_decode_row(c.get(), row.data(), row.size());
      if (e != 0 && e != SPNG_EOI) return Fail(ctx, "data", e);
      place(row.data(), static_cast<int>(info.row_num));
      if (e == SPNG_EOI) break;
    }
  } else {
    size_t len = 0;
    int e = spng_decoded_image_size(c.get(), fmt, &len);
    if (e != 0) return Fail(ctx, "data", e);
    whole.resize(len);
    e = spng_decode_image(c.get(), whole.data(), whole.size(), fmt, 0);
    if (e != 0) return Fail(ctx, "data", e);
    for (int y = y0; y < y1; ++y) place(whole.data() + static_cast<size_t>(y) * in_row, y);
    if (whole.capacity() > (size_t{16} << 20)) std::vector<uint8_t>().swap(whole);
  }
  region->width = rw;
  region->height = y1 - y0;
  PlaceRegion(*want, 1, 1, x0, y0, region);
  return Status::OK();
}

}  // namespace shardstream::internal
