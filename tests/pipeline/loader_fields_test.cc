// Which fields a batch holds: every field of the first sample when none are
// named, a clear kConfig for a name the data does not have, and optional
// fields with a presence mask.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/log_capture.h"
#include "shardstream/loader.h"
#include "shardstream/shard_writer.h"
#include "support/loader_fixture.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::DatasetSpec;
using testing::TempDir;

std::set<std::string> TensorNames(const Batch& b) {
  std::set<std::string> names;
  for (size_t i = 0; i < b.num_tensors(); ++i) names.insert(std::string(b.tensor(i).name));
  return names;
}

TEST(LoaderFieldsTest, NoFieldsTakesEveryFieldOfTheFirstSample) {
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{3, 10});
  LoaderOptions o;
  o.manifest = d.manifest;
  o.batch_size = 4;
  o.shuffle_buffer = 0;
  auto l = Loader::Create(o);
  ASSERT_TRUE(l.ok()) << l.status();
  int64_t rows = 0;
  while (true) {
    auto b = (*l)->next();
    ASSERT_TRUE(b.ok()) << b.status();
    if (b->empty()) break;
    EXPECT_EQ(TensorNames(*b), (std::set<std::string>{"x.npy", "cls", "txt"}));
    TensorView x = b->tensor("x.npy");
    EXPECT_EQ(x.dtype, DType::kInt32);  // decoded by extension: .npy
    EXPECT_EQ(b->tensor("cls").dtype, DType::kInt64);
    EXPECT_TRUE(b->tensor("txt").is_string);
    rows += b->rows();
  }
  EXPECT_EQ(rows, 30);
  // Every epoch and a second loader choose the same fields.
  ASSERT_TRUE((*l)->set_epoch(1).ok());
  auto b = (*l)->next();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(TensorNames(*b).size(), 3u);
}

