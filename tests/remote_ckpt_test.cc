// Checkpoints to real remotes: s3:// through moto with authentication
// enforced (multipart above the part size with parallel parts, the files
// read back from the remote alone, wrong secret, missing checkpoint, uploader killed
// mid-multipart, `shardstream ckpt push`), and http(s):// PUT through our
// fault-injecting server (5xx, SlowDown, dropped connections, server killed).
// Whatever fails, the remote never presents an incomplete checkpoint as
// complete.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "shardstream/checkpoint.h"
#include "shardstream/http_source.h"
#include "shardstream/s3.h"
#include "shardstream/uploader.h"
#include "shardstream/url.h"
#include "support/checkpoint_util.h"
#include "support/http_server.h"
#include "support/test_util.h"

namespace shardstream::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// A checkpoint with one file above the multipart part size and a small one.
std::vector<std::pair<std::string, std::string>> BigFiles(int64_t step, size_t big) {
  return {{"model.bin", RandomBytes(big, static_cast<uint32_t>(step))},
          {"meta.json", "{\"step\": " + std::to_string(step) + "}"}};
}

class RemoteS3CheckpointTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kPart = 5 << 20;  // S3's (and moto's) smallest part

  static void SetUpTestSuite() {
    moto_ = new MotoServer();
    auto client = S3Client::Make(Options());
    ASSERT_TRUE(client.ok()) << client.status();
    ASSERT_TRUE((*client)->CreateBucket("ckpt").ok());
  }
  static void TearDownTestSuite() {
    delete moto_;
    moto_ = nullptr;
  }
  // The uploader and the CLI take credentials from the environment.
  void SetUp() override { SetEnvironment(moto_->secret_key()); }
  void TearDown() override {
    for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_S3",
                          "AWS_REGION"})
      ::unsetenv(v);
  }
  static void SetEnvironment(const std::string& secret) {
    ::setenv("AWS_ACCESS_KEY_ID", moto_->access_key().c_str(), 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", secret.c_str(), 1);
    ::setenv("AWS_ENDPOINT_URL_S3", moto_->endpoint().c_str(), 1);
    ::setenv("AWS_REGION", "us-east-1", 1);
  }
  static S3Options Options() {
    S3Options o;
    o.endpoint = moto_->endpoint();
    o.region = "us-east-1";
    o.access_key = moto_->access_key();
    o.secret_key = moto_->secret_key();
    o.http.initial_backoff_s = 0.001;
    o.http.max_retries = 2;
    return o;
  }
  static std::shared_ptr<S3Client> Client() { return *S3Client::Make(Options()); }
  static UploaderOptions Multipart() {
    UploaderOptions o;
    o.multipart_threshold = kPart;
    o.part_size = kPart;
    o.part_threads = 3;
    o.retry_initial_ms = 1;
    return o;
  }
  static MotoServer* moto_;
};
MotoServer* RemoteS3CheckpointTest::moto_ = nullptr;

TEST_F(RemoteS3CheckpointTest, MultipartUploadAndReadBackFromTheRemoteAlone) {
  TempDir local;
  const std::string remote = "s3://ckpt/run1";
  auto files = BigFiles(7, 2 * kPart + 12345);  // three parts
  {
    auto w = CheckpointWriter::Open(local.path());
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->SaveFiles(7, files).ok());
    auto u = Uploader::Create(local.path(), remote, Multipart());
    ASSERT_TRUE(u.ok()) << u.status();
    (*u)->Enqueue(CheckpointName(7));
    ASSERT_TRUE((*u)->Wait(60000).ok()) << (*u)->StatusOf(CheckpointName(7))->error;
  }
  auto head = Client()->Head(remote + "/" + CheckpointName(7) + "/model.bin");
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_NE(head->etag.find("-3"), std::string::npos) << "not a 3-part upload: " << head->etag;
  auto pending = Client()->ListMultipartUploads("s3://ckpt/");
  ASSERT_TRUE(pending.ok());
  EXPECT_TRUE(pending->empty());
  auto committed = ReadRemoteCommitted(*DefaultSource(), remote, CheckpointName(7));
  ASSERT_TRUE(committed.ok()) << committed.status();
  EXPECT_TRUE(VerifyCheckpoint(*DefaultSource(), JoinUrl(remote, CheckpointName(7)), *committed).ok());

  // The instance is gone; only the remote is left: download and verify.
  fs::remove_all(local.path());
  fs::create_directories(local.path());
  for (const auto& [name, data] : files) {
    auto got = ReadFileToString(*DefaultSource(), remote + "/" + CheckpointName(7) + "/" + name);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == data) << name;
  }
}

