// KeptMappings (LoaderOptions::mapped_keep_bytes): which files stay mapped,
// and that a file changed since is never read from the old mapping.
#include "pipeline/kept_mappings.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <cstdio>
#include <ctime>
#include <string>

#include "support/fault_source.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::TempDir;

// The file's bytes as its mapping shows them.
std::string Mapped(RandomAccessFile& f) {
  auto v = f.MapView();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? std::string(v->data, v->size) : std::string();
}

const char* MapAddress(RandomAccessFile& f) {
  auto v = f.MapView();
  return v.ok() ? v->data : nullptr;
}

TEST(KeptMappingsTest, KeepsTheFirstFilesUpToTheBudgetAndReusesTheirMappings) {
  TempDir dir;
  const std::string a = dir.path() + "/a", b = dir.path() + "/b", c = dir.path() + "/c";
  testing::WriteFile(a, std::string(3000, 'a'));
  testing::WriteFile(b, std::string(3000, 'b'));
  testing::WriteFile(c, std::string(3000, 'c'));
  internal::KeptMappings kept(7000);  // room for two
  auto source = LocalSource();
  auto a1 = *kept.Open(*source, a);
  auto b1 = *kept.Open(*source, b);
  auto c1 = *kept.Open(*source, c);
  EXPECT_EQ(kept.kept_bytes(), 6000u);
  auto a2 = *kept.Open(*source, a);
  auto c2 = *kept.Open(*source, c);
  // a's second opening is its first mapping; c, over the budget, is mapped anew.
  EXPECT_EQ(MapAddress(*a1), MapAddress(*a2));
  EXPECT_NE(MapAddress(*c1), MapAddress(*c2));
  EXPECT_EQ(Mapped(*a2), std::string(3000, 'a'));
  EXPECT_EQ(Mapped(*c2), std::string(3000, 'c'));
  // The kept mapping outlives every range that used it.
  a1.reset();
  a2.reset();
  auto a3 = *kept.Open(*source, a);
  EXPECT_EQ(Mapped(*a3), std::string(3000, 'a'));
  EXPECT_EQ(kept.kept_bytes(), 6000u);
}

TEST(KeptMappingsTest, AFileReplacedOrRewrittenSinceIsMappedAfresh) {
  TempDir dir;
  const std::string a = dir.path() + "/a";
  testing::WriteFile(a, std::string(4096, 'a'));
  internal::KeptMappings kept(uint64_t{1} << 20);
  auto source = LocalSource();
  { auto f = *kept.Open(*source, a); EXPECT_EQ(Mapped(*f), std::string(4096, 'a')); }
  // Another file of the same size renamed over it (its mtime set apart, as
  // any later write would make it).
  testing::WriteFile(a + ".next", std::string(4096, 'b'));
  struct timespec times[2] = {{0, UTIME_OMIT}, {std::time(nullptr) + 5, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (a + ".next").c_str(), times, 0), 0);
  ASSERT_EQ(std::rename((a + ".next").c_str(), a.c_str()), 0);
  { auto f = *kept.Open(*source, a); EXPECT_EQ(Mapped(*f), std::string(4096, 'b')); }
  // Rewritten longer in place.
  testing::WriteFile(a, std::string(8192, 'c'));
  auto f = *kept.Open(*source, a);
  EXPECT_EQ(Mapped(*f), std::string(8192, 'c'));
  EXPECT_EQ(kept.kept_bytes(), 8192u);
}

TEST(KeptMappingsTest, ABudgetOfZeroKeepsNothing) {
  TempDir dir;
  const std::string a = dir.path() + "/a";
  testing::WriteFile(a, std::string(4096, 'a'));
  internal::KeptMappings kept(0);
  auto source = LocalSource();
  auto f1 = *kept.Open(*source, a);
  auto f2 = *kept.Open(*source, a);
  EXPECT_NE(MapAddress(*f1), MapAddress(*f2));
  EXPECT_EQ(kept.kept_bytes(), 0u);
}

TEST(KeptMappingsTest, AFileDeletedSinceIsLetGoWithTheSourcesError) {
  TempDir dir;
  const std::string a = dir.path() + "/a";
  testing::WriteFile(a, std::string(4096, 'a'));
  internal::KeptMappings kept(uint64_t{1} << 20);
  auto source = LocalSource();
  ASSERT_TRUE(kept.Open(*source, a).ok());
  EXPECT_EQ(kept.kept_bytes(), 4096u);
  ASSERT_EQ(std::remove(a.c_str()), 0);
  auto f = kept.Open(*source, a);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound) << f.status();
  EXPECT_EQ(kept.kept_bytes(), 0u);  // its descriptor closed: the disk space is freed
}

// Files a range could not use are let go (Forget), and files the source
// cannot map are never kept; at most kMaxFiles are.
TEST(KeptMappingsTest, OnlyFilesThatMapAreKeptAndAtMostKMaxFiles) {
  TempDir dir;
  const std::string a = dir.path() + "/a";
  testing::WriteFile(a, std::string(4096, 'a'));
  internal::KeptMappings kept(uint64_t{1} << 30);
  auto source = LocalSource();
  auto a1 = *kept.Open(*source, a);
  kept.Forget(a);
  EXPECT_EQ(kept.kept_bytes(), 0u);
  auto a2 = *kept.Open(*source, a);
  EXPECT_NE(MapAddress(*a1), MapAddress(*a2));  // mapped anew, and kept again
  EXPECT_EQ(kept.kept_bytes(), 4096u);
  kept.Forget(a);

  testing::FaultSource unmappable(LocalSource());
  auto u = kept.Open(unmappable, a);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_FALSE((*u)->MapView().ok());
  EXPECT_EQ(kept.kept_bytes(), 0u);

  const size_t n = internal::KeptMappings::kMaxFiles + 4;
  for (size_t i = 0; i < n; ++i) {
    const std::string f = dir.path() + "/f" + std::to_string(i);
    testing::WriteFile(f, "12345678");
    ASSERT_TRUE(kept.Open(*source, f).ok());
  }
  EXPECT_EQ(kept.kept_bytes(), 8 * internal::KeptMappings::kMaxFiles);
}

TEST(KeptMappingsTest, AMissingFileIsTheSourcesError) {
  TempDir dir;
  internal::KeptMappings kept(uint64_t{1} << 20);
  auto f = kept.Open(*LocalSource(), dir.path() + "/none");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound) << f.status();
  EXPECT_NE(f.status().message().find(dir.path() + "/none"), std::string::npos) << f.status();
}

}  // namespace
}  // namespace shardstream