TEST(LoaderFieldsTest, MisspeltFieldIsAConfigErrorListingTheFields) {
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{2, 10});
  LoaderOptions o = testing::FieldOptions(d.manifest);
  o.fields = {FieldSpec{"x.npy"}, FieldSpec{"clss"}};
  auto l = *Loader::Create(o);
  auto b = l->next();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kConfig) << b.status();
  const std::string msg = b.status().ToString();
  EXPECT_NE(msg.find("'clss'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'cls'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'x.npy'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'txt'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("shard-"), std::string::npos) << msg;  // the shard is named
  // Under a skip policy the caller asked for such samples to be skipped.
  o.error_policy = ErrorPolicy::kSkipSample;
  auto skipping = *Loader::Create(o);
  auto end = skipping->next();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_TRUE(end->empty());
  EXPECT_EQ(skipping->stats().skipped_samples, 20u);
}

// Sample i has "a.cls" always, "b.txt" when i % 3 == 1 (so not the first),
// "c.bin" (4 raw bytes) when i is even.
std::string WriteSparse(const std::string& dir, int n) {
  ShardWriterOptions wo;
  wo.max_samples = 7;
  auto w = *ShardWriter::Create(dir, wo);
  for (int i = 0; i < n; ++i) {
    Sample s;
    s.key = "s" + std::to_string(1000 + i);
    std::string cls = std::to_string(i), txt = "text " + std::to_string(i);
    std::string bin(4, static_cast<char>(i));
    s.fields.push_back(Field{"a.cls", cls});
    if (i % 3 == 1) s.fields.push_back(Field{"b.txt", txt});
    if (i % 2 == 0) s.fields.push_back(Field{"c.bin", bin});
    EXPECT_TRUE(w->Write(s).ok());
  }
  EXPECT_TRUE(w->Close().ok());
  return dir + "/manifest.jsonl";
}

TEST(LoaderFieldsTest, OptionalFieldsCarryAPresenceMask) {
  TempDir dir;
  const std::string manifest = WriteSparse(dir.path(), 30);
  LoaderOptions o;
  o.manifest = manifest;
  o.batch_size = 5;
  o.shuffle_buffer = 0;
  FieldSpec b{"b.txt"};
  b.optional = true;  // missing from the first sample: text, so its type is known
  FieldSpec c{"c.bin"};
  c.optional = true;
  c.decode = FieldDecode::kRaw;
  c.dtype = DType::kUint8;
  c.shape = {4};
  o.fields = {FieldSpec{"a.cls"}, b, c};
  auto l = Loader::Create(o);
  ASSERT_TRUE(l.ok()) << l.status();
  int64_t seen = 0, with_b = 0, with_c = 0;
  while (true) {
    auto batch = (*l)->next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    if (batch->empty()) break;
    TensorView cls = batch->tensor("a.cls");
    TensorView bt = batch->tensor("b.txt");
    TensorView bp = batch->tensor("b.txt.present");
    TensorView cb = batch->tensor("c.bin");
    TensorView cp = batch->tensor("c.bin.present");
    ASSERT_NE(bp.data, nullptr);
    ASSERT_NE(cp.data, nullptr);
    EXPECT_EQ(bp.dtype, DType::kBool);
    for (int64_t r = 0; r < batch->rows(); ++r) {
      const int64_t i = static_cast<const int64_t*>(cls.data)[r];
      const bool has_b = static_cast<const uint8_t*>(bp.data)[r] != 0;
      const bool has_c = static_cast<const uint8_t*>(cp.data)[r] != 0;
      EXPECT_EQ(has_b, i % 3 == 1) << i;
      EXPECT_EQ(has_c, i % 2 == 0) << i;
      EXPECT_EQ(bt.bytes(r), has_b ? "text " + std::to_string(i) : "") << i;
      const uint8_t* cv = static_cast<const uint8_t*>(cb.data) + 4 * r;
      EXPECT_EQ(cv[3], has_c ? static_cast<uint8_t>(i) : 0) << i;
      with_b += has_b;
      with_c += has_c;
      ++seen;
    }
  }
  EXPECT_EQ(seen, 30);
  EXPECT_EQ(with_b, 10);
  EXPECT_EQ(with_c, 15);
}

TEST(LoaderFieldsTest, AFieldMissingFromALaterSampleIsAConfigErrorThatNamesOptional) {
  TempDir dir;
  const std::string manifest = WriteSparse(dir.path(), 30);  // c.bin in even samples only
  LoaderOptions o;
  o.manifest = manifest;
  o.batch_size = 5;
  o.shuffle_buffer = 0;
  FieldSpec c{"c.bin"};
  c.decode = FieldDecode::kRaw;
  o.fields = {FieldSpec{"a.cls"}, c};
  auto l = *Loader::Create(o);
  Status err = testing::FirstError(l.get());  // OK (failing below) if the epoch ends without it
  EXPECT_EQ(err.code(), StatusCode::kConfig) << err;  // not corrupt data
  EXPECT_NE(err.message().find("no field 'c.bin'"), std::string::npos) << err;
  EXPECT_NE(err.message().find("mark it optional"), std::string::npos) << err;
  EXPECT_NE(err.message().find("\"optional\": True"), std::string::npos) << err;
  EXPECT_NE(err.message().find("sample 's10"), std::string::npos) << err;  // the sample
  // Under skip_sample the samples without it are skipped and counted.
  o.error_policy = ErrorPolicy::kSkipSample;
  auto skipping = *Loader::Create(o);
  int64_t rows = 0;
  while (true) {
    auto b = skipping->next();
    ASSERT_TRUE(b.ok()) << b.status();
    if (b->empty()) break;
    rows += b->rows();
  }
  EXPECT_EQ(rows, 15);
  EXPECT_EQ(skipping->stats().skipped_samples, 15u);
}

TEST(LoaderFieldsTest, NoFieldsLooksAtManySamplesForFieldsThatComeAndGo) {
  TempDir dir;
  // a.cls always; b.txt not in the first sample; c.bin in the first, not in all.
  const std::string manifest = WriteSparse(dir.path(), 30);
  LoaderOptions o;
  o.manifest = manifest;
  o.batch_size = 5;
  o.shuffle_buffer = 0;
  internal::ScopedLogCapture log;
  auto l = Loader::Create(o);
  ASSERT_TRUE(l.ok()) << l.status();
  int64_t rows = 0, with_c = 0;
  while (true) {
    auto b = (*l)->next();
    ASSERT_TRUE(b.ok()) << b.status();  // samples without c.bin are no error
    if (b->empty()) break;
    EXPECT_EQ(TensorNames(*b), (std::set<std::string>{"a.cls", "c.bin", "c.bin.present"}));
    TensorView cp = b->tensor("c.bin.present");
    for (int64_t r = 0; r < b->rows(); ++r) with_c += static_cast<const uint8_t*>(cp.data)[r] != 0;
    rows += b->rows();
  }
  EXPECT_EQ(rows, 30);
  EXPECT_EQ(with_c, 15);
  // The field only later samples have is named, with what to do.
  const std::string text = log.Text();
  EXPECT_NE(text.find("field 'b.txt' is in 2 of the first 7 samples but not in the first"),
            std::string::npos) << text;
  EXPECT_NE(text.find("name it in fields="), std::string::npos) << text;
}

TEST(LoaderFieldsTest, OptionalNpyMissingFromTheFirstSampleNamesTheFix) {
  TempDir dir;
  ShardWriterOptions wo;
  auto w = *ShardWriter::Create(dir.path(), wo);
  for (int i = 0; i < 4; ++i) {
    Sample s;
    s.key = "k" + std::to_string(i);
    std::string cls = std::to_string(i);
    s.fields.push_back(Field{"cls", cls});
    ASSERT_TRUE(w->Write(s).ok());
  }
  ASSERT_TRUE(w->Close().ok());
  LoaderOptions o;
  o.manifest = dir.Join("manifest.jsonl");
  FieldSpec x{"x.npy"};
  x.optional = true;
  o.fields = {FieldSpec{"cls"}, x};
  auto l = *Loader::Create(o);
  auto b = l->next();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kConfig);
  EXPECT_NE(b.status().message().find("decode \"raw\""), std::string::npos) << b.status();
}