TEST_F(RemoteS3CheckpointTest, WrongSecretIsAClearAuthErrorAndMissingIsNotFound) {
  TempDir local;
  auto w = CheckpointWriter::Open(local.path());
  ASSERT_TRUE((*w)->SaveFiles(1, StepFiles(1)).ok());
  SetEnvironment("not-the-secret");
  auto u = Uploader::Create(local.path(), "s3://ckpt/denied", {});
  ASSERT_TRUE(u.ok()) << u.status();
  Status s = (*u)->UploadNow(CheckpointName(1));
  EXPECT_EQ(s.code(), StatusCode::kAuth) << s;
  EXPECT_EQ(s.ToString().find("not-the-secret"), std::string::npos) << s;
  SetEnvironment(moto_->secret_key());
  auto missing = ReadRemoteCommitted(*DefaultSource(), "s3://ckpt/denied", CheckpointName(1));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status();
  auto object = ReadFileToString(*DefaultSource(), "s3://ckpt/nothing-here/latest");
  EXPECT_EQ(object.status().code(), StatusCode::kNotFound) << object.status();
}

TEST_F(RemoteS3CheckpointTest, UploaderKilledMidMultipartLeavesNothingCommitted) {
  TempDir local;
  const std::string remote = "s3://ckpt/killed";
  auto w = CheckpointWriter::Open(local.path());
  auto files = BigFiles(3, 6 * kPart);
  ASSERT_TRUE((*w)->SaveFiles(3, files).ok());
  auto client = Client();
  bool seen_pending = false;
  {
    ChildProcess push({CliPath(), "ckpt", "push", local.path(), remote, "--multipart-threshold",
                       std::to_string(kPart), "--part-size", std::to_string(kPart),
                       "--part-threads", "1"});
    for (auto deadline = Clock::now() + std::chrono::seconds(20);
         !seen_pending && Clock::now() < deadline;) {
      auto p = client->ListMultipartUploads("s3://ckpt/");
      seen_pending = p.ok() && !p->empty();
      if (!seen_pending) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ::kill(push.pid(), SIGKILL);
  }
  ASSERT_TRUE(seen_pending) << "the push never started a multipart upload";
  // Killed mid-multipart: nothing committed (or, had it finished, complete).
  auto early = ReadRemoteCommitted(*DefaultSource(), remote, CheckpointName(3));
  if (early.ok()) {
    EXPECT_TRUE(VerifyCheckpoint(*DefaultSource(), JoinUrl(remote, early->name), *early).ok());
  } else {
    EXPECT_EQ(early.status().code(), StatusCode::kNotFound) << early.status();
  }

  // The next push aborts the stale upload, then commits the checkpoint.
  std::string out;
  ASSERT_EQ(RunCommand(CliPath() + " ckpt push --abort-stale-after 0 --multipart-threshold " +
                           std::to_string(kPart) + " --part-size " + std::to_string(kPart) + " " +
                           local.path() + " " + remote + " 2>&1", &out), 0) << out;
  auto pending = client->ListMultipartUploads("s3://ckpt/");
  ASSERT_TRUE(pending.ok());
  EXPECT_TRUE(pending->empty()) << pending->size() << " uploads left";
  auto m = ReadRemoteCommitted(*DefaultSource(), remote, CheckpointName(3));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(VerifyCheckpoint(*DefaultSource(), JoinUrl(remote, m->name), *m).ok());
}

// Every key under an s3 prefix url, relative to it.
std::vector<std::string> Keys(S3Client& client, const std::string& prefix) {
  auto all = client.List(prefix + "/", true);
  EXPECT_TRUE(all.ok()) << all.status();
  std::vector<std::string> out;
  if (all.ok())
    for (const auto& f : *all) out.push_back(f.url.substr(prefix.size() + 1));
  return out;
}

TEST_F(RemoteS3CheckpointTest, RestoreFromTheRemoteAloneSkipsUncommittedAndCorrupt) {
  TempDir local;
  // A nested remote: its listing needs '/' in the prefix, which moto only
  // takes without it (the client lists wider and groups keys itself).
  const std::string remote = "s3://ckpt/runs/restore";
  {
    WiredCheckpoints p = WireUploader(local.path(), remote, {});
    for (int step = 1; step <= 4; ++step)
      ASSERT_TRUE(p.writer->SaveFiles(step, StepFiles(step, 100000)).ok());
    ASSERT_TRUE(p.uploader->Wait(60000).ok());
  }
  // Pages of two keys: the listing crosses many continuation tokens.
  S3Options small = Options();
  small.list_page_size = 2;
  std::shared_ptr<Source> paged = NewS3Source(*S3Client::Make(small));
  auto committed = ListRemoteCheckpoints(*paged, remote);
  ASSERT_TRUE(committed.ok()) << committed.status();
  ASSERT_EQ(committed->size(), 4u);
  EXPECT_EQ((*committed)[0].name, CheckpointName(1));
  EXPECT_EQ((*committed)[3].name, CheckpointName(4));

  // The instance is gone; only the remote is left.
  fs::remove_all(local.path());
  {
    auto w = CheckpointWriter::Open(local.path());
    ASSERT_TRUE(w.ok()) << w.status();
    RestoreOptions ro;
    ro.remote = remote;
    ro.remote_source = paged;
    auto r = (*w)->RestoreLatest(ro);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->from_remote);
    EXPECT_EQ(r->manifest.step, 4);
    EXPECT_TRUE(r->skipped.empty());
    EXPECT_EQ(CheckStepFiles(*LocalSource(), r->url, r->manifest, 100000), "");
  }

  // Step 4 loses its marker (the hint still names it) and step 3 a byte after
  // its commit: a restore through the environment's source takes step 2.
  auto client = Client();
  ASSERT_TRUE(client->Delete(remote + "/" + CheckpointName(4) + "/COMMIT").ok());
  std::string f = remote + "/" + CheckpointName(3) + "/model.bin";
  auto data = ReadFileToString(*DefaultSource(), f);
  ASSERT_TRUE(data.ok()) << data.status();
  (*data)[100] ^= 1;
  ASSERT_TRUE(client->Put(f, *data).ok());
  EXPECT_EQ(*ReadLatestPointer(*DefaultSource(), remote), CheckpointName(4));
  fs::remove_all(local.path());
  auto w = CheckpointWriter::Open(local.path());
  ASSERT_TRUE(w.ok()) << w.status();
  RestoreOptions ro;
  ro.remote = remote;
  auto r = (*w)->RestoreLatest(ro);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->from_remote);
  EXPECT_EQ(r->manifest.step, 2);
  EXPECT_EQ(CheckStepFiles(*LocalSource(), r->url, r->manifest, 100000), "");
  // Both are reported, newest first: step 4 without its marker, step 3 corrupt.
  ASSERT_EQ(r->skipped.size(), 2u);
  EXPECT_NE(r->skipped[0].find(CheckpointName(4)), std::string::npos) << r->skipped[0];
  EXPECT_NE(r->skipped[0].find("no commit marker"), std::string::npos) << r->skipped[0];
  EXPECT_NE(r->skipped[1].find(CheckpointName(3)), std::string::npos) << r->skipped[1];
  EXPECT_NE(r->skipped[1].find("model.bin"), std::string::npos) << r->skipped[1];
  EXPECT_FALSE(fs::exists(local.Join(CheckpointName(3))));

  // The CLI on the same remote: ls shows the committed ones, pull the newest.
  std::string out;
  // (RunCommand adds 2>&1; the warnings must stay out of the JSON.)
  ASSERT_EQ(RunCommand("(" + CliPath() + " ckpt ls --remote --json " + remote + " 2>/dev/null)",
                       &out), 0) << out;
  auto ls = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(ls.is_array()) << out;
  ASSERT_EQ(ls.size(), 3u) << out;
  EXPECT_EQ(ls[0]["name"], CheckpointName(1));
  EXPECT_EQ(ls[2]["name"], CheckpointName(3));
  EXPECT_EQ(ls[2]["latest"], false);  // the hint names step 4, which is not committed
  TempDir other;
  ASSERT_EQ(RunCommand("(" + CliPath() + " ckpt pull --json " + remote + " " + other.Join("ck") +
                           " 2>/dev/null)", &out), 0) << out;
  auto pull = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(pull.is_object()) << out;
  EXPECT_EQ(pull["name"], CheckpointName(2));
  EXPECT_EQ(pull["from_remote"], true);
  EXPECT_NE(pull["skipped"].dump().find(CheckpointName(3)), std::string::npos) << out;
  auto pulled = ReadCheckpointManifest(*LocalSource(), other.Join("ck/" + CheckpointName(2)));
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(CheckStepFiles(*LocalSource(), other.Join("ck/" + CheckpointName(2)), *pulled, 100000),
            "");
}

