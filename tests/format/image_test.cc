// Image decoding against the pixels Pillow gives for the same files
// (tests/data/images, made by make_images.py), the fused geometry, and bad
// images.
#include "shardstream/image.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "shardstream/decode.h"
#include "image/image_internal.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

const FieldContext kCtx{"sample42", "jpg", "file:///data/shard-000007.tar", 8192};

std::string Dir() { return std::string(SHARDSTREAM_TEST_DATA_DIR) + "/images/"; }
std::string Bytes(const std::string& name) { return testing::ReadFile(Dir() + name); }

// Pillow's Image.convert("RGB") of the file, [H, W, 3].
struct Rgb {
  int h = 0, w = 0;
  std::string px;
  uint8_t at(int y, int x, int c) const { return static_cast<uint8_t>(px[(static_cast<size_t>(y) * w + x) * 3 + c]); }
};
Rgb Reference(const std::string& name) {
  std::string npy = Bytes(name + ".rgb.npy");
  auto f = DecodeNpy(npy, kCtx);
  EXPECT_TRUE(f.ok()) << f.status();
  Rgb r;
  r.h = static_cast<int>(f->shape[0]);
  r.w = static_cast<int>(f->shape[1]);
  r.px = std::string(f->data);
  return r;
}

struct Diff {
  double mean = 0;
  int max = 0;
};
Diff Compare(std::string_view a, std::string_view b) {
  Diff d;
  EXPECT_EQ(a.size(), b.size());
  const size_t n = std::min(a.size(), b.size());
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    int v = std::abs(static_cast<int>(static_cast<uint8_t>(a[i])) - static_cast<uint8_t>(b[i]));
    sum += v;
    d.max = std::max(d.max, v);
  }
  d.mean = n ? sum / static_cast<double>(n) : 0;
  return d;
}

Result<DecodedField> Full(const std::string& bytes, std::vector<uint8_t>* px) {
  return DecodeImage(bytes, ImageSpec{}, ImageDraw{}, px, kCtx);
}

TEST(ImageTest, EveryModeDecodesAsPillowConvertsIt) {
  // Every pixel the same: lossless formats exactly; JPEG through the same
  // ISLOW IDCT and fancy upsampling as Pillow's libjpeg-turbo; lossy WebP
  // through libwebp's own decoder and YUV conversion.
  for (const char* name : {"rgb.png", "interlaced.png", "rgba.png", "la.png", "palette.png",
                           "gray16.png", "gray1.png", "lossless_alpha.webp", "lossy.webp",
                           "rgb.jpg", "rgb420_odd.jpg", "progressive.jpg", "gray.jpg",
                           "cmyk.jpg"}) {
    SCOPED_TRACE(name);
    std::vector<uint8_t> px;
    auto f = Full(Bytes(name), &px);
    ASSERT_TRUE(f.ok()) << f.status();
    Rgb ref = Reference(name);
    ASSERT_EQ(f->ndim, 3);
    EXPECT_EQ(f->shape[0], ref.h);
    EXPECT_EQ(f->shape[1], ref.w);
    EXPECT_EQ(f->shape[2], 3);
    Diff d = Compare(f->data, ref.px);
    EXPECT_EQ(d.max, 0) << "mean " << d.mean;
  }
}

TEST(ImageTest, InfoAndFormat) {
  EXPECT_EQ(SniffImageFormat(Bytes("rgb.jpg")), ImageFormat::kJpeg);
  EXPECT_EQ(SniffImageFormat(Bytes("rgb.png")), ImageFormat::kPng);
  EXPECT_EQ(SniffImageFormat(Bytes("lossy.webp")), ImageFormat::kWebp);
  EXPECT_EQ(SniffImageFormat("GIF89a"), ImageFormat::kUnknown);
  for (const char* name : {"rgb.jpg", "rgb.png", "lossy.webp"}) {
    auto info = ReadImageInfo(Bytes(name), kCtx);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->width, 83);
    EXPECT_EQ(info->height, 61);
  }
}

