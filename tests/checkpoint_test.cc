// CheckpointWriter: round trip, rotation, the lock, failures (ENOSPC, EIO),
// corrupt and incomplete checkpoints, and the `shardstream ckpt` tool.
#include "shardstream/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "shardstream/checksum.h"
#include "support/checkpoint_util.h"
#include "support/fault_source.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::CheckStepFiles;
using testing::FaultSource;
using testing::StepFiles;
namespace fs = std::filesystem;

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

std::unique_ptr<CheckpointWriter> OpenOrDie(const std::string& dir,
                                            CheckpointWriterOptions o = {}) {
  auto w = CheckpointWriter::Open(dir, std::move(o));
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? std::move(*w) : nullptr;
}

TEST(CheckpointWriterTest, StreamedSaveRoundTrips) {
  testing::TempDir tmp;
  auto w = OpenOrDie(tmp.path());
  auto save = w->BeginSave(200, R"({"epoch": 3, "lr": 0.1})");
  ASSERT_TRUE(save.ok()) << save.status();
  std::string big;
  ASSERT_TRUE((*save)->OpenFile("model.bin").ok());
  for (int i = 0; i < 48; ++i) {  // 3 MiB in 64 KiB pieces
    std::string chunk(64 << 10, static_cast<char>('a' + i % 26));
    big += chunk;
    ASSERT_TRUE((*save)->Append(chunk).ok());
  }
  ASSERT_TRUE((*save)->OpenFile("empty").ok());
  auto m = (*save)->Commit();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->name, "ckpt-000200");
  ASSERT_EQ(m->files.size(), 2u);
  EXPECT_EQ(m->files[0].size, big.size());
  EXPECT_EQ(m->files[0].checksum, ChecksumOf(big));
  EXPECT_EQ(m->files[1].size, 0u);
  EXPECT_EQ(testing::ReadFile(tmp.Join("latest")), "ckpt-000200\n");
  EXPECT_EQ(testing::ReadFile(tmp.Join("ckpt-000200/model.bin")), big);
  EXPECT_EQ(Names(tmp.path()), (std::vector<std::string>{"LOCK", "ckpt-000200", "latest"}));

  auto r = w->RestoreLatest();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->manifest.step, 200);
  EXPECT_EQ(r->manifest.metadata_json, R"({"epoch":3,"lr":0.1})");
  EXPECT_FALSE(r->from_remote);
  EXPECT_TRUE(r->skipped.empty());
  auto listed = ListCheckpoints(*LocalSource(), tmp.path());
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(FormatCheckpointManifest((*listed)[0]), FormatCheckpointManifest(*m));
}

