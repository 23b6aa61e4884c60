// ImageSpec: how an image field is decoded (FieldSpec::image), apart from
// the decoders (image.h), so that field specs (decode.h) need only this.
//
// Thread-safety: a value type.
#ifndef SHARDSTREAM_IMAGE_SPEC_H_
#define SHARDSTREAM_IMAGE_SPEC_H_

#include <cstdint>

namespace shardstream {

enum class ImageCrop {
  kNone,           // the whole image, resized to the output size (aspect not kept)
  kCenter,         // evaluation: shorter side resized to `resize`, then a center crop
  kRandomResized,  // training: torchvision's RandomResizedCrop (scale, ratio)
};

enum class ImageLayout { kHWC, kCHW };

// How an image field is decoded (FieldSpec::image, with FieldDecode::kImage).
struct ImageSpec {
  // Output size; 0 x 0: the decoded image as it is (its shape varies, so the
  // field comes out ragged). Default: 0 x 0.
  int height = 0;
  int width = 0;
  // Default: kNone (with a size: the whole image squashed to it).
  ImageCrop crop = ImageCrop::kNone;
  // kCenter: the shorter side's length before the crop (ImageNet evaluation
  // uses 256 for 224). 0: max(height, width), so only the longer side is cut.
  int resize = 0;
  // kRandomResized: the crop's share of the image area and its aspect
  // (width / height) range. Defaults as torchvision: [0.08, 1], [3/4, 4/3].
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  // Probability of a horizontal flip. Default: 0.
  double flip = 0;
  // Default: kHWC ([H, W, 3]); kCHW gives [3, H, W].
  ImageLayout layout = ImageLayout::kHWC;
  // Images with more pixels are refused as decompression bombs (declared
  // dimensions, before anything is allocated). Default: Pillow's
  // MAX_IMAGE_PIXELS, 89478485.
  int64_t max_pixels = 89478485;
};

}  // namespace shardstream

#endif  // SHARDSTREAM_IMAGE_SPEC_H_
