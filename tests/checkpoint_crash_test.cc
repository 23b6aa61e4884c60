// Crash consistency of CheckpointWriter: simulated power loss after every
// file-system call of a save (FaultSource drops what was not synced), kill -9
// of a saving process at every durability step, and 500 kill -9 at random
// moments. After each: `latest` loads, is byte-identical to what was saved,
// and no partial checkpoint is visible.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <set>
#include <thread>

#include "shardstream/checkpoint.h"
#include "shardstream/url.h"
#include "support/checkpoint_util.h"
#include "support/fault_source.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::CheckStepFiles;
using testing::FaultSource;
using testing::StepFiles;

// Every visible checkpoint is complete; `latest`, if present, names one that
// is intact and byte-identical to what was saved. Returns latest's step (or
// -1) through *latest_step; failures are reported with `where`.
void ExpectConsistent(const std::string& dir, const std::string& where, int64_t* latest_step,
                      size_t max_size = 4096) {
  Source& src = *LocalSource();
  auto entries = src.List(dir);
  ASSERT_TRUE(entries.ok()) << entries.status();
  for (const auto& e : *entries) {
    if (!ParseCheckpointName(UrlBasename(e.url))) continue;
    auto m = ReadCheckpointManifest(src, e.url);
    ASSERT_TRUE(m.ok()) << where << ": partial checkpoint visible: " << m.status();
    ASSERT_EQ(CheckStepFiles(src, e.url, *m, max_size), "") << where << " " << e.url;
  }
  *latest_step = -1;
  auto latest = ReadLatestPointer(src, dir);
  if (!latest.ok()) {
    ASSERT_EQ(latest.status().code(), StatusCode::kNotFound) << where << ": " << latest.status();
    return;
  }
  std::string url = JoinUrl(dir, *latest);
  auto m = ReadCheckpointManifest(src, url);
  ASSERT_TRUE(m.ok()) << where << ": latest names a missing checkpoint: " << m.status();
  ASSERT_TRUE(VerifyCheckpoint(src, url, *m).ok()) << where;
  ASSERT_EQ(CheckStepFiles(src, url, *m, max_size), "") << where;
  *latest_step = m->step;
}

// Power loss after each mutating call of the third save (and right after it
// returned), dropping all unsynced directory entries, and also every "newer
// entries reached the disk, older ones did not" variant. Whatever happens, the
// restored checkpoint is the last one whose save returned OK, or the
// interrupted one if it got durable, and `latest` never dangles. Remove any
// directory fsync from the writer and this test fails.
TEST(CheckpointCrashTest, PowerLossAfterEveryFileSystemCall) {
  int64_t total = -1;
  int cases = 0;
  for (int64_t k = 0;; ++k) {
    for (int keep = 0;; ++keep) {
      testing::TempDir tmp;
      auto fault = std::make_shared<FaultSource>(LocalSource());
      fault->SetTracking(true);
      fault->SetForwardSyncs(false);
      CheckpointWriterOptions o;
      o.source = fault;
      o.keep_last = 1;  // rotation deletes step 2 in the same save
      Status saved3;
      {
        auto w = CheckpointWriter::Open(tmp.path(), o);
        ASSERT_TRUE(w.ok()) << w.status();
        ASSERT_TRUE((*w)->SaveFiles(1, StepFiles(1)).ok());
        ASSERT_TRUE((*w)->SaveFiles(2, StepFiles(2)).ok());
        int64_t before = fault->mutating_calls();
        if (total >= 0) fault->CrashAfter(k);
        saved3 = (*w)->SaveFiles(3, StepFiles(3)).status();
        if (total < 0) total = fault->mutating_calls() - before;
      }
      int pending = fault->pending_entries();
      ASSERT_TRUE(fault->DropUnsyncedData(keep).ok());
      ++cases;
      std::string where = "power loss after call " + std::to_string(k) + " of " +
                          std::to_string(total) + " keeping the newest " + std::to_string(keep) +
                          " of " + std::to_string(pending) + " pending entries (save " +
                          (saved3.ok() ? "ok" : "failed") + ")";
      int64_t latest = -1;
      ExpectConsistent(tmp.path(), where, &latest);
      if (saved3.ok()) {
        EXPECT_EQ(latest, 3) << where;
      } else {
        EXPECT_TRUE(latest == 2 || latest == 3) << where << ": latest " << latest;
      }
      auto w = CheckpointWriter::Open(tmp.path());
      ASSERT_TRUE(w.ok());
      auto r = (*w)->RestoreLatest();
      ASSERT_TRUE(r.ok()) << where << ": " << r.status();
      // Restore takes the newest intact one: `latest`, or the interrupted save
      // when it became durable before `latest` was replaced.
      EXPECT_TRUE(r->manifest.step == latest || r->manifest.step == 3) << where;
      EXPECT_EQ(CheckStepFiles(*LocalSource(), r->url, r->manifest), "") << where;
      if (::testing::Test::HasFailure() || keep >= pending) break;
    }
    if (::testing::Test::HasFailure() || k > total) break;  // k == total + 1: loss after the save
  }
  EXPECT_GT(total, 20);
  std::printf("%d power-loss cases\n", cases);
}