TEST(ImageTest, CropWithoutResizeIsTheSubImage) {
  // A box decoded at its own size is the same pixels as the full image's
  // sub-array (JPEG: iMCU-aligned partial decoding; lossy WebP upsamples
  // chroma from the crop alone, so its edge pixels move a few levels).
  for (const char* name : {"rgb.png", "lossy.webp", "rgb420_odd.jpg", "cmyk.jpg", "interlaced.png"}) {
    SCOPED_TRACE(name);
    Rgb ref = Reference(name);
    CropBox box{17, 9, 40, 31};
    std::vector<uint8_t> px;
    auto f = DecodeImageBox(Bytes(name), ImageSpec{}, box, &px, kCtx);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_EQ(f->shape[0], 31);
    ASSERT_EQ(f->shape[1], 40);
    std::string sub;
    for (int y = 9; y < 40; ++y)
      for (int x = 17; x < 57; ++x)
        for (int c = 0; c < 3; ++c) sub += static_cast<char>(ref.at(y, x, c));
    Diff d = Compare(f->data, sub);
    EXPECT_LE(d.max, std::string(name) == "lossy.webp" ? 8 : 2);
    EXPECT_LE(d.mean, 0.2);
  }
}

TEST(ImageTest, FlipAndChwAreTheSamePixelsRearranged) {
  const std::string jpg = Bytes("rgb420_odd.jpg");
  ImageSpec spec;
  spec.height = 48;
  spec.width = 64;
  CropBox box{10, 5, 100, 80};
  std::vector<uint8_t> a, b, c;
  auto plain = DecodeImageBox(jpg, spec, box, &a, kCtx);
  ASSERT_TRUE(plain.ok()) << plain.status();
  box.flip = true;
  auto flipped = DecodeImageBox(jpg, spec, box, &b, kCtx);
  ASSERT_TRUE(flipped.ok());
  spec.layout = ImageLayout::kCHW;
  box.flip = false;
  auto chw = DecodeImageBox(jpg, spec, box, &c, kCtx);
  ASSERT_TRUE(chw.ok());
  EXPECT_EQ(chw->shape[0], 3);
  EXPECT_EQ(chw->shape[1], 48);
  EXPECT_EQ(chw->shape[2], 64);
  int mismatches = 0;
  for (int y = 0; y < 48; ++y)
    for (int x = 0; x < 64; ++x)
      for (int k = 0; k < 3; ++k) {
        const uint8_t v = a[(y * 64 + x) * 3 + k];
        mismatches += v != b[(y * 64 + (63 - x)) * 3 + k];
        mismatches += v != c[(k * 48 + y) * 64 + x];
      }
  EXPECT_EQ(mismatches, 0);
  EXPECT_NE(a, b);  // the picture is not symmetric: the flip did something
}

TEST(ImageTest, DctScalingStaysCloseToTheFullDecode) {
  // A 97 x 131 JPEG shrunk to 12 x 16: decoded at 1/8 scale in the DCT
  // domain then resized, against the full decode resized (the PNG of the
  // same picture is decoded whole: it has no DCT scaling).
  const std::string jpg = Bytes("rgb420_odd.jpg");
  ImageSpec spec;
  spec.height = 12;
  spec.width = 16;
  std::vector<uint8_t> scaled, full_px;
  auto f = DecodeImageBox(jpg, spec, CropBox{0, 0, 131, 97}, &scaled, kCtx);
  ASSERT_TRUE(f.ok()) << f.status();
  // 60 x 80 is less than twice... no: 131 < 2 x 80, so decoded at full size.
  ImageSpec big = spec;
  big.height = 60;
  big.width = 80;
  auto g = DecodeImageBox(jpg, big, CropBox{0, 0, 131, 97}, &full_px, kCtx);  // 1/1 (crop < 2x)
  ASSERT_TRUE(g.ok());
  // Box-average the 60 x 80 result down by 5 to 12 x 16 for a rough check.
  double sum = 0;
  for (int y = 0; y < 12; ++y)
    for (int x = 0; x < 16; ++x)
      for (int k = 0; k < 3; ++k) {
        double avg = 0;
        for (int dy = 0; dy < 5; ++dy)
          for (int dx = 0; dx < 5; ++dx) avg += full_px[((y * 5 + dy) * 80 + x * 5 + dx) * 3 + k];
        sum += std::fabs(avg / 25 - scaled[(y * 16 + x) * 3 + k]);
      }
  EXPECT_LT(sum / (12 * 16 * 3), 6.0);
}

