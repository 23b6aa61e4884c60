// Image fields through the Loader: the same pixels for every reader thread
// count, an exact resume, bad images under each error policy, ragged rows,
// and the memory estimate. The images are tests/data/images/.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "shardstream/loader.h"
#include "shardstream/shard_writer.h"
#include "support/loader_fixture.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::TempDir;

const char* kImages[] = {"rgb.jpg", "rgb420_odd.jpg", "progressive.jpg", "cmyk.jpg",
                         "gray.jpg", "rgb.png",        "palette.png",     "lossy.webp"};

std::string Image(const std::string& name) {
  return testing::ReadFile(std::string(SHARDSTREAM_TEST_DATA_DIR) + "/images/" + name);
}

// 3 shards of 20 samples: key "sNNNNN", an image field "img" (the test
// images in turn; `bad` keys get a truncated JPEG) and a label.
// by_extension: the image field is named by its format ("jpg", "png",
// "webp"), as pack --image-folder and WebDataset writers name it.
std::string WriteImages(const std::string& dir, const std::set<int>& bad = {},
                        bool by_extension = false) {
  ShardWriterOptions wo;
  wo.max_samples = 20;
  auto w = ShardWriter::Create(dir, wo);
  EXPECT_TRUE(w.ok()) << w.status();
  const std::string truncated = Image("bad_truncated.jpg");
  for (int g = 0; g < 60; ++g) {
    Sample s;
    char key[16];
    std::snprintf(key, sizeof(key), "s%05d", g);
    s.key = key;
    const std::string img = bad.count(g) ? truncated : Image(kImages[g % 8]);
    const std::string label = std::to_string(g);
    Field f;
    const std::string file = kImages[g % 8];
    f.name = by_extension ? file.substr(file.rfind('.') + 1) : "img";
    f.data = img;
    Field c;
    c.name = "cls";
    c.data = label;
    s.fields = {f, c};
    EXPECT_TRUE((*w)->Write(s).ok());
  }
  EXPECT_TRUE((*w)->Close().ok());
  return dir + "/manifest.jsonl";
}

LoaderOptions Options(const std::string& manifest) {
  LoaderOptions o;
  o.manifest = manifest;
  o.batch_size = 8;
  o.shuffle_buffer = 16;
  o.seed = 11;
  FieldSpec img;
  img.name = "img";
  img.decode = FieldDecode::kImage;
  img.image.height = 24;
  img.image.width = 40;
  img.image.crop = ImageCrop::kRandomResized;
  img.image.flip = 0.5;
  o.fields = {img, FieldSpec{"cls"}};
  return o;
}

// key -> pixels of every batch of the rest of the epoch, and the key order.
struct Drained {
  std::vector<std::string> keys;
  std::map<std::string, std::string> pixels;
};
Drained Drain(Loader* l) {
  Drained d;
  while (true) {
    auto b = l->next();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok() || b->empty()) break;
    TensorView t = b->tensor("img");
    EXPECT_EQ(t.ndim, 4);
    EXPECT_EQ(t.shape[1], 24);
    EXPECT_EQ(t.shape[2], 40);
    EXPECT_EQ(t.shape[3], 3);
    const size_t row = 24 * 40 * 3;
    for (int64_t r = 0; r < b->rows(); ++r) {
      std::string key(b->key(r));
      d.keys.push_back(key);
      d.pixels[key] = std::string(static_cast<const char*>(t.data) + r * row, row);
    }
  }
  return d;
}

TEST(LoaderImageTest, SamePixelsForOneTwoAndFourReaderThreads) {
  TempDir dir;
  const std::string m = WriteImages(dir.path());
  Drained first;
  for (int threads : {1, 2, 4}) {
    LoaderOptions o = Options(m);
    o.reader_threads = threads;
    auto l = Loader::Create(o);
    ASSERT_TRUE(l.ok()) << l.status();
    Drained d = Drain(l->get());
    ASSERT_EQ(d.keys.size(), 60u);
    if (threads == 1) {
      first = d;
    } else {
      EXPECT_EQ(d.keys, first.keys) << threads << " threads";
      EXPECT_TRUE(d.pixels == first.pixels) << threads << " threads";
    }
  }
  // Another epoch: other crops of the same images.
  auto l = Loader::Create(Options(m));
  ASSERT_TRUE((*l)->set_epoch(1).ok());
  Drained e1 = Drain(l->get());
  int same = 0;
  for (auto& [k, px] : e1.pixels) same += px == first.pixels[k];
  EXPECT_LT(same, 6);
}