TEST(LoaderFieldsTest, ARawShapeDecodingWouldRefuseIsRefusedWhenTheLoaderIsCreated) {
  // Refused before any sample, also for an optional field, whose column a
  // batch without it takes from the spec alone.
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{1, 4});
  const std::vector<std::pair<std::vector<int64_t>, std::string>> bad = {
      {{-2}, "negative dimension -2"},
      {{-1, 4, -1}, "more than one -1"},
      {std::vector<int64_t>(kMaxDims + 1, 1), "too many dimensions"},
      {{int64_t{1} << 40, int64_t{1} << 40}, "too large"}};
  for (const auto& [shape, what] : bad) {
    LoaderOptions o = testing::FieldOptions(d.manifest);
    FieldSpec x{"x.npy", "", FieldDecode::kRaw, DType::kInt32, shape};
    x.optional = true;
    o.fields = {FieldSpec{"cls"}, x};
    auto l = Loader::Create(o);
    ASSERT_FALSE(l.ok()) << what;
    EXPECT_EQ(l.status().code(), StatusCode::kConfig) << l.status();
    const std::string msg = l.status().ToString();
    EXPECT_NE(msg.find("field 'x.npy'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{-1}, std::vector<int64_t>{-1, 2}, std::vector<int64_t>{},
        std::vector<int64_t>{0}, std::vector<int64_t>{-1, 0}}) {
    LoaderOptions o = testing::FieldOptions(d.manifest);
    o.fields = {FieldSpec{"cls"}, FieldSpec{"x.npy", "", FieldDecode::kRaw, DType::kInt32, shape}};
    auto l = Loader::Create(o);
    EXPECT_TRUE(l.ok()) << l.status();
  }
}

}  // namespace
}  // namespace shardstream
