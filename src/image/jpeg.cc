// JPEG through libjpeg-turbo's libjpeg API rather than its TurboJPEG one:
// the TurboJPEG 2.1 API that Debian 12 ships can scale but not crop
// (tj3SetCroppingRegion came with 3.0), while jpeg_crop_scanline and
// jpeg_skip_scanlines decode only the crop's columns and rows, and
// scale_num/scale_denom scale in the DCT domain. Same library, same SIMD.
//
// libjpeg reports fatal errors by longjmp: nothing with a destructor is made
// between setjmp and the calls that may jump (the buffers are sized before,
// the Status is declared before). GCC's -Wclobbered flags the temporaries
// of assignments to that Status: they are gone before any call that may
// jump, and after a jump nothing but the error message is read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wclobbered"
#endif
#include <csetjmp>
#include <cstdio>
#include <algorithm>
#include <cstring>

#include <jpeglib.h>
#include <jerror.h>

#include "format/decode_error.h"
#include "image/image_internal.h"

namespace shardstream::internal {
namespace {

struct ErrorManager {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void OnError(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

// Warnings that mean damaged data are errors (libjpeg would go on and fill
// the damage with gray): truncation, bad codes, lost sync. Extraneous bytes
// before a marker are common in valid files and pass.
void OnMessage(j_common_ptr cinfo, int level) {
  if (level != -1) return;  // trace messages
  const int code = cinfo->err->msg_code;
  if (code == JWRN_EXTRANEOUS_DATA || code == JWRN_ADOBE_XFORM || code == JWRN_JFIF_MAJOR ||
      code == JWRN_BOGUS_ICC)
    return;
  OnError(cinfo);
}

// Data that ends in an end-of-image marker (perhaps followed by a little
// padding). Without one the file may be truncated, so the decode reads to
// the end even when the crop ends earlier: libjpeg then sees it.
bool EndsWithEoi(std::string_view b) {
  const size_t from = b.size() > 64 ? b.size() - 64 : 0;
  for (size_t i = b.size(); i-- > from + 1;)
    if (static_cast<unsigned char>(b[i - 1]) == 0xFF && static_cast<unsigned char>(b[i]) == 0xD9)
      return true;
  return false;
}

// Pillow's CMYK -> RGB (Convert.c cmyk2rgb) on Adobe-inverted samples
// (Pillow reads those as "CMYK;I").
void CmykToRgb(const uint8_t* in, uint8_t* out, int width, bool inverted) {
  for (int x = 0; x < width; ++x, in += 4, out += 3) {
    int c = in[0], m = in[1], y = in[2], k = in[3];
    if (inverted) {
      c = 255 - c;
      m = 255 - m;
      y = 255 - y;
      k = 255 - k;
    }
    const int nk = 255 - k;
    auto muldiv255 = [](int a, int b) {
      const int t = a * b + 128;
      return ((t >> 8) + t) >> 8;
    };
    auto clip = [](int v) { return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v); };
    out[0] = clip(nk - muldiv255(c, nk));
    out[1] = clip(nk - muldiv255(m, nk));
    out[2] = clip(nk - muldiv255(y, nk));
  }
}

// The DCT-domain scale num/8: the coarsest of 1/8, 1/4 and 1/2 that keeps
// the crop at least as large as the output, so the antialiased resize only
// ever shrinks what it gets (a crop twice the output or more is scaled).
// libjpeg-turbo also scales by 3/8, 5/8 ... but those IDCTs have no SIMD
// and cost more than the pixels they save.
int ScaleNumerator(const Want& want) {
  const double w = want.box.x1 - want.box.x0, h = want.box.y1 - want.box.y0;
  for (int num : {1, 2, 4})
    if (w * num >= 8.0 * want.out_width && h * num >= 8.0 * want.out_height) return num;
  return 8;
}

}  // namespace

Result<ImageInfo> JpegInfo(std::string_view bytes, const FieldContext& ctx) {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = OnError;
  err.pub.emit_message = OnMessage;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return FieldError(ctx, 0, std::string("JPEG header: ") + err.message);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  ImageInfo info{ImageFormat::kJpeg, static_cast<int>(cinfo.image_width),
                 static_cast<int>(cinfo.image_height)};
  jpeg_destroy_decompress(&cinfo);
  return info;
}

Status DecodeJpeg(std::string_view bytes, int64_t max_pixels, const Geometry& geometry, Want* want,
                  Region* region, const FieldContext& ctx) {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  std::string problem;
  int num = 8;
  static thread_local std::vector<uint8_t> cmyk_row, tail_row;
  Status ok;  // before the setjmp: nothing with a destructor is made after it
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = OnError;
  err.pub.emit_message = OnMessage;
  // Volatile: read after a longjmp.
  volatile int stage = 0;  // 0: header, 1: pixels
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return FieldError(ctx, 0, std::string(stage == 0 ? "JPEG header: " : "JPEG data: ") + err.message);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  const int width = static_cast<int>(cinfo.image_width), height = static_cast<int>(cinfo.image_height);
  ok = CheckPixels(width, height, max_pixels, ctx);
  if (ok.ok() && !geometry(width, height, want, &problem)) ok = FieldError(ctx, 0, problem);
  if (!ok.ok()) {
    jpeg_destroy_decompress(&cinfo);
    return ok;
  }
  num = ScaleNumerator(*want);
  const bool four = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = four ? JCS_CMYK : JCS_EXT_RGB;
  cinfo.scale_num = static_cast<unsigned int>(num);
  cinfo.scale_denom = 8;
  cinfo.dct_method = JDCT_ISLOW;  // Pillow's default: the same pixels
  stage = 1;
  jpeg_start_decompress(&cinfo);
  const int sw = static_cast<int>(cinfo.output_width), sh = static_cast<int>(cinfo.output_height);
  // The rows and columns the resize reads, in scaled pixels.
  const double s = num / 8.0;
  auto down = [&](int v) { return v * num / 8; };
  auto up = [&](int v) { return (v * num + 7) / 8; };
  int x0, x1, y0, y1;
  NeedRange(want->box.x0 * s, want->box.x1 * s, down(want->clip_x0), std::min(sw, up(want->clip_x1)),
            want->out_width, &x0, &x1);
  NeedRange(want->box.y0 * s, want->box.y1 * s, down(want->clip_y0), std::min(sh, up(want->clip_y1)),
            want->out_height, &y0, &y1);
  JDIMENSION xoff = static_cast<JDIMENSION>(x0), cw = static_cast<JDIMENSION>(x1 - x0);
  if (x0 > 0 || x1 < sw) jpeg_crop_scanline(&cinfo, &xoff, &cw);  // widened to iMCU columns
  const int rw = static_cast<int>(cinfo.output_width);
  const int rows = y1 - y0;
  std::vector<uint8_t>& px = *region->pixels;
  // Sized before any row is read: no allocation can be skipped by a jump.
  px.resize(static_cast<size_t>(rw) * static_cast<size_t>(rows) * 3);
  if (four) cmyk_row.resize(static_cast<size_t>(rw) * 4);
  tail_row.resize(static_cast<size_t>(rw) * 4);
  uint8_t* const cmyk = four ? cmyk_row.data() : nullptr;  // one TLS lookup, not one per row
  if (y0 > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(y0));
  // Rows in groups (libjpeg decodes a block row of 8 or 16 at a time): one
  // call per group rather than per row.
  JSAMPROW ptrs[16];
  for (int r = 0; r < rows;) {
    const int want_rows = four ? 1 : std::min(16, rows - r);
    for (int i = 0; i < want_rows; ++i)
      ptrs[i] = four ? cmyk : px.data() + static_cast<size_t>(r + i) * static_cast<size_t>(rw) * 3;
    const int got = static_cast<int>(jpeg_read_scanlines(&cinfo, ptrs, static_cast<JDIMENSION>(want_rows)));
    if (got < 1) {
      jpeg_destroy_decompress(&cinfo);
      return FieldError(ctx, 0, "JPEG data: fewer rows than the header declares");
    }
    if (four) CmykToRgb(cmyk, px.data() + static_cast<size_t>(r) * static_cast<size_t>(rw) * 3, rw,
                        cinfo.saw_Adobe_marker);
    r += got;
  }
  if (y1 < sh && !EndsWithEoi(bytes)) {
    // Perhaps truncated: read the rest so that damage there is an error in
    // every epoch, whatever the crop. The last row is read, not skipped:
    // skipping to the very end returns without decoding anything.
    if (sh - y1 > 1) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(sh - y1 - 1));
    JSAMPROW last = tail_row.data();
    jpeg_read_scanlines(&cinfo, &last, 1);
  }
  jpeg_abort_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  region->width = rw;
  region->height = rows;
  PlaceRegion(*want, num, 8, static_cast<int>(xoff), y0, region);
  return Status::OK();
}

}  // namespace shardstream::internal