TEST(LoaderImageTest, ResumeGivesTheRestOnceWithTheSamePixels) {
  TempDir dir;
  const std::string m = WriteImages(dir.path());
  auto whole = Loader::Create(Options(m));
  ASSERT_TRUE(whole.ok());
  Drained all = Drain(whole->get());
  auto l = Loader::Create(Options(m));
  std::vector<std::string> seen;
  for (int i = 0; i < 3; ++i) {
    auto b = (*l)->next();
    ASSERT_TRUE(b.ok());
    for (int64_t r = 0; r < b->rows(); ++r) seen.emplace_back(b->key(r));
  }
  auto state = (*l)->state();
  ASSERT_TRUE(state.ok()) << state.status();
  for (int workers : {1, 3}) {  // also split over another topology
    std::vector<std::string> rest;
    for (int w = 0; w < workers; ++w) {
      LoaderOptions o = Options(m);
      o.num_workers = workers;
      o.worker = w;
      auto again = Loader::Create(o);
      ASSERT_TRUE(again.ok());
      ASSERT_TRUE((*again)->restore(*state).ok());
      Drained d = Drain(again->get());
      for (const std::string& k : d.keys) {
        rest.push_back(k);
        EXPECT_EQ(d.pixels[k], all.pixels[k]) << k;
      }
    }
    std::multiset<std::string> both(seen.begin(), seen.end());
    both.insert(rest.begin(), rest.end());
    EXPECT_EQ(both, std::multiset<std::string>(all.keys.begin(), all.keys.end())) << workers;
  }
}

TEST(LoaderImageTest, BadImagesRaiseOrAreSkippedAndCounted) {
  TempDir dir;
  const std::string m = WriteImages(dir.path(), {5, 33, 34});
  LoaderOptions o = Options(m);
  o.shuffle_buffer = 0;
  auto l = Loader::Create(o);
  ASSERT_TRUE(l.ok());
  Status err;
  while (true) {
    auto b = (*l)->next();
    if (!b.ok()) {
      err = b.status();
      break;
    }
    ASSERT_FALSE(b->empty()) << "the bad image was not reported";
  }
  EXPECT_EQ(err.code(), StatusCode::kCorrupt);
  EXPECT_NE(err.message().find("'img'"), std::string::npos) << err;
  EXPECT_NE(err.message().find("JPEG"), std::string::npos) << err;
  EXPECT_NE(err.message().find("shard-00000"), std::string::npos) << err;
  o.error_policy = ErrorPolicy::kSkipSample;
  auto skip = Loader::Create(o);
  ASSERT_TRUE(skip.ok());
  Drained d = Drain(skip->get());
  EXPECT_EQ(d.keys.size(), 57u);
  EXPECT_EQ(d.pixels.count("s00005"), 0u);
  EXPECT_EQ((*skip)->stats().skipped_samples, 3u);
}

