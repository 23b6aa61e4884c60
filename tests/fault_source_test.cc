// The FaultSource test double itself: injected failures and the power-loss
// model other tests rely on.
#include "support/fault_source.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>

#include "support/test_util.h"

namespace shardstream::testing {
namespace {

namespace fs = std::filesystem;

Status Write(Source& s, const std::string& url, std::string_view data, bool sync) {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto f, s.NewWritableFile(url));
  SHARDSTREAM_RETURN_IF_ERROR(f->Append(data));
  if (sync) SHARDSTREAM_RETURN_IF_ERROR(f->Sync());
  return f->Close();
}

TEST(FaultSourceTest, FailsTheNthCallOnceOrStickily) {
  TempDir dir;
  FaultSource fs(LocalSource());
  fs.FailNthErrno(FaultSource::Op::kSync, 2, EIO);
  fs.FailNthErrno(FaultSource::Op::kRename, 1, ENOSPC, /*sticky=*/true, "b.");
  EXPECT_TRUE(Write(fs, dir.Join("a"), "x", true).ok());
  Status s = Write(fs, dir.Join("a"), "x", true);
  EXPECT_EQ(s.code(), StatusCode::kIo);
  EXPECT_NE(s.ToString().find("Input/output error"), std::string::npos);
  EXPECT_TRUE(Write(fs, dir.Join("a"), "x", true).ok());  // once only
  EXPECT_TRUE(fs.Rename(dir.Join("a"), dir.Join("c")).ok());  // filtered out
  EXPECT_FALSE(fs.Rename(dir.Join("c"), dir.Join("b.1")).ok());
  EXPECT_FALSE(fs.Rename(dir.Join("c"), dir.Join("b.2")).ok());  // sticky
}

TEST(FaultSourceTest, SpaceLimitAndCrash) {
  TempDir dir;
  FaultSource fs(LocalSource());
  fs.SetSpaceLimit(10);
  EXPECT_TRUE(Write(fs, dir.Join("a"), "12345", false).ok());
  Status s = Write(fs, dir.Join("b"), "1234567890", false);
  EXPECT_NE(s.ToString().find("No space left on device"), std::string::npos) << s;
  fs.ClearFaults();
  fs.CrashAfter(2);  // new file, append succeed; close fails; so does everything after
  EXPECT_FALSE(Write(fs, dir.Join("c"), "x", false).ok());
  EXPECT_TRUE(fs.crashed());
  EXPECT_FALSE(fs.Stat(dir.Join("a")).ok());
}

TEST(FaultSourceTest, PowerLossDropsUnsyncedBytesAndEntries) {
  TempDir dir;
  ASSERT_TRUE(WriteFileAtomic(*LocalSource(), dir.Join("old"), "old content").ok());
  FaultSource fs(LocalSource());
  fs.SetTracking(true);
  // Synced file in a synced directory: survives.
  ASSERT_TRUE(Write(fs, dir.Join("kept"), "durable", true).ok());
  ASSERT_TRUE(fs.SyncDir(dir.path()).ok());
  // Appended after the sync: the tail is lost.
  {
    auto f = fs.NewWritableFile(dir.Join("kept"));  // truncates: 0 synced bytes
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Append("dur").ok());
    ASSERT_TRUE((*f)->Sync().ok());
    ASSERT_TRUE((*f)->Append("able and more").ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  // Synced file, directory never synced: gone.
  ASSERT_TRUE(Write(fs, dir.Join("lost"), "data", true).ok());
  // A rename over "old" not made durable: undone, old content back.
  ASSERT_TRUE(Write(fs, dir.Join("new"), "new content", true).ok());
  ASSERT_TRUE(fs.Rename(dir.Join("new"), dir.Join("old")).ok());
  // A directory made, a file synced in it and its entry synced, but the
  // directory's own entry never synced: all gone.
  ASSERT_TRUE(fs.CreateDir(dir.Join("sub")).ok());
  ASSERT_TRUE(Write(fs, dir.Join("sub/f"), "x", true).ok());
  ASSERT_TRUE(fs.SyncDir(dir.Join("sub")).ok());
  EXPECT_GT(fs.pending_entries(), 0);
  ASSERT_TRUE(fs.DropUnsyncedData().ok());
  EXPECT_EQ(ReadFile(dir.Join("kept")), "dur");
  EXPECT_FALSE(fs::exists(dir.Join("lost")));
  EXPECT_FALSE(fs::exists(dir.Join("new")));
  EXPECT_EQ(ReadFile(dir.Join("old")), "old content");
  EXPECT_FALSE(fs::exists(dir.Join("sub")));
}

TEST(FaultSourceTest, DirectoryRenameCarriesPendingEntries) {
  TempDir dir;
  FaultSource fs(LocalSource());
  fs.SetTracking(true);
  ASSERT_TRUE(fs.CreateDir(dir.Join("tmp")).ok());
  ASSERT_TRUE(Write(fs, dir.Join("tmp/f"), "x", true).ok());
  // tmp's entries never synced; the rename and the mkdir are.
  ASSERT_TRUE(fs.Rename(dir.Join("tmp"), dir.Join("final")).ok());
  ASSERT_TRUE(fs.SyncDir(dir.path()).ok());
  ASSERT_TRUE(fs.DropUnsyncedData().ok());
  EXPECT_TRUE(fs::is_directory(dir.Join("final")));
  EXPECT_FALSE(fs::exists(dir.Join("final/f")));  // the file entry was lost
}

}  // namespace
}  // namespace shardstream::testing