// kill -9 of a child at the k-th durability step of a save, for every k.
TEST(CheckpointCrashTest, KillAtEachDurabilityStep) {
  testing::TempDir tmp;
  std::set<std::string> points;
  int calls = 0;
  {
    CheckpointWriterOptions o;
    o.keep_last = 2;
    o.test_hook = [&](std::string_view p) { points.insert(std::string(p)); ++calls; };
    auto w = CheckpointWriter::Open(tmp.path(), o);
    ASSERT_TRUE(w.ok());
    for (int step = 1; step <= 3; ++step) {
      calls = 0;
      ASSERT_TRUE((*w)->SaveFiles(step, StepFiles(step)).ok());
    }
  }
  for (const char* p : {"mkdir", "file-sync", "manifest-sync", "dir-sync", "rename", "parent-sync",
                        "latest-sync", "latest-rename", "latest-dir-sync", "rotate",
                        "rotate-rename", "rotate-sync"})
    EXPECT_EQ(points.count(p), 1u) << p;
  int64_t step = 4;
  int64_t previous = 3;
  for (int k = 1; k <= calls; ++k, ++step) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int n = 0;
      CheckpointWriterOptions o;
      o.keep_last = 2;
      o.test_hook = [&](std::string_view) {
        if (++n == k) ::kill(::getpid(), SIGKILL);
      };
      auto w = CheckpointWriter::Open(tmp.path(), o);
      if (!w.ok()) ::_exit(3);
      (void)(*w)->SaveFiles(step, StepFiles(step));
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child was not killed at step " << k;
    int64_t latest = -1;
    ExpectConsistent(tmp.path(), "killed at durability step " + std::to_string(k), &latest);
    EXPECT_TRUE(latest == previous || latest == step) << k << ": " << latest;
    previous = latest;
  }
}

// A directory where kill -9 tests can fsync cheaply: a kill keeps the page
// cache, so durability is not what they test.
std::string FastDir() {
  struct stat st;
  if (::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && ::access("/dev/shm", W_OK) == 0)
    return "/dev/shm";
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

// A child that opens the directory, resumes after its latest checkpoint and
// saves `saves` more (forever when < 0), then exits.
pid_t ForkSaver(const std::string& dir, int saves, size_t max_size) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  CheckpointWriterOptions o;
  o.keep_last = 2;
  auto w = CheckpointWriter::Open(dir, o);
  if (!w.ok()) ::_exit(3);
  auto r = (*w)->RestoreLatest();
  int64_t step = r.ok() ? r->manifest.step + 1 : 1;
  for (int i = 0; saves < 0 || i < saves; ++i, ++step)
    if (!(*w)->SaveFiles(step, StepFiles(step, max_size)).ok()) ::_exit(4);
  ::_exit(0);
}

double ChildSeconds(const std::string& dir, int saves, size_t max_size) {
  auto t0 = std::chrono::steady_clock::now();
  pid_t pid = ForkSaver(dir, saves, max_size);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kKills = 100;  // fork and exit of a sanitized process are slow
#else
constexpr int kKills = 500;
#endif

TEST(CheckpointCrashTest, KillsAtRandomMoments) {
  std::string base = FastDir() + "/shardstream-kill-XXXXXX";
  ASSERT_NE(::mkdtemp(base.data()), nullptr);
  const std::string dir = base;
  constexpr size_t kMax = 2048;
  // Calibrate: how long a child takes to start, and to save once, so the
  // kills land anywhere from before the first save to a few saves in.
  double start_s = ChildSeconds(dir, 0, kMax);
  double save_s = std::max(1e-5, (ChildSeconds(dir, 20, kMax) - start_s) / 20);
  int window_us = static_cast<int>((start_s + 4 * save_s) * 1e6);
  int stalled = 0;  // kills in a row that found no new checkpoint
  std::mt19937 rng(12345);
  int64_t previous = -1;
  ExpectConsistent(dir, "calibration", &previous, kMax);
  int progressed = 0;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kKills; ++i) {
    pid_t pid = ForkSaver(dir, -1, kMax);
    ASSERT_GE(pid, 0);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % window_us));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited by itself: " << status;
    int64_t latest = -1;
    ExpectConsistent(dir, "kill " + std::to_string(i), &latest, kMax);
    if (::testing::Test::HasFatalFailure()) break;
    ASSERT_GE(latest, previous) << "latest went backwards at kill " << i;
    if (latest > previous) {
      ++progressed;
      stalled = 0;
    } else if (++stalled == 8) {
      // The calibration underestimated this process's pace (a sanitized
      // fork, a loaded machine): widen the window so kills reach the saves.
      window_us *= 2;
      stalled = 0;
    }
    previous = latest;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%d kills in %.1f s (window %d us), latest advanced in %d of them, last step %lld\n",
              kKills, secs, window_us, progressed, static_cast<long long>(previous));
  EXPECT_GT(progressed, kKills / 10);  // the kills landed all over the saves
  testing::RunCommand("rm -rf '" + dir + "'");
}

}  // namespace
}  // namespace shardstream