TEST(LoaderImageTest, ImagesWithoutASizeAreRaggedRows) {
  TempDir dir;
  const std::string m = WriteImages(dir.path());
  // The default arena, and one so small that every batch overflows to the
  // heap: rows stay 8-byte aligned either way.
  for (size_t arena : {size_t{2} << 20, size_t{4096}}) {
  SCOPED_TRACE(arena);
  LoaderOptions o;
  o.variable_bytes = arena;
  o.manifest = m;
  o.batch_size = 8;
  o.shuffle_buffer = 0;
  o.mode = LoaderMode::kEval;
  FieldSpec img;
  img.name = "img";
  img.decode = FieldDecode::kImage;
  o.fields = {img};
  auto l = Loader::Create(o);
  ASSERT_TRUE(l.ok()) << l.status();
  auto b = (*l)->next();
  ASSERT_TRUE(b.ok()) << b.status();
  TensorView t = b->tensor("img");
  TensorView shapes = b->tensor("img.shape");
  ASSERT_EQ(t.ragged, Ragged::kList);
  ASSERT_EQ(shapes.dtype, DType::kInt64);
  ASSERT_EQ(shapes.shape[1], 3);
  const auto* dims = static_cast<const int64_t*>(shapes.data);
  for (int64_t r = 0; r < b->rows(); ++r) {
    const int64_t h = dims[r * 3], w = dims[r * 3 + 1];
    EXPECT_EQ(dims[r * 3 + 2], 3);
    EXPECT_EQ(t.bytes(r).size(), static_cast<size_t>(h * w * 3));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.bytes(r).data()) % 8, 0u);
    // The test images are 61 x 83 except rgb420_odd (97 x 131).
    EXPECT_EQ(h, r % 8 == 1 ? 97 : 61);
  }
  }
}

TEST(LoaderImageTest, MemoryBudgetCountsDecodedPixels) {
  TempDir dir;
  const std::string m = WriteImages(dir.path());
  LoaderOptions o = Options(m);
  o.fields[0].image.height = o.fields[0].image.width = 1024;  // 3 MiB per image
  o.shuffle_buffer = 1000;
  o.memory_budget = uint64_t{1} << 30;  // less than 1000 x 3 MiB
  auto l = Loader::Create(o);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kConfig);
  EXPECT_NE(l.status().message().find("memory_budget"), std::string::npos) << l.status();
  o.shuffle_buffer = 16;
  EXPECT_TRUE(Loader::Create(o).ok());
}

TEST(LoaderImageTest, OneFieldOfImagesInSeveralFormatsNamedByAlternatives) {
  // A folder of JPEGs with PNGs and a WebP among them, each member named by
  // its extension: "jpg;png;webp" reads whichever a sample has, with the
  // same pixels as the same images under one name.
  TempDir one, mixed;
  const std::string m1 = WriteImages(one.path());
  const std::string m2 = WriteImages(mixed.path(), {}, /*by_extension=*/true);
  LoaderOptions o = Options(m2);
  o.fields[0].name = "jpg;png;webp";
  auto l = Loader::Create(o);
  ASSERT_TRUE(l.ok()) << l.status();
  auto b = (*l)->next();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(b->tensor("jpg").data, nullptr) << "the output is named by the first alternative";
  o.fields[0].output = "img";
  const Drained got = Drain(Loader::Create(o)->get());
  const Drained want = Drain(Loader::Create(Options(m1))->get());
  EXPECT_EQ(got.keys, want.keys);
  EXPECT_EQ(got.pixels, want.pixels);
  // One name only: the sample without it is a usage error that says how to
  // name all the formats.
  LoaderOptions jpg = Options(m2);
  jpg.fields[0].name = "jpg";
  jpg.shuffle_buffer = 0;
  Status st = testing::FirstError(Loader::Create(jpg)->get());
  EXPECT_EQ(st.code(), StatusCode::kConfig);
  EXPECT_NE(st.message().find("the sample has no field 'jpg'"), std::string::npos) << st;
  EXPECT_NE(st.message().find("\"jpg;jpeg;png;webp\""), std::string::npos) << st;
  // Alternatives that decode differently by extension need a decode.
  LoaderOptions odd = Options(m2);
  odd.fields[1].name = "cls;txt";
  EXPECT_EQ(Loader::Create(odd).status().code(), StatusCode::kConfig);
  odd.fields[1].name = "cls;";
  EXPECT_EQ(Loader::Create(odd).status().code(), StatusCode::kConfig);
}

TEST(LoaderImageTest, BadSpecIsAConfigError) {
  TempDir dir;
  const std::string m = WriteImages(dir.path());
  LoaderOptions o = Options(m);
  o.fields[0].image.scale_min = 2;
  auto l = Loader::Create(o);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kConfig);
  EXPECT_NE(l.status().message().find("'img'"), std::string::npos) << l.status();
}

}  // namespace
}  // namespace shardstream
