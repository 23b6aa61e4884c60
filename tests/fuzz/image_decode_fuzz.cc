// libFuzzer target for the image decoders (JPEG, PNG, WebP) and the fused
// crop/resize: any input must decode or give kCorrupt, never a crash, a
// sanitizer report or an allocation beyond the pixel limit. The first byte
// picks the geometry; the rest is the image. Seeds: tests/data/images/.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shardstream/decode.h"
#include "shardstream/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  shardstream::ImageSpec spec;
  spec.max_pixels = int64_t{1} << 22;  // 4 Mpx: bounded memory per input
  switch (pick % 4) {
    case 0: break;  // the whole image at its size
    case 1:
      spec.height = spec.width = 1 + pick / 4 % 48;
      spec.crop = shardstream::ImageCrop::kRandomResized;
      spec.flip = 0.5;
      break;
    case 2:
      spec.height = 17;
      spec.width = 31;
      spec.crop = shardstream::ImageCrop::kCenter;
      spec.layout = shardstream::ImageLayout::kCHW;
      break;
    case 3:
      spec.height = 64;
      spec.width = 8;
      break;
  }
  const shardstream::FieldContext ctx{"k", "jpg", "fuzz.tar", 0};
  std::vector<uint8_t> px;
  auto r = shardstream::DecodeImage(bytes, spec, shardstream::ImageDraw{pick, 0, "k"}, &px, ctx);
  if (r.ok()) {
    if (r->data.size() != static_cast<size_t>(r->elements())) __builtin_trap();
  } else if (r.status().code() != shardstream::StatusCode::kCorrupt) {
    __builtin_trap();
  }
  auto info = shardstream::ReadImageInfo(bytes, ctx);
  if (!info.ok() && info.status().code() != shardstream::StatusCode::kCorrupt) __builtin_trap();
  return 0;
}