TEST_F(RemoteS3CheckpointTest, RemoteRotationDeletesEveryKeyOfOldCheckpoints) {
  TempDir local;
  const std::string remote = "s3://ckpt/rotated";
  UploaderOptions uo;
  uo.keep_last = 2;
  uo.keep_every_steps = 3;
  {
    WiredCheckpoints p = WireUploader(local.path(), remote, uo);
    for (int step = 1; step <= 7; ++step) ASSERT_TRUE(p.writer->SaveFiles(step, StepFiles(step)).ok());
    ASSERT_TRUE(p.uploader->Wait(60000).ok());
  }
  std::vector<std::string> want;
  for (int step : {3, 6, 7})
    for (const char* f : {"COMMIT", "data_state.json", "manifest.json", "model.bin", "optim.bin"})
      want.push_back(CheckpointName(step) + "/" + f);
  want.push_back("latest");
  auto client = Client();
  EXPECT_EQ(Keys(*client, remote), want);
  auto committed = ListRemoteCheckpoints(*DefaultSource(), remote);
  ASSERT_TRUE(committed.ok()) << committed.status();
  ASSERT_EQ(committed->size(), 3u);
  for (const auto& m : *committed)
    EXPECT_EQ(CheckStepFiles(*DefaultSource(), JoinUrl(remote, m.name), m), "") << m.name;

  // `ckpt push --keep-last 1` rotates the same way.
  std::string out;
  ASSERT_EQ(RunCommand(CliPath() + " ckpt push --keep-last 1 " + local.path() + " " + remote +
                           " 2>&1", &out), 0) << out;
  committed = ListRemoteCheckpoints(*DefaultSource(), remote);
  ASSERT_TRUE(committed.ok()) << committed.status();
  ASSERT_EQ(committed->size(), 1u);
  EXPECT_EQ((*committed)[0].name, CheckpointName(7));
  EXPECT_EQ(Keys(*client, remote).size(), 6u);
}