TEST(ImageTest, RandomResizedBoxesFollowTorchvisionsRules) {
  ImageSpec spec;
  spec.height = spec.width = 224;
  spec.crop = ImageCrop::kRandomResized;
  spec.flip = 0.5;
  int flips = 0, fallbacks = 0;
  std::set<std::pair<double, double>> origins;
  for (int i = 0; i < 2000; ++i) {
    std::string key = "k" + std::to_string(i);
    CropBox b = DrawCropBox(spec, 500, 375, ImageDraw{7, 3, key});
    ASSERT_GE(b.x, 0);
    ASSERT_GE(b.y, 0);
    ASSERT_LE(b.x + b.width, 500);
    ASSERT_LE(b.y + b.height, 375);
    EXPECT_EQ(b.x, std::floor(b.x));  // whole pixels, as torchvision's
    const double area = b.width * b.height / (500.0 * 375.0);
    const double ratio = b.width / b.height;
    const bool inside = area >= 0.08 * 0.97 && area <= 1.0 && ratio >= 0.75 * 0.97 && ratio <= 4.0 / 3 * 1.03;
    fallbacks += inside ? 0 : 1;
    flips += b.flip;
    origins.insert({b.x, b.y});
    // The same key, seed and epoch give the same box.
    CropBox again = DrawCropBox(spec, 500, 375, ImageDraw{7, 3, key});
    EXPECT_EQ(again.x, b.x);
    EXPECT_EQ(again.width, b.width);
    EXPECT_EQ(again.flip, b.flip);
  }
  EXPECT_EQ(fallbacks, 0);
  EXPECT_GT(flips, 900);
  EXPECT_LT(flips, 1100);
  EXPECT_GT(origins.size(), 1500u);
  // Another epoch or seed: other boxes.
  int same = 0;
  for (int i = 0; i < 100; ++i) {
    std::string key = "k" + std::to_string(i);
    CropBox a = DrawCropBox(spec, 500, 375, ImageDraw{7, 3, key});
    CropBox b = DrawCropBox(spec, 500, 375, ImageDraw{7, 4, key});
    same += a.x == b.x && a.y == b.y && a.width == b.width;
  }
  EXPECT_LT(same, 5);
  // A sliver of an image: no try fits, so torchvision's central fallback.
  spec.scale_min = 0.9;
  CropBox f = DrawCropBox(spec, 1000, 10, ImageDraw{1, 0, "x"});
  EXPECT_EQ(f.height, 10);
  EXPECT_EQ(f.width, 13);  // round(10 * 4/3)
  EXPECT_EQ(f.x, (1000 - 13) / 2);
}

TEST(ImageTest, CenterCropIsResizeThenCenterCrop) {
  ImageSpec spec;
  spec.height = spec.width = 224;
  spec.crop = ImageCrop::kCenter;
  spec.resize = 256;
  // 500 x 375: shorter side 375 -> 256, so 341 x 256; crop 224 at (58, 16).
  CropBox b = DrawCropBox(spec, 500, 375, ImageDraw{});
  const double f = 375.0 / 256;
  EXPECT_NEAR(b.y, 16 * f, 1e-9);
  EXPECT_NEAR(b.height, 224 * f, 1e-9);
  EXPECT_NEAR(b.width, 224 * 500.0 / 341, 1e-9);
  EXPECT_NEAR(b.x, 58 * 500.0 / 341, 1e-9);
  EXPECT_TRUE(b.whole);
  EXPECT_FALSE(b.flip);
}

TEST(ImageTest, BadImagesAreCorruptNamingTheSample) {
  struct Case {
    const char* file;
    const char* says;
  };
  for (Case c : {Case{"bad_truncated.jpg", "JPEG"}, Case{"bad_corrupt.jpg", "JPEG"},
                 Case{"bad_empty.jpg", "field is empty"}, Case{"bad_not_image.jpg", "47 49 46 38"},
                 Case{"bad_truncated.png", "PNG"}, Case{"bad_corrupt.png", "PNG"},
                 Case{"bad_bomb.png", "decompression bomb"},
                 Case{"bad_truncated.webp", "WebP"}}) {
    SCOPED_TRACE(c.file);
    std::vector<uint8_t> px;
    ImageSpec spec;
    spec.height = spec.width = 32;
    spec.crop = ImageCrop::kRandomResized;
    for (int epoch = 0; epoch < 3; ++epoch) {  // whatever the crop
      auto f = DecodeImage(Bytes(c.file), spec, ImageDraw{1, epoch, "sample42"}, &px, kCtx);
      ASSERT_FALSE(f.ok()) << "epoch " << epoch;
      EXPECT_EQ(f.status().code(), StatusCode::kCorrupt);
      const std::string m = f.status().message();
      EXPECT_NE(m.find("sample42"), std::string::npos) << m;
      EXPECT_NE(m.find("'jpg'"), std::string::npos) << m;
      EXPECT_NE(m.find("shard-000007.tar"), std::string::npos) << m;
      EXPECT_NE(m.find(c.says), std::string::npos) << m;
    }
  }
  // The bomb's limit is the caller's: raised, the header passes the check
  // (and its tiny body then fails to decode; only the box's rows are kept).
  ImageSpec spec;
  spec.height = spec.width = 32;
  spec.max_pixels = int64_t{1} << 30;
  std::vector<uint8_t> px;
  auto f = DecodeImageBox(Bytes("bad_bomb.png"), spec, CropBox{0, 0, 100, 100}, &px, kCtx);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message().find("decompression bomb"), std::string::npos) << f.status();
  EXPECT_NE(f.status().message().find("PNG data"), std::string::npos) << f.status();
}

