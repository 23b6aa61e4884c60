// Uploader: background upload to a local-directory remote, the commit marker
// protocol, restore from the remote alone, the multipart path with parallel
// parts and per-part retries, and failures: a failing destination, transient
// errors, a slow one, the uploader destroyed or killed mid-upload. The remote
// must never present an incomplete checkpoint as complete.
#include "shardstream/uploader.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <thread>

#include "shardstream/checksum.h"
#include "shardstream/url.h"
#include "support/checkpoint_util.h"
#include "support/fault_source.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::CheckStepFiles;
using testing::FaultSource;
using testing::StepFiles;
using testing::WiredCheckpoints;
using testing::WireUploader;
namespace fs = std::filesystem;

// Every checkpoint the remote presents as committed is complete and right.
void ExpectRemoteHonest(const std::string& remote, size_t max_size = 4096) {
  auto committed = ListRemoteCheckpoints(*LocalSource(), remote);
  ASSERT_TRUE(committed.ok()) << committed.status();
  for (const auto& m : *committed) {
    std::string url = JoinUrl(remote, m.name);
    EXPECT_TRUE(VerifyCheckpoint(*LocalSource(), url, m).ok()) << m.name;
    EXPECT_EQ(CheckStepFiles(*LocalSource(), url, m, max_size), "") << m.name;
  }
}

TEST(UploaderTest, UploadsCommitsAndRestoresFromTheRemoteAlone) {
  testing::TempDir local, remote;
  {
    WiredCheckpoints p = WireUploader(local.path(), remote.path(), {});
    for (int step = 1; step <= 4; ++step) ASSERT_TRUE(p.writer->SaveFiles(step, StepFiles(step)).ok());
    ASSERT_TRUE(p.uploader->Wait(10000).ok());
    for (int step = 1; step <= 4; ++step) {
      auto st = p.uploader->StatusOf(CheckpointName(step));
      ASSERT_TRUE(st.has_value());
      EXPECT_EQ(st->state, UploadState::kDone);
      EXPECT_TRUE(fs::exists(remote.Join(CheckpointName(step) + "/COMMIT")));
    }
  }
  EXPECT_EQ(testing::ReadFile(remote.Join("latest")), "ckpt-000004\n");
  ExpectRemoteHonest(remote.path());
  auto listed = ListRemoteCheckpoints(*LocalSource(), remote.path());
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 4u);
  // Local rotation keeps two once uploads no longer hold older ones (whether
  // a save found step 1 still uploading depends on timing); the remote keeps all.
  {
    auto w = CheckpointWriter::Open(local.path(), CheckpointWriterOptions{nullptr, 2});
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->RotateNow().ok());
  }
  EXPECT_FALSE(fs::exists(local.Join("ckpt-000001")));
  EXPECT_FALSE(fs::exists(local.Join("ckpt-000002")));
  EXPECT_TRUE(fs::exists(local.Join("ckpt-000004")));

  fs::remove_all(local.path());
  auto w = CheckpointWriter::Open(local.path());
  ASSERT_TRUE(w.ok());
  RestoreOptions ro;
  ro.remote = remote.path();
  auto r = (*w)->RestoreLatest(ro);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->from_remote);
  EXPECT_EQ(r->manifest.step, 4);
  EXPECT_EQ(r->url, local.Join("ckpt-000004"));
  EXPECT_EQ(CheckStepFiles(*LocalSource(), r->url, r->manifest), "");
  EXPECT_EQ(testing::ReadFile(local.Join("latest")), "ckpt-000004\n");
  // Now local again.
  r = (*w)->RestoreLatest(ro);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->from_remote);
}