// ---- http(s):// PUT through the fault server -------------------------------

struct HttpRemote {
  TempDir root;
  std::unique_ptr<HttpTestServer> server = std::make_unique<HttpTestServer>(root.path());
  std::string remote = server->Url("/remote");
  std::shared_ptr<HttpSource> source = [] {
    HttpOptions o;
    o.initial_backoff_s = 0.001;
    o.max_backoff_s = 0.01;
    o.max_retries = 3;
    return NewHttpSource(o);
  }();
  UploaderOptions Options() const {
    UploaderOptions o;
    o.remote_source = source;
    o.retry_initial_ms = 1;
    return o;
  }
};

TEST(RemoteHttpCheckpointTest, PutUploadsSurviveFaultsAndRestoreFromTheHintAlone) {
  HttpRemote r;
  TempDir local;
  auto w = CheckpointWriter::Open(local.path());
  ASSERT_TRUE((*w)->SaveFiles(4, StepFiles(4, 200000)).ok());
  // 5xx, SlowDown, a reset mid-body of the read-back, a truncated read-back.
  r.server->AddFault({{"kind", "status"}, {"code", 500}, {"method", "PUT"}, {"count", 2}});
  r.server->AddFault({{"kind", "status"}, {"code", 503}, {"method", "PUT"}, {"count", 1},
                     {"body", "<Error><Code>SlowDown</Code></Error>"}});
  r.server->AddFault({{"kind", "drop"}, {"after", 1000}, {"count", 2}});
  auto u = Uploader::Create(local.path(), r.remote, r.Options());
  ASSERT_TRUE(u.ok());
  Status s = (*u)->UploadNow(CheckpointName(4));
  ASSERT_TRUE(s.ok()) << s;
  int faults = 0;
  for (const auto& q : r.server->Requests()) faults += q.contains("fault") && q["fault"].is_string();
  EXPECT_GE(faults, 3);  // at least the PUT failures; the resets hit read-backs
  EXPECT_TRUE(fs::exists(r.root.Join("remote/" + CheckpointName(4) + "/COMMIT")));

  auto listed = ListRemoteCheckpoints(*r.source, r.remote);  // no listing over http: the hint
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  TempDir fresh;
  auto w2 = CheckpointWriter::Open(fresh.path());
  RestoreOptions ro;
  ro.remote = r.remote;
  ro.remote_source = r.source;
  auto restored = (*w2)->RestoreLatest(ro);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_TRUE(restored->from_remote);
  EXPECT_EQ(CheckStepFiles(*LocalSource(), restored->url, restored->manifest, 200000), "");
}