// FNV-1a, for a short fingerprint of many pixels.
uint64_t Fingerprint(std::string_view bytes, uint64_t h = 14695981039346656037ULL) {
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ULL;
  return h;
}

TEST(ImageTest, GoldenPixelsForAFixedSeed) {
  // The pixels of random resized crops (with flips) of four formats for
  // fixed (seed, epoch, key)s. This changes only when the geometry draw, a
  // decoder or the resampler does: every machine and thread count gives
  // these, and a change here changes what a seeded training run sees.
  ImageSpec spec;
  spec.height = 24;
  spec.width = 32;
  spec.crop = ImageCrop::kRandomResized;
  spec.flip = 0.5;
  uint64_t h = 14695981039346656037ULL;
  std::vector<uint8_t> px;
  for (const char* name : {"rgb420_odd.jpg", "cmyk.jpg", "rgb.png", "lossy.webp"}) {
    const std::string bytes = Bytes(name);
    for (int k = 0; k < 8; ++k) {
      auto f = DecodeImage(bytes, spec, ImageDraw{1234, 5, "key" + std::to_string(k)}, &px, kCtx);
      ASSERT_TRUE(f.ok()) << f.status();
      h = Fingerprint(f->data, h);
    }
  }
  EXPECT_EQ(h, 3523497935469740902ULL) << h;
}

TEST(ImageTest, EverySimdLevelGivesTheSamePixels) {
  // AVX2, SSSE3 and plain C compute the same integer sums, in both passes
  // (level 2 runs the AVX2 vertical pass, 1 and 0 the plain one): a machine
  // without AVX2 sees the same pixels.
  ImageSpec spec;
  spec.crop = ImageCrop::kRandomResized;
  spec.flip = 0.5;
  std::vector<uint8_t> px;
  for (const char* name : {"rgb420_odd.jpg", "cmyk.jpg", "rgb.png", "lossy.webp"}) {
    const std::string bytes = Bytes(name);
    for (int size : {7, 24, 31, 57}) {
      spec.height = size;
      spec.width = size + 3;
      for (ImageLayout layout : {ImageLayout::kHWC, ImageLayout::kCHW}) {
        spec.layout = layout;
        for (int k = 0; k < 6; ++k) {
          std::string first;
          for (int level : {2, 1, 0}) {
            internal::SetResampleSimd(level);
            auto f = DecodeImage(bytes, spec, ImageDraw{9, k, "s" + std::to_string(k)}, &px, kCtx);
            ASSERT_TRUE(f.ok()) << f.status();
            if (level == 2) first = std::string(f->data);
            EXPECT_EQ(std::string(f->data), first) << name << " size " << size << " level " << level;
          }
        }
      }
    }
  }
  internal::SetResampleSimd(2);
}