TEST(UploaderTest, RestoreSkipsUncommittedAndCorruptRemoteCheckpoints) {
  testing::TempDir local, remote;
  {
    WiredCheckpoints p = WireUploader(local.path(), remote.path(), {});
    for (int step = 1; step <= 3; ++step) ASSERT_TRUE(p.writer->SaveFiles(step, StepFiles(step)).ok());
    ASSERT_TRUE(p.uploader->Wait(10000).ok());
  }
  // Step 3: marker gone (as if the upload died before it); the hint still
  // names it and must not be trusted. Step 2: a file corrupted after commit.
  fs::remove(remote.Join("ckpt-000003/COMMIT"));
  std::string f = remote.Join("ckpt-000002/model.bin");
  std::string data = testing::ReadFile(f);
  data[0] ^= 1;
  testing::WriteFile(f, data);
  EXPECT_EQ(testing::ReadFile(remote.Join("latest")), "ckpt-000003\n");
  auto committed = ListRemoteCheckpoints(*LocalSource(), remote.path());
  ASSERT_TRUE(committed.ok());
  ASSERT_EQ(committed->size(), 2u);

  fs::remove_all(local.path());
  auto w = CheckpointWriter::Open(local.path());
  ASSERT_TRUE(w.ok());
  RestoreOptions ro;
  ro.remote = remote.path();
  auto r = (*w)->RestoreLatest(ro);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->manifest.step, 1);
  EXPECT_EQ(CheckStepFiles(*LocalSource(), r->url, r->manifest), "");
  ASSERT_EQ(r->skipped.size(), 2u);
  EXPECT_NE(r->skipped[0].find("ckpt-000003"), std::string::npos) << r->skipped[0];
  EXPECT_NE(r->skipped[0].find("no commit marker"), std::string::npos) << r->skipped[0];
  EXPECT_NE(r->skipped[1].find("ckpt-000002"), std::string::npos) << r->skipped[1];
  // A marker that does not match the manifest counts as no marker.
  testing::WriteFile(remote.Join("ckpt-000001/COMMIT"),
                     R"({"format":"shardstream-checkpoint-commit","name":"ckpt-000001","manifest_checksum":"xxh3_128:00000000000000000000000000000000"})");
  auto m = ReadRemoteCommitted(*LocalSource(), remote.path(), "ckpt-000001");
  EXPECT_EQ(m.status().code(), StatusCode::kCorrupt);
}

TEST(UploaderTest, FailingDestinationIsReportedRetriedAndKeepsTheLocalCopy) {
  testing::TempDir local, remote;
  auto dest = std::make_shared<FaultSource>(LocalSource());
  dest->FailNthErrno(FaultSource::Op::kAppend, 2, EIO, /*sticky=*/true);
  UploaderOptions uo;
  uo.remote_source = dest;
  uo.retry_initial_ms = 1;
  uo.retry_after_ms = 3600 * 1000;  // only RetryFailed() brings it back
  WiredCheckpoints p = WireUploader(local.path(), remote.path(), uo, /*keep_last=*/1);
  ASSERT_TRUE(p.writer->SaveFiles(1, StepFiles(1)).ok());
  Status s = p.uploader->Wait(10000);
  EXPECT_EQ(s.code(), StatusCode::kIo) << s;
  EXPECT_NE(s.ToString().find("ckpt-000001"), std::string::npos) << s;
  auto st = p.uploader->StatusOf("ckpt-000001");
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->state, UploadState::kFailed);
  EXPECT_NE(st->error.ToString().find("Input/output error"), std::string::npos);
  EXPECT_FALSE(fs::exists(remote.Join("ckpt-000001/COMMIT")));
  EXPECT_TRUE(ListRemoteCheckpoints(*LocalSource(), remote.path())->empty());
  // Rotation must keep the failed one for the retry.
  ASSERT_TRUE(p.writer->SaveFiles(2, StepFiles(2)).ok());
  EXPECT_TRUE(fs::exists(local.Join("ckpt-000001")));
  EXPECT_TRUE(p.uploader->InUse("ckpt-000001"));
  {
    auto m = ReadCheckpointManifest(*LocalSource(), local.Join("ckpt-000001"));
    ASSERT_TRUE(m.ok());
    EXPECT_TRUE(VerifyCheckpoint(*LocalSource(), local.Join("ckpt-000001"), *m).ok());
  }
  dest->ClearFaults();
  p.uploader->RetryFailed();
  ASSERT_TRUE(p.uploader->Wait(10000).ok());
  EXPECT_EQ(p.uploader->StatusOf("ckpt-000001")->state, UploadState::kDone);
  EXPECT_GE(p.uploader->StatusOf("ckpt-000001")->attempts, 2);
  ExpectRemoteHonest(remote.path());
  EXPECT_EQ(ListRemoteCheckpoints(*LocalSource(), remote.path())->size(), 2u);
  // The hint stays on the newest even though step 1 finished last.
  EXPECT_EQ(testing::ReadFile(remote.Join("latest")), "ckpt-000002\n");
  // Done: the next rotation may remove it.
  ASSERT_TRUE(p.writer->SaveFiles(3, StepFiles(3)).ok());
  EXPECT_FALSE(fs::exists(local.Join("ckpt-000001")));
}