TEST(RemoteHttpCheckpointTest, RotationDeletesWhatThisUploaderCommitted) {
  HttpRemote r;
  TempDir local;
  auto w = CheckpointWriter::Open(local.path(), CheckpointWriterOptions{nullptr, 0});
  for (int step = 1; step <= 3; ++step) ASSERT_TRUE((*w)->SaveFiles(step, StepFiles(step)).ok());
  UploaderOptions o = r.Options();
  o.keep_last = 1;
  auto u = Uploader::Create(local.path(), r.remote, o);
  ASSERT_TRUE(u.ok());
  for (int step = 1; step <= 3; ++step) ASSERT_TRUE((*u)->UploadNow(CheckpointName(step)).ok());
  // No listing over http: the checkpoints this uploader committed are deleted
  // through DELETE, marker first; directories stay (the server has none to delete).
  for (int step = 1; step <= 2; ++step)
    for (const char* f : {"COMMIT", "manifest.json", "model.bin", "optim.bin", "data_state.json"})
      EXPECT_FALSE(fs::exists(r.root.Join("remote/" + CheckpointName(step) + "/" + f))) << step << f;
  EXPECT_TRUE(fs::exists(r.root.Join("remote/" + CheckpointName(3) + "/COMMIT")));
  auto listed = ListRemoteCheckpoints(*r.source, r.remote);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name, CheckpointName(3));
}

TEST(RemoteHttpCheckpointTest, PersistentFailuresNeverCommit) {
  HttpRemote r;
  TempDir local;
  auto w = CheckpointWriter::Open(local.path());
  ASSERT_TRUE((*w)->SaveFiles(5, StepFiles(5, 100000)).ok());
  ASSERT_TRUE((*w)->SaveFiles(6, StepFiles(6, 100000)).ok());
  // The marker's PUT always fails: every file is up, yet nothing is committed.
  r.server->AddFault({{"kind", "status"}, {"code", 503}, {"method", "PUT"}, {"count", -1},
                     {"path", "/remote/" + CheckpointName(5) + "/COMMIT"}});
  UploaderOptions o = r.Options();
  o.attempts = 2;
  auto u = Uploader::Create(local.path(), r.remote, o);
  Status s = (*u)->UploadNow(CheckpointName(5));
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(fs::exists(r.root.Join("remote/" + CheckpointName(5) + "/manifest.json")));
  EXPECT_FALSE(fs::exists(r.root.Join("remote/" + CheckpointName(5) + "/COMMIT")));
  auto listed = ListRemoteCheckpoints(*r.source, r.remote);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_TRUE(listed->empty());

  // Server killed: the upload fails with a clear error, the local copy stays.
  r.server.reset();
  auto dead = Uploader::Create(local.path(), r.remote, o);
  s = (*dead)->UploadNow(CheckpointName(6));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_FALSE(fs::exists(r.root.Join("remote/" + CheckpointName(6) + "/COMMIT")));
  EXPECT_TRUE(fs::exists(local.Join(CheckpointName(6) + "/manifest.json")));
}

}  // namespace
}  // namespace shardstream::testing