TEST(CheckpointWriterTest, ManifestFormatRoundTripsAndRejectsGarbage) {
  CheckpointManifest m;
  m.step = 1234567;
  m.name = CheckpointName(m.step);
  m.files = {{"a", 3, ChecksumOf("abc")}};
  m.metadata_json = R"({"k":[1,2]})";
  auto back = ParseCheckpointManifest(FormatCheckpointManifest(m), "x/manifest.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(FormatCheckpointManifest(*back), FormatCheckpointManifest(m));
  EXPECT_EQ(CheckpointName(7), "ckpt-000007");
  EXPECT_EQ(ParseCheckpointName("ckpt-000007"), 7);
  EXPECT_FALSE(ParseCheckpointName("ckpt-7"));
  EXPECT_FALSE(ParseCheckpointName(".tmp-ckpt-000007-ab"));
  auto bad = ParseCheckpointManifest("{\"format\": \"shardstream-checkpoint\"", "d/manifest.json");
  EXPECT_EQ(bad.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(bad.status().message().find("d/manifest.json"), std::string::npos);
}

TEST(CheckpointWriterTest, BadArgumentsAreConfigErrors) {
  testing::TempDir tmp;
  auto w = OpenOrDie(tmp.path());
  EXPECT_EQ(w->BeginSave(1, "[1]").status().code(), StatusCode::kConfig);
  auto save = w->BeginSave(1);
  ASSERT_TRUE(save.ok());
  EXPECT_EQ(w->BeginSave(2).status().code(), StatusCode::kConfig);  // one save at a time
  for (const char* bad : {"a/b", ".hidden", "manifest.json", ""})
    EXPECT_EQ((*save)->OpenFile(bad).code(), StatusCode::kConfig) << bad;
  ASSERT_TRUE((*save)->OpenFile("x").ok());
  EXPECT_EQ((*save)->OpenFile("x").code(), StatusCode::kConfig);
  save->reset();  // abandoned: temporaries removed, a new save may start
  EXPECT_EQ(Names(tmp.path()), (std::vector<std::string>{"LOCK"}));
  EXPECT_TRUE(w->SaveFiles(2, StepFiles(2)).ok());
}

TEST(CheckpointWriterTest, RotationKeepsLastNEveryMthLatestAndInUse) {
  testing::TempDir tmp;
  CheckpointWriterOptions o;
  o.keep_last = 2;
  o.keep_every_steps = 5;
  o.in_use = [](const std::string& name) { return name == "ckpt-000003"; };
  auto w = OpenOrDie(tmp.path(), o);
  for (int step = 1; step <= 12; ++step) ASSERT_TRUE(w->SaveFiles(step, StepFiles(step)).ok());
  EXPECT_EQ(Names(tmp.path()),
            (std::vector<std::string>{"LOCK", "ckpt-000003", "ckpt-000005", "ckpt-000010",
                                      "ckpt-000011", "ckpt-000012", "latest"}));
  // Saving an older step after a restore: `latest` names it and rotation keeps it.
  ASSERT_TRUE(w->SaveFiles(4, StepFiles(4)).ok());
  EXPECT_EQ(testing::ReadFile(tmp.Join("latest")), "ckpt-000004\n");
  EXPECT_TRUE(fs::exists(tmp.Join("ckpt-000004")));
}

TEST(CheckpointReadPinTest, RotationKeepsAPinnedCheckpointUntilTheReaderLetsGo) {
  testing::TempDir tmp;
  CheckpointWriterOptions o;
  o.keep_last = 1;
  auto w = OpenOrDie(tmp.path(), o);
  ASSERT_TRUE(w->SaveFiles(1, StepFiles(1)).ok());
  auto pin = CheckpointReadPin::Acquire(tmp.Join("ckpt-000001"));
  ASSERT_TRUE(pin.ok()) << pin.status();
  EXPECT_TRUE(pin->held());
  // A reader in another process pins ckpt-000002 and waits for a byte.
  ASSERT_TRUE(w->SaveFiles(2, StepFiles(2)).ok());
  EXPECT_TRUE(fs::exists(tmp.Join("ckpt-000001")));  // pinned here: kept
  int go[2], ready[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(ready), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    pin->Release();  // the parent's pin (a shared open file) is the parent's
    auto p = CheckpointReadPin::Acquire(tmp.Join("ckpt-000002"));
    char c = p.ok() ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    (void)!::read(go[0], &c, 1);
    auto m = ReadCheckpointManifest(*DefaultSource(), tmp.Join("ckpt-000002"));
    ::_exit(m.ok() && CheckStepFiles(*DefaultSource(), tmp.Join("ckpt-000002"), *m).empty() ? 0
                                                                                            : 1);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  ASSERT_TRUE(w->SaveFiles(3, StepFiles(3)).ok());
  EXPECT_TRUE(fs::exists(tmp.Join("ckpt-000001")));
  EXPECT_TRUE(fs::exists(tmp.Join("ckpt-000002")));  // pinned by the child
  pin->Release();
  ASSERT_TRUE(w->RotateNow().ok());
  EXPECT_FALSE(fs::exists(tmp.Join("ckpt-000001")));  // released: rotated now
  EXPECT_TRUE(fs::exists(tmp.Join("ckpt-000002")));
  ASSERT_EQ(::write(go[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);  // read it whole
  ASSERT_TRUE(w->RotateNow().ok());  // the child is gone with its pin
  EXPECT_EQ(Names(tmp.path()), (std::vector<std::string>{"LOCK", "ckpt-000003", "latest"}));
  // A rotated checkpoint cannot be pinned; a remote one pins nothing.
  auto gone = CheckpointReadPin::Acquire(tmp.Join("ckpt-000001"));
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound) << gone.status();
  EXPECT_NE(gone.status().message().find("ckpt-000001"), std::string::npos);
  auto remote = CheckpointReadPin::Acquire("mem://x/ckpt-000001");
  ASSERT_TRUE(remote.ok());
  EXPECT_FALSE(remote->held());
}

TEST(CheckpointWriterTest, SecondWriterIsRefusedAlsoFromAnotherProcess) {
  testing::TempDir tmp;
  auto w = OpenOrDie(tmp.path());
  auto second = CheckpointWriter::Open(tmp.path());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("in use by another writer"), std::string::npos);
  pid_t pid = ::fork();
  if (pid == 0) {
    auto other = CheckpointWriter::Open(tmp.path());
    ::_exit(!other.ok() && other.status().code() == StatusCode::kUnavailable ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  w.reset();
  EXPECT_TRUE(CheckpointWriter::Open(tmp.path()).ok());
}

TEST(CheckpointWriterTest, LeftoversOfAnInterruptedSaveAreRemovedOnOpen) {
  testing::TempDir tmp;
  { ASSERT_TRUE(OpenOrDie(tmp.path())->SaveFiles(1, StepFiles(1)).ok()); }
  fs::create_directory(tmp.Join(".tmp-ckpt-000002-abc"));
  testing::WriteFile(tmp.Join(".tmp-ckpt-000002-abc/model.bin"), "partial");
  fs::create_directory(tmp.Join(".trash-ckpt-000000-abc"));
  testing::WriteFile(tmp.Join(".latest.tmp"), "ckpt-0");
  auto w = OpenOrDie(tmp.path());
  EXPECT_EQ(Names(tmp.path()), (std::vector<std::string>{"LOCK", "ckpt-000001", "latest"}));
}

class CheckpointFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fault_ = std::make_shared<FaultSource>(LocalSource());
    CheckpointWriterOptions o;
    o.source = fault_;
    o.keep_last = 1;
    writer_ = OpenOrDie(dir_.path(), o);
    ASSERT_TRUE(writer_->SaveFiles(1, StepFiles(1)).ok());
  }
  // The save failed cleanly: no temporaries, latest and step 1 untouched.
  void ExpectCleanFailure(const Status& s, const std::string& needle) {
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.ToString().find(needle), std::string::npos) << s;
    EXPECT_NE(s.ToString().find("ckpt-000002"), std::string::npos) << s;
    EXPECT_EQ(Names(dir_.path()), (std::vector<std::string>{"LOCK", "ckpt-000001", "latest"}));
    EXPECT_EQ(testing::ReadFile(dir_.Join("latest")), "ckpt-000001\n");
    auto r = writer_->RestoreLatest();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(CheckStepFiles(*LocalSource(), r->url, r->manifest), "");
    // And the next save works.
    fault_->ClearFaults();
    EXPECT_TRUE(writer_->SaveFiles(3, StepFiles(3)).ok());
  }
  testing::TempDir dir_;
  std::shared_ptr<FaultSource> fault_;
  std::unique_ptr<CheckpointWriter> writer_;
};

TEST_F(CheckpointFaultTest, NoSpaceFailsTheSave) {
  fault_->SetSpaceLimit(5000);
  auto m = writer_->SaveFiles(2, StepFiles(2, 1 << 16));
  EXPECT_EQ(m.status().code(), StatusCode::kIo);
  ExpectCleanFailure(m.status(), "No space left on device");
}

TEST_F(CheckpointFaultTest, EioOnFileSyncFailsTheSave) {
  fault_->FailNthErrno(FaultSource::Op::kSync, 2, EIO);
  ExpectCleanFailure(writer_->SaveFiles(2, StepFiles(2)).status(), "Input/output error");
}

TEST_F(CheckpointFaultTest, EioOnDirectorySyncFailsTheSave) {
  fault_->FailNthErrno(FaultSource::Op::kSyncDir, 1, EIO);
  ExpectCleanFailure(writer_->SaveFiles(2, StepFiles(2)).status(), "Input/output error");
}

TEST_F(CheckpointFaultTest, EioOnParentSyncWithdrawsThePublishedDirectory) {
  fault_->FailNthErrno(FaultSource::Op::kSyncDir, 2, EIO);
  ExpectCleanFailure(writer_->SaveFiles(2, StepFiles(2)).status(), "Input/output error");
}

TEST_F(CheckpointFaultTest, FailedRenameFailsTheSave) {
  fault_->FailNthErrno(FaultSource::Op::kRename, 1, EIO);
  ExpectCleanFailure(writer_->SaveFiles(2, StepFiles(2)).status(), "Input/output error");
}

TEST_F(CheckpointFaultTest, FailedLatestWriteLeavesLatestUntouched) {
  fault_->FailNthErrno(FaultSource::Op::kNewFile, 1, ENOSPC, false, ".latest.tmp");
  auto m = writer_->SaveFiles(2, StepFiles(2));
  EXPECT_FALSE(m.ok());
  EXPECT_NE(m.status().ToString().find("is saved but"), std::string::npos) << m.status();
  EXPECT_EQ(testing::ReadFile(dir_.Join("latest")), "ckpt-000001\n");
  EXPECT_TRUE(fs::exists(dir_.Join("ckpt-000001")));  // rotation did not run
}

TEST(CheckpointRestoreTest, CorruptOrIncompleteNewestFallsBackToThePrevious) {
  testing::TempDir tmp;
  auto w = OpenOrDie(tmp.path());
  for (int step = 1; step <= 3; ++step) ASSERT_TRUE(w->SaveFiles(step, StepFiles(step)).ok());
  // Newest: one byte flipped. Next: manifest missing.
  std::string f = tmp.Join("ckpt-000003/model.bin");
  std::string data = testing::ReadFile(f);
  ASSERT_FALSE(data.empty());
  data[data.size() / 2] ^= 0x40;
  testing::WriteFile(f, data);
  fs::remove(tmp.Join("ckpt-000002/manifest.json"));
  auto r = w->RestoreLatest();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->manifest.step, 1);
  EXPECT_EQ(CheckStepFiles(*LocalSource(), r->url, r->manifest), "");
  ASSERT_EQ(r->skipped.size(), 2u);
  EXPECT_NE(r->skipped[0].find("ckpt-000003"), std::string::npos);
  EXPECT_NE(r->skipped[0].find("checksum"), std::string::npos);
  EXPECT_NE(r->skipped[1].find("ckpt-000002"), std::string::npos);
  // Verification names the file.
  auto m3 = ReadCheckpointManifest(*LocalSource(), tmp.Join("ckpt-000003"));
  ASSERT_TRUE(m3.ok());
  Status v = VerifyCheckpoint(*LocalSource(), tmp.Join("ckpt-000003"), *m3);
  EXPECT_EQ(v.code(), StatusCode::kChecksum);
  EXPECT_NE(v.message().find("model.bin"), std::string::npos);
  // Saving step 3 again replaces the corrupt copy.
  ASSERT_TRUE(w->SaveFiles(3, StepFiles(3)).ok());
  r = w->RestoreLatest();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->manifest.step, 3);
  EXPECT_EQ(CheckStepFiles(*LocalSource(), r->url, r->manifest), "");
}

TEST(CheckpointRestoreTest, NothingIntactIsNotFound) {
  testing::TempDir tmp;
  auto w = OpenOrDie(tmp.path());
  EXPECT_EQ(w->RestoreLatest().status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace shardstream
