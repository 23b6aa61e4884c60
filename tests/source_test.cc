// One conformance suite run against every writable Source (Arrow's
// GenericFileSystemTest idea).
#include "shardstream/source.h"

#include <gtest/gtest.h>

#include <functional>

#include "support/test_util.h"

namespace shardstream {
namespace {

struct SourceCase {
  const char* name;
  std::function<std::shared_ptr<Source>()> make;
};

class SourceConformanceTest : public ::testing::TestWithParam<SourceCase> {
 protected:
  void SetUp() override {
    source_ = GetParam().make();
    base_ = std::string(GetParam().name) == "memory" ? "mem://t" : dir_.path();
  }
  std::string Url(const std::string& name) { return base_ + "/" + name; }

  testing::TempDir dir_;
  std::shared_ptr<Source> source_;
  std::string base_;
};

TEST_P(SourceConformanceTest, WriteReadStatList) {
  ASSERT_TRUE(WriteFileAtomic(*source_, Url("b.bin"), "hello world").ok());
  ASSERT_TRUE(WriteFileAtomic(*source_, Url("a.bin"), "").ok());
  auto data = ReadFileToString(*source_, Url("b.bin"));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, "hello world");
  auto info = source_->Stat(Url("b.bin"));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->size, 11u);
  auto list = source_->List(base_);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].url, Url("a.bin"));
  EXPECT_EQ((*list)[1].url, Url("b.bin"));
}

TEST_P(SourceConformanceTest, RandomAccessAndStreamAtOffset) {
  ASSERT_TRUE(WriteFileAtomic(*source_, Url("f"), "0123456789").ok());
  auto file = source_->OpenRandomAccess(Url("f"));
  ASSERT_TRUE(file.ok());
  char buf[16];
  auto n = (*file)->ReadAt(7, sizeof(buf), buf);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf, *n), "789");
  EXPECT_EQ(*(*file)->ReadAt(10, 4, buf), 0u);
  auto in = source_->OpenInputStream(Url("f"), 4);
  ASSERT_TRUE(in.ok());
  EXPECT_EQ((*in)->position(), 4u);
  std::string got;
  while (true) {
    auto r = (*in)->Read(3, buf);
    ASSERT_TRUE(r.ok());
    if (*r == 0) break;
    got.append(buf, *r);
  }
  EXPECT_EQ(got, "456789");
  EXPECT_EQ((*in)->position(), 10u);
}

TEST_P(SourceConformanceTest, MissingIsNotFound) {
  EXPECT_EQ(source_->OpenRandomAccess(Url("nope")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(source_->Stat(Url("nope")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(source_->Remove(Url("nope")).code(), StatusCode::kNotFound);
}

TEST_P(SourceConformanceTest, AbortLeavesNothing) {
  auto w = source_->NewWritableFile(Url("partial"));
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Append("abc").ok());
  ASSERT_TRUE((*w)->Abort().ok());
  EXPECT_EQ(source_->Stat(Url("partial")).status().code(), StatusCode::kNotFound);
}

TEST_P(SourceConformanceTest, RenameReplaces) {
  ASSERT_TRUE(WriteFileAtomic(*source_, Url("x"), "old").ok());
  ASSERT_TRUE(WriteFileAtomic(*source_, Url("y"), "new").ok());
  ASSERT_TRUE(source_->Rename(Url("y"), Url("x")).ok());
  EXPECT_EQ(*ReadFileToString(*source_, Url("x")), "new");
  EXPECT_EQ(source_->Stat(Url("y")).status().code(), StatusCode::kNotFound);
}

INSTANTIATE_TEST_SUITE_P(
    AllSources, SourceConformanceTest,
    ::testing::Values(SourceCase{"local", [] { return LocalSource(); }},
                      SourceCase{"memory", [] { return NewMemorySource(); }},
                      SourceCase{"router", [] { return DefaultSource(); }}),
    [](const ::testing::TestParamInfo<SourceCase>& info) { return std::string(info.param.name); });

TEST(DefaultSourceTest, UnknownSchemeIsConfigErrorWithRedactedUrl) {
  auto r = DefaultSource()->OpenRandomAccess("gopher://u:secret@h/x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kConfig);
  EXPECT_EQ(r.status().ToString().find("secret"), std::string::npos);
}

TEST(LocalSourceTest, FileUrlAndPathAreTheSameFile) {
  testing::TempDir dir;
  testing::WriteFile(dir.Join("a"), "xyz");
  auto data = ReadFileToString(*LocalSource(), "file://" + dir.Join("a"));
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(*data, "xyz");
}

}  // namespace
}  // namespace shardstream