TEST(UploaderTest, TransientErrorsAreRetriedPerFile) {
  testing::TempDir local, remote;
  auto dest = std::make_shared<FaultSource>(LocalSource());
  // The first try of each of three files fails, and one verification read.
  dest->FailNth(FaultSource::Op::kNewFile, 1, Status::Unavailable("injected 503"), false, "model");
  dest->FailNth(FaultSource::Op::kAppend, 1, Status::Unavailable("injected reset"), false, "optim");
  dest->FailNth(FaultSource::Op::kClose, 1, Status::Unavailable("injected 500"), false, "manifest");
  dest->FailNth(FaultSource::Op::kOpen, 1, Status::Unavailable("injected"), false, "data_state");
  UploaderOptions uo;
  uo.remote_source = dest;
  uo.retry_initial_ms = 1;
  WiredCheckpoints p = WireUploader(local.path(), remote.path(), uo);
  ASSERT_TRUE(p.writer->SaveFiles(1, StepFiles(1, 1 << 16)).ok());
  ASSERT_TRUE(p.uploader->Wait(10000).ok());
  EXPECT_EQ(p.uploader->StatusOf("ckpt-000001")->attempts, 1);
  ExpectRemoteHonest(remote.path(), 1 << 16);
  EXPECT_EQ(ListRemoteCheckpoints(*LocalSource(), remote.path())->size(), 1u);
}

TEST(UploaderTest, MultipartUploadsPartsInParallelWithPerPartRetries) {
  testing::TempDir local, remote;
  auto dest = std::make_shared<FaultSource>(LocalSource());
  // Three part writes fail once each (different parts, all retried).
  for (const char* part : {"part-00002", "part-00005", "part-00011"})
    dest->FailNth(FaultSource::Op::kNewFile, 1, Status::Unavailable("injected SlowDown"), false, part);
  UploaderOptions uo;
  uo.remote_source = dest;
  uo.multipart = NewSourceMultipartSink(dest, remote.path());
  uo.multipart_threshold = 100 << 10;
  uo.part_size = 64 << 10;
  uo.part_threads = 4;
  uo.retry_initial_ms = 1;
  WiredCheckpoints p = WireUploader(local.path(), remote.path(), uo);
  constexpr size_t kMax = 1 << 20;  // files up to 1 MiB: up to 16 parts
  ASSERT_TRUE(p.writer->SaveFiles(7, StepFiles(7, kMax)).ok());
  ASSERT_TRUE(p.uploader->Wait(20000).ok()) << p.uploader->StatusOf("ckpt-000007")->error;
  ExpectRemoteHonest(remote.path(), kMax);
  ASSERT_EQ(ListRemoteCheckpoints(*LocalSource(), remote.path())->size(), 1u);
  // Nothing left staged.
  EXPECT_TRUE(fs::is_empty(remote.Join(".multipart")));
  auto pending = uo.multipart->ListPending(remote.path());
  ASSERT_TRUE(pending.ok());
  EXPECT_TRUE(pending->empty());
}

TEST(UploaderTest, MultipartPartFailingForGoodAbortsTheUpload) {
  testing::TempDir local, remote;
  auto dest = std::make_shared<FaultSource>(LocalSource());
  dest->FailNth(FaultSource::Op::kNewFile, 1, Status::Unavailable("injected 503"), true,
                "part-00003");
  UploaderOptions uo;
  uo.remote_source = dest;
  uo.multipart = NewSourceMultipartSink(dest, remote.path());
  uo.multipart_threshold = 1;
  uo.part_size = 1024;
  uo.attempts = 3;
  uo.retry_initial_ms = 1;
  WiredCheckpoints p = WireUploader(local.path(), remote.path(), uo);
  ASSERT_TRUE(p.writer->SaveFiles(1, StepFiles(1, 8192)).ok());
  Status s = p.uploader->Wait(10000);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.ToString().find("part-00003"), std::string::npos) << s;
  EXPECT_FALSE(fs::exists(remote.Join("ckpt-000001/COMMIT")));
  EXPECT_TRUE(ListRemoteCheckpoints(*LocalSource(), remote.path())->empty());
  EXPECT_TRUE(uo.multipart->ListPending(remote.path())->empty());  // aborted
}

