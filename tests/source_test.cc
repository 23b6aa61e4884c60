// One conformance suite run against every writable Source (Arrow's
// GenericFileSystemTest idea).
#include "shardstream/source.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "support/fault_source.h"
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

// One positional read scattered over many pieces (more than one preadv
// takes, of every size, empty ones too) gives the bytes ReadAt gives, and
// stops at the end of the file inside a piece.
TEST_P(SourceConformanceTest, VectoredReadScattersAndStopsAtTheEnd) {
  std::string content(300000, '\0');
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 131 + i / 977);
  ASSERT_TRUE(WriteFileAtomic(*source_, Url("v"), content).ok());
  auto file = source_->OpenRandomAccess(Url("v"));
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<std::string> bufs;
  for (size_t i = 0; i < 3000; ++i) bufs.emplace_back(i % 7 == 0 ? 0 : (i * 37) % 211 + 1, '\xee');
  std::vector<ReadPiece> pieces;
  size_t total = 0;
  for (std::string& b : bufs) {
    pieces.push_back(ReadPiece{b.data(), b.size()});
    total += b.size();
  }
  const uint64_t offset = content.size() - total + 50;  // the last 50 bytes lie past the end
  auto got = (*file)->ReadVAt(offset, pieces.data(), pieces.size());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, total - 50);
  std::string joined;
  for (const std::string& b : bufs) joined += b;
  EXPECT_EQ(joined.substr(0, total - 50), content.substr(offset));
  EXPECT_EQ(joined.substr(total - 50), std::string(50, '\xee'));  // untouched past the end
  auto none = (*file)->ReadVAt(content.size(), pieces.data(), 2);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0u);
}

// A file maps whole (local files) or says it cannot (kConfig; the caller
// reads instead); a view holds exactly the file's bytes, and SizeNow sees a
// file cut short after it was mapped.
TEST_P(SourceConformanceTest, MapViewHoldsTheBytesOrIsNotSupported) {
  std::string content(70000, '\0');
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 7 + i / 251);
  ASSERT_TRUE(WriteFileAtomic(*source_, Url("m"), content).ok());
  auto file = source_->OpenRandomAccess(Url("m"));
  ASSERT_TRUE(file.ok()) << file.status();
  auto view = (*file)->MapView();
  const std::string name = GetParam().name;
  if (name == "local" || name == "router") {
    ASSERT_TRUE(view.ok()) << view.status();
    ASSERT_EQ(view->size, content.size());
    EXPECT_EQ(std::string(view->data, view->size), content);
    auto again = (*file)->MapView();  // mapped once
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->data, view->data);
    EXPECT_EQ(*(*file)->SizeNow(), content.size());
    ASSERT_EQ(::truncate(Url("m").c_str(), 1000), 0);
    EXPECT_EQ(*(*file)->SizeNow(), 1000u);
  } else {
    EXPECT_EQ(view.status().code(), StatusCode::kConfig) << view.status();
    EXPECT_NE(view.status().message().find("not supported"), std::string::npos);
    EXPECT_EQ(*(*file)->SizeNow(), content.size());
  }
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
                      SourceCase{"router", [] { return DefaultSource(); }},
                      SourceCase{"fault", [] {
                        return std::make_shared<testing::FaultSource>(LocalSource());
                      }}),
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

TEST(LocalSourceTest, PreallocateReservesBlocksWithoutGrowingTheFile) {
  testing::TempDir dir;
  auto file = LocalSource()->NewWritableFile(dir.Join("a"));
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE((*file)->Preallocate(8 << 20).ok());
  struct stat st;
  ASSERT_EQ(::stat(dir.Join("a").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0);  // readers of a growing file go by its size
  EXPECT_GE(static_cast<int64_t>(st.st_blocks) * 512, 8 << 20);
  ASSERT_TRUE((*file)->Append("xyz").ok());
  ASSERT_TRUE((*file)->Close().ok());
  ASSERT_EQ(::stat(dir.Join("a").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 3);
}

TEST(LocalSourceTest, PreallocateBeyondTheFreeSpaceIsANoSpaceErrorNamingTheFile) {
  testing::TempDir dir;
  struct statvfs vfs;
  ASSERT_EQ(::statvfs(dir.path().c_str(), &vfs), 0);
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  auto file = LocalSource()->NewWritableFile(dir.Join("big"));
  ASSERT_TRUE(file.ok()) << file.status();
  Status s = (*file)->Preallocate(free_bytes + (free_bytes / 2) + (1ull << 30));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(std::strerror(ENOSPC)), std::string::npos) << s;
  EXPECT_NE(s.message().find(dir.Join("big")), std::string::npos) << s;
  // Nothing was taken on the way: a reservation that fails must not fill
  // the disk under other writers, even for a moment.
  struct stat held;
  ASSERT_EQ(::stat(dir.Join("big").c_str(), &held), 0);
  EXPECT_EQ(held.st_blocks, 0);
  EXPECT_TRUE((*file)->Abort().ok());
  struct stat st;
  EXPECT_NE(::stat(dir.Join("big").c_str(), &st), 0);
}

}  // namespace
}  // namespace shardstream