TEST(ImageTest, ResampleLevelsAgreeOnEnlargingShrinkingAndMixedRows) {
  // Random pixels resampled straight (no decoder), from boxes that enlarge,
  // shrink or do both, with fractional edges, clipped windows, flips, both
  // layouts and output widths on and off the grouped pass's blocks of 4
  // and 8 pixels: AVX2, SSSE3 (the grouped pass where rows enlarge) and
  // plain C give the same bytes, and enlarging rows do take the grouped pass.
  std::vector<uint8_t> pixels(97 * 83 * 3);
  uint64_t x = 88172645463325252ULL;
  for (uint8_t& p : pixels) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    p = static_cast<uint8_t>(x >> 32);
  }
  internal::Region region;
  region.pixels = &pixels;
  region.width = 97;
  region.height = 83;
  struct Case {
    double x0, y0, x1, y1;
    int clip_x0, clip_y0, clip_x1, clip_y1;
  };
  const Case cases[] = {
      {0, 0, 97, 83, 0, 0, 97, 83},              // the whole image
      {10.25, 5.5, 41.75, 30.2, 10, 5, 42, 31},  // a small crop: enlarged
      {0.4, 0.6, 20.1, 82.9, 0, 0, 21, 83},      // narrow and tall
      {3, 2, 95, 12, 3, 2, 95, 12},              // wide and short
      {50, 40, 51, 41, 50, 40, 51, 41},          // one pixel
      {96.5, 0, 97, 83, 96, 0, 97, 83},          // the last column, half a pixel
  };
  std::vector<uint8_t> out, first;
  for (const Case& c : cases) {
    region.box = {c.x0, c.y0, c.x1, c.y1};
    region.clip_x0 = c.clip_x0, region.clip_y0 = c.clip_y0;
    region.clip_x1 = c.clip_x1, region.clip_y1 = c.clip_y1;
    for (int w : {1, 3, 4, 5, 8, 9, 31, 64, 67, 224}) {
      for (int h : {1, 7, 40}) {
        for (bool flip : {false, true}) {
          for (ImageLayout layout : {ImageLayout::kHWC, ImageLayout::kCHW}) {
            out.assign(static_cast<size_t>(w) * static_cast<size_t>(h) * 3 + 64, 0xA5);
            for (int level : {2, 1, 0}) {
              internal::SetResampleSimd(level);
              std::fill(out.begin(), out.end(), 0xA5);
              const bool took = internal::ResampleIsGrouped(region, w, flip, layout);
              internal::Resample(region, w, h, flip, layout, out.data());
              const std::string at = "box " + std::to_string(c.x0) + "," + std::to_string(c.y0) +
                                     " out " + std::to_string(w) + "x" + std::to_string(h) +
                                     " flip " + std::to_string(flip) + " layout " +
                                     std::to_string(static_cast<int>(layout)) + " level " +
                                     std::to_string(level);
              // Nothing written past the output.
              for (size_t i = out.size() - 64; i < out.size(); ++i) ASSERT_EQ(out[i], 0xA5) << at;
              if (level == 2) first = out;
              ASSERT_EQ(out, first) << at;
              // Between 1x and 1.5x a window's third weight may round to
              // zero: either pass may run there.
              const double scale = (c.x1 - c.x0) / w;
              if (level == 0 || !__builtin_cpu_supports("ssse3")) {
                EXPECT_FALSE(took) << at;
              } else if (scale <= 1) {
                EXPECT_TRUE(took) << at;
              } else if (scale >= 1.5) {
                EXPECT_FALSE(took) << at;  // windows wider than two taps
              }
            }
          }
        }
      }
    }
  }
  internal::SetResampleSimd(2);
}

TEST(ImageTest, ABoxWithoutAWholePixelIsAnErrorNotARead) {
  std::vector<uint8_t> px;
  ImageSpec spec;
  spec.height = spec.width = 8;
  for (const char* name : {"rgb.png", "rgb.jpg", "lossy.webp"}) {
    for (CropBox box : {CropBox{5, 0, 1e-10, 10}, CropBox{83, 0, 5e-10, 10}, CropBox{0, 5, 10, 1e-10}}) {
      auto f = DecodeImageBox(Bytes(name), spec, box, &px, kCtx);
      ASSERT_FALSE(f.ok()) << name;
      EXPECT_EQ(f.status().code(), StatusCode::kCorrupt) << f.status();
    }
  }
}

TEST(ImageTest, ATruncatedJpegFailsWhateverTheCrop) {
  // The crop lies in the top rows, far above where the file was cut: the
  // rest is still read, so the damage is found in every epoch.
  const std::string cut = Bytes("bad_truncated.jpg");
  ImageSpec spec;
  spec.height = spec.width = 4;
  std::vector<uint8_t> px;
  auto f = DecodeImageBox(cut, spec, CropBox{0, 0, 16, 8}, &px, kCtx);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("JPEG data"), std::string::npos) << f.status();
}

TEST(ImageTest, SpecValidation) {
  ImageSpec s;
  EXPECT_TRUE(ValidateImageSpec(s, "jpg").ok());
  s.crop = ImageCrop::kCenter;
  EXPECT_EQ(ValidateImageSpec(s, "jpg").code(), StatusCode::kConfig);  // a crop needs a size
  s.height = s.width = 224;
  s.resize = 200;
  EXPECT_EQ(ValidateImageSpec(s, "jpg").code(), StatusCode::kConfig);
  s.resize = 256;
  EXPECT_TRUE(ValidateImageSpec(s, "jpg").ok());
  s.scale_min = 0;
  EXPECT_EQ(ValidateImageSpec(s, "jpg").code(), StatusCode::kConfig);
  s.scale_min = 0.08;
  s.flip = 1.5;
  EXPECT_NE(ValidateImageSpec(s, "jpg").message().find("flip"), std::string::npos);
}

}  // namespace
}  // namespace shardstream