TEST(UploaderTest, DestroyedMidUploadNeverCommits) {
  testing::TempDir local, remote;
  auto dest = std::make_shared<FaultSource>(LocalSource());
  dest->SetDelayMicros(5000);  // slow destination: ~5 ms per call, 64 parts
  UploaderOptions uo;
  uo.remote_source = dest;
  uo.multipart = NewSourceMultipartSink(dest, remote.path());
  uo.multipart_threshold = 1;
  uo.part_size = 4096;
  uo.part_threads = 2;
  WiredCheckpoints p = WireUploader(local.path(), remote.path(), uo);
  ASSERT_TRUE(p.writer->SaveFiles(1, StepFiles(1, 1 << 18)).ok());
  // Wait (not a fixed sleep: a loaded machine may start the upload late)
  // until the upload is under way.
  std::optional<UploadStatus> st;
  for (int i = 0; i < 10000; ++i) {
    st = p.uploader->StatusOf("ckpt-000001");
    if (st && st->state != UploadState::kPending) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(st.has_value());
  ASSERT_EQ(st->state, UploadState::kUploading);
  auto t0 = std::chrono::steady_clock::now();
  p.uploader.reset();  // mid-upload
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));  // prompt
  EXPECT_FALSE(fs::exists(remote.Join("ckpt-000001/COMMIT")));
  dest->SetDelayMicros(0);
  EXPECT_TRUE(ListRemoteCheckpoints(*LocalSource(), remote.path())->empty());
  EXPECT_TRUE(uo.multipart->ListPending(remote.path())->empty());  // aborted on stop
  // A new uploader finishes the job.
  auto u = Uploader::Create(local.path(), remote.path(), uo);
  ASSERT_TRUE(u.ok());
  ASSERT_TRUE((*u)->UploadNow("ckpt-000001").ok());
  ExpectRemoteHonest(remote.path(), 1 << 18);
  EXPECT_EQ(ListRemoteCheckpoints(*LocalSource(), remote.path())->size(), 1u);
}

TEST(UploaderTest, KilledMidMultipartNeverCommitsAndStaleUploadsAreAborted) {
  testing::TempDir local, remote;
  {
    auto w = CheckpointWriter::Open(local.path());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->SaveFiles(1, StepFiles(1, 1 << 18)).ok());
  }
  UploaderOptions uo;
  uo.multipart = NewSourceMultipartSink(LocalSource(), remote.path());
  uo.multipart_threshold = 1;
  uo.part_size = 4096;
  for (int round = 0; round < 5; ++round) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto dest = std::make_shared<FaultSource>(LocalSource());
      dest->SetDelayMicros(1000);
      UploaderOptions co = uo;
      co.remote_source = dest;
      co.multipart = NewSourceMultipartSink(dest, remote.path());
      auto u = Uploader::Create(local.path(), remote.path(), co);
      if (!u.ok()) ::_exit(3);
      (void)(*u)->UploadNow("ckpt-000001");
      ::_exit(0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + 15 * round));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status));
    EXPECT_FALSE(fs::exists(remote.Join("ckpt-000001/COMMIT")));
    ExpectRemoteHonest(remote.path(), 1 << 18);
  }
  auto u = Uploader::Create(local.path(), remote.path(), uo);
  ASSERT_TRUE(u.ok());
  auto stale = uo.multipart->ListPending(remote.path());
  ASSERT_TRUE(stale.ok());
  EXPECT_GE(stale->size(), 1u);
  auto aborted = (*u)->AbortStaleUploads(0);
  ASSERT_TRUE(aborted.ok()) << aborted.status();
  EXPECT_EQ(*aborted, static_cast<int>(stale->size()));
  EXPECT_TRUE(uo.multipart->ListPending(remote.path())->empty());
  ASSERT_TRUE((*u)->UploadNow("ckpt-000001").ok());
  ExpectRemoteHonest(remote.path(), 1 << 18);
  EXPECT_EQ(ListRemoteCheckpoints(*LocalSource(), remote.path())->size(), 1u);
}

TEST(UploaderTest, ReuploadOfChangedContentRemovesTheOldMarkerFirst) {
  testing::TempDir local, remote;
  {
    WiredCheckpoints p = WireUploader(local.path(), remote.path(), {});
    ASSERT_TRUE(p.writer->SaveFiles(5, StepFiles(5)).ok());
    ASSERT_TRUE(p.uploader->Wait(10000).ok());
  }
  // The same step saved again with other content (after a restore from an
  // older one); its upload fails half-way.
  auto dest = std::make_shared<FaultSource>(LocalSource());
  dest->FailNthErrno(FaultSource::Op::kAppend, 1, EIO, true, "optim");
  UploaderOptions uo;
  uo.remote_source = dest;
  uo.attempts = 1;
  WiredCheckpoints p = WireUploader(local.path(), remote.path(), uo);
  ASSERT_TRUE(p.writer->SaveFiles(5, StepFiles(6)).ok());  // other content, same step
  EXPECT_FALSE(p.uploader->Wait(10000).ok());
  // The old marker is gone: the remote does not present the mix as step 5.
  auto committed = ListRemoteCheckpoints(*LocalSource(), remote.path());
  ASSERT_TRUE(committed.ok());
  EXPECT_TRUE(committed->empty());
}

// The checkpoint directories on a file:// remote.
std::vector<std::string> RemoteDirs(const std::string& remote) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(remote))
    if (ParseCheckpointName(e.path().filename().string())) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(UploaderTest, RemoteRotationKeepsTheNewestAndEveryMthStep) {
  testing::TempDir local, remote;
  UploaderOptions uo;
  uo.keep_last = 2;
  uo.keep_every_steps = 3;
  {
    WiredCheckpoints p = WireUploader(local.path(), remote.path(), uo);
    for (int step = 1; step <= 7; ++step) ASSERT_TRUE(p.writer->SaveFiles(step, StepFiles(step)).ok());
    ASSERT_TRUE(p.uploader->Wait(10000).ok());
  }
  // Whole directories go; the policy is the writer's: newest two, every third.
  EXPECT_EQ(RemoteDirs(remote.path()),
            (std::vector<std::string>{"ckpt-000003", "ckpt-000006", "ckpt-000007"}));
  EXPECT_EQ(testing::ReadFile(remote.Join("latest")), "ckpt-000007\n");
  ExpectRemoteHonest(remote.path());
  auto listed = ListRemoteCheckpoints(*LocalSource(), remote.path());
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 3u);

  // keep_last 0 (the default) keeps everything.
  testing::TempDir local2, remote2;
  {
    WiredCheckpoints p = WireUploader(local2.path(), remote2.path(), {});
    for (int step = 1; step <= 4; ++step) ASSERT_TRUE(p.writer->SaveFiles(step, StepFiles(step)).ok());
    ASSERT_TRUE(p.uploader->Wait(10000).ok());
  }
  EXPECT_EQ(RemoteDirs(remote2.path()).size(), 4u);
}

TEST(UploaderTest, RemoteRotationNeverDeletesWhatLatestNames) {
  testing::TempDir local, remote;
  {
    WiredCheckpoints p = WireUploader(local.path(), remote.path(), {}, 0);
    for (int step = 1; step <= 3; ++step) ASSERT_TRUE(p.writer->SaveFiles(step, StepFiles(step)).ok());
    ASSERT_TRUE(p.uploader->Wait(10000).ok());
  }
  // Someone pointed the hint back at step 1 (a rollback); this uploader does
  // not move it.
  testing::WriteFile(remote.Join("latest"), "ckpt-000001\n");
  UploaderOptions uo;
  uo.keep_last = 1;
  uo.write_latest_hint = false;
  WiredCheckpoints p = WireUploader(local.path(), remote.path(), uo, 0);
  ASSERT_TRUE(p.writer->SaveFiles(4, StepFiles(4)).ok());
  ASSERT_TRUE(p.uploader->Wait(10000).ok());
  EXPECT_EQ(RemoteDirs(remote.path()), (std::vector<std::string>{"ckpt-000001", "ckpt-000004"}));
  ExpectRemoteHonest(remote.path());
}

TEST(UploaderTest, RemoteRotationDeletesTheMarkerFirst) {
  testing::TempDir local, remote;
  auto dest = std::make_shared<FaultSource>(LocalSource());
  // Deleting step 1's files fails for good after its marker went.
  dest->FailNthErrno(FaultSource::Op::kRemove, 1, EIO, true, "ckpt-000001/model.bin");
  UploaderOptions uo;
  uo.remote_source = dest;
  uo.keep_last = 1;
  uo.attempts = 1;
  {
    WiredCheckpoints p = WireUploader(local.path(), remote.path(), uo, 0);
    for (int step = 1; step <= 2; ++step) ASSERT_TRUE(p.writer->SaveFiles(step, StepFiles(step)).ok());
    // Rotation failing is logged; the upload itself succeeded.
    ASSERT_TRUE(p.uploader->Wait(10000).ok());
  }
  // Half deleted: model.bin is still there, the marker is not, so the remote
  // does not present step 1 as complete and a restore takes step 2.
  EXPECT_TRUE(fs::exists(remote.Join("ckpt-000001/model.bin")));
  EXPECT_FALSE(fs::exists(remote.Join("ckpt-000001/COMMIT")));
  auto listed = ListRemoteCheckpoints(*LocalSource(), remote.path());
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name, "ckpt-000002");
  ExpectRemoteHonest(remote.path());
}

}  // namespace
}  // namespace shardstream
