// HttpSource against real loopback servers: our fault-injecting server for
// every failure mode, and the request log to prove what went over the wire.
#include "shardstream/http_source.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <sstream>
#include <thread>

#include "common/log_capture.h"
#include "shardstream/url.h"
#include "support/http_server.h"
#include "support/read_within.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::HttpTestServer;
using testing::TempDir;

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

Result<std::string> ReadAll(InputStream& in, size_t chunk = 4096) {
  std::string out;
  std::string buf(chunk, '\0');
  while (true) {
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t got, in.Read(chunk, buf.data()));
    if (got == 0) return out;
    out.append(buf.data(), got);
  }
}

// The whole stream, or the error text (so a failure prints, not crashes).
std::string ReadOrError(InputStream& in, size_t chunk = 4096) {
  auto r = ReadAll(in, chunk);
  return r.ok() ? *r : "ERROR " + r.status().ToString();
}

// Compares without dumping megabytes of binary on failure.
void ExpectData(const std::string& got, const std::string& want) {
  if (got.rfind("ERROR ", 0) == 0) {
    ADD_FAILURE() << got;
  } else {
    EXPECT_EQ(got.size(), want.size());
    EXPECT_TRUE(got == want) << "bytes differ";
  }
}

HttpOptions FastOptions() {
  HttpOptions o;
  o.initial_backoff_s = 0.001;
  o.max_backoff_s = 0.01;
  o.connect_timeout_s = 2;
  return o;
}

class HttpSourceTest : public ::testing::Test {
 protected:
  HttpSourceTest() : data_(RandomBytes(300000, 7)), server_(root_.path()) {
    testing::WriteFile(root_.Join("shard.tar"), data_);
  }
  std::shared_ptr<HttpSource> Source(HttpOptions o = FastOptions()) {
    return NewHttpSource(std::move(o));
  }
  std::vector<nlohmann::json> Gets() const {
    std::vector<nlohmann::json> out;
    for (auto& r : server_.Requests())
      if (r["method"] == "GET") out.push_back(r);
    return out;
  }

  TempDir root_;
  std::string data_;
  HttpTestServer server_;
};

TEST_F(HttpSourceTest, StreamsWholeObjectAndFromOffset) {
  auto src = Source();
  auto in = src->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ((*in)->size(), data_.size());
  auto all = ReadAll(**in, 100000);
  ASSERT_TRUE(all.ok()) << all.status();
  ExpectData(*all, data_);
  EXPECT_EQ((*in)->position(), data_.size());

  auto tail = src->OpenInputStream(server_.Url("/shard.tar"), 123456);
  ASSERT_TRUE(tail.ok()) << tail.status();
  ExpectData(ReadOrError(**tail), data_.substr(123456));
  auto gets = Gets();
  ASSERT_EQ(gets.size(), 2u);
  EXPECT_EQ(gets[1]["range"], "bytes=123456-");
}

TEST_F(HttpSourceTest, DefaultSourceRoutesHttp) {
  auto text = ReadFileToString(*DefaultSource(), server_.Url("/shard.tar"));
  ASSERT_TRUE(text.ok()) << text.status();
  ExpectData(*text, data_);
}

TEST_F(HttpSourceTest, StatAndRandomAccess) {
  auto src = Source();
  auto info = src->Stat(server_.Url("/shard.tar"));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, data_.size());
  EXPECT_FALSE(info->etag.empty());
  EXPECT_GT(info->mtime_ns, 0);

  auto file = src->OpenRandomAccess(server_.Url("/shard.tar"));
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(*(*file)->Size(), data_.size());
  std::string buf(1000, '\0');
  auto got = (*file)->ReadAt(5000, 1000, buf.data());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 1000u);
  EXPECT_EQ(buf, data_.substr(5000, 1000));
  got = (*file)->ReadAt(data_.size() - 10, 1000, buf.data());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 10u);
  EXPECT_EQ(*(*file)->ReadAt(data_.size() + 5, 10, buf.data()), 0u);
}

TEST_F(HttpSourceTest, MissingIsNotFoundAndNotRetried) {
  auto src = Source();
  auto in = src->OpenInputStream(server_.Url("/nope.tar"), 0);
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), StatusCode::kNotFound);
  EXPECT_NE(in.status().message().find("/nope.tar"), std::string::npos);
  EXPECT_EQ(src->Stat(server_.Url("/nope.tar")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Gets().size(), 1u);
}

TEST_F(HttpSourceTest, ForbiddenAndUnauthorizedAreAuthErrorsNotRetried) {
  server_.AddFault({{"kind", "status"}, {"code", 403}});
  server_.AddFault({{"kind", "status"}, {"code", 401}});
  auto src = Source();
  EXPECT_EQ(src->OpenInputStream(server_.Url("/shard.tar"), 0).status().code(),
            StatusCode::kAuth);
  EXPECT_EQ(src->OpenInputStream(server_.Url("/shard.tar"), 0).status().code(),
            StatusCode::kAuth);
  EXPECT_EQ(Gets().size(), 2u);
}

TEST_F(HttpSourceTest, ServerErrorsAreRetried) {
  server_.AddFault({{"kind", "status"}, {"code", 500}});
  server_.AddFault({{"kind", "status"}, {"code", 503}});
  server_.AddFault({{"kind", "status"}, {"code", 429}});
  auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  ExpectData(ReadOrError(**in), data_);
  EXPECT_EQ(Gets().size(), 4u);
}

TEST_F(HttpSourceTest, RetryAfterIsHonoured) {
  server_.AddFault({{"kind", "status"}, {"code", 503}, {"retry_after", 1}});
  auto start = std::chrono::steady_clock::now();
  auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(elapsed, 0.95);
  ExpectData(ReadOrError(**in), data_);
}

TEST_F(HttpSourceTest, ExhaustedRetriesAreUnavailable) {
  server_.AddFault({{"kind", "status"}, {"code", 503}, {"count", -1}});
  HttpOptions o = FastOptions();
  o.max_retries = 2;
  auto in = Source(o)->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(in.status().message().find("503"), std::string::npos) << in.status();
  EXPECT_NE(in.status().message().find("3 attempts"), std::string::npos) << in.status();
  EXPECT_EQ(Gets().size(), 3u);
}

TEST_F(HttpSourceTest, ConnectionRefusedIsUnavailable) {
  HttpOptions o = FastOptions();
  o.max_retries = 1;
  int dead = testing::FreePort();
  auto in = Source(o)->OpenInputStream("http://127.0.0.1:" + std::to_string(dead) + "/x", 0);
  EXPECT_EQ(in.status().code(), StatusCode::kUnavailable) << in.status();
}

TEST_F(HttpSourceTest, DroppedConnectionResumesWithRangeAndIfMatch) {
  server_.AddFault({{"kind", "drop"}, {"after", 70000}});
  auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  auto all = ReadAll(**in, 1000);
  ASSERT_TRUE(all.ok()) << all.status();
  ExpectData(*all, data_);
  auto gets = Gets();
  ASSERT_EQ(gets.size(), 2u);
  EXPECT_EQ(gets[0]["fault"], "drop");
  EXPECT_EQ(gets[1]["range"], "bytes=70000-");
  EXPECT_FALSE(gets[1]["if_match"].is_null());
}

TEST_F(HttpSourceTest, TruncatedBodyResumes) {
  server_.AddFault({{"kind", "truncate"}, {"after", 12345}});
  auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  ExpectData(ReadOrError(**in, 777), data_);
  EXPECT_EQ(Gets().back()["range"], "bytes=12345-");
}

TEST_F(HttpSourceTest, StallIsDetectedAndResumed) {
  server_.AddFault({{"kind", "stall"}, {"after", 5000}, {"seconds", 4}});
  HttpOptions o = FastOptions();
  o.low_speed_time_s = 1;
  auto start = std::chrono::steady_clock::now();
  auto in = Source(o)->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  ExpectData(ReadOrError(**in), data_);
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(elapsed, 3.5);
  EXPECT_EQ(Gets().back()["range"], "bytes=5000-");
}

// Reads as the cache's download does: ReadWithin while bytes keep coming,
// Read when it answers 0.
Result<std::string> ReadAllGathering(InputStream& in, size_t chunk) {
  std::string out;
  std::string buf(chunk, '\0');
  while (true) {
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t got,
                                 in.ReadWithin(chunk, buf.data(), std::chrono::milliseconds(50)));
    if (got == 0) {
      SHARDSTREAM_ASSIGN_OR_RETURN(got, in.Read(chunk, buf.data()));
    }
    if (got == 0) return out;
    out.append(buf.data(), got);
  }
}

TEST_F(HttpSourceTest, ReadWithinGivesUpOnAPauseAndReadGoesOn) {
  server_.AddFault({{"kind", "stall"}, {"after", 5000}, {"seconds", 3}});
  HttpOptions o = FastOptions();
  o.low_speed_time_s = 30;  // a pause, not a stall to retry
  auto in = Source(o)->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  double gave_up_after = 0;
  auto read = testing::ReadWithinUntilPause(**in, std::chrono::milliseconds(200), &gave_up_after);
  ASSERT_TRUE(read.ok()) << read.status();
  const std::string& head = *read;
  EXPECT_EQ(head.size(), 5000u);  // what came before the pause, nothing lost
  EXPECT_TRUE(head == data_.substr(0, head.size())) << "bytes differ";
  EXPECT_GE(gave_up_after, 0.15);
  EXPECT_LT(gave_up_after, 1.5);  // not the 3 s pause
  EXPECT_EQ((*in)->position(), 5000u);
  auto rest = ReadAll(**in);
  ASSERT_TRUE(rest.ok()) << rest.status();
  ExpectData(head + *rest, data_);
  EXPECT_EQ(Gets().size(), 1u);  // the same transfer went on
}

TEST_F(HttpSourceTest, ReadWithinLeavesInterruptionsToReadWhichResumes) {
  server_.AddFault({{"kind", "drop"}, {"after", 70000}});
  server_.AddFault({{"kind", "truncate"}, {"after", 80000}});  // of the second response
  auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  auto all = ReadAllGathering(**in, 3000);
  ASSERT_TRUE(all.ok()) << all.status();
  ExpectData(*all, data_);
  auto gets = Gets();
  ASSERT_EQ(gets.size(), 3u);
  EXPECT_EQ(gets[1]["range"], "bytes=70000-");
  EXPECT_EQ(gets[2]["range"], "bytes=150000-");
}

TEST_F(HttpSourceTest, ReadWithinNeverYieldsWrongBytesOnAWrongLength) {
  for (int delta : {100, -100}) {
    server_.AddFault({{"kind", "wrong_length"}, {"delta", delta}});
    auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 0);
    if (!in.ok()) continue;  // refusing is fine; wrong data is not
    auto all = ReadAllGathering(**in, 3000);
    if (all.ok()) EXPECT_TRUE(*all == data_.substr(0, all->size())) << delta;
  }
}

TEST_F(HttpSourceTest, ReadWithinAfterAnIgnoredRangeRepeatsNoByte) {
  server_.AddFault({{"kind", "drop"}, {"after", 50000}});
  server_.AddFault({{"kind", "ignore_range"}});
  auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  auto all = ReadAllGathering(**in, 3000);
  ASSERT_TRUE(all.ok()) << all.status();
  ExpectData(*all, data_);
  EXPECT_EQ(Gets().size(), 2u);
}

TEST_F(HttpSourceTest, IgnoredRangeRestartsWithoutRepeatingBytes) {
  server_.AddFault({{"kind", "drop"}, {"after", 50000}});
  server_.AddFault({{"kind", "ignore_range"}});
  auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  ExpectData(ReadOrError(**in), data_);
  auto gets = Gets();
  ASSERT_EQ(gets.size(), 2u);
  EXPECT_EQ(gets[1]["status"], 200);
}

TEST_F(HttpSourceTest, ChangedObjectFailsCleanlyAfterPartialRead) {
  server_.AddFault({{"kind", "drop"}, {"after", 50000}});
  server_.AddFault({{"kind", "change_etag"}});
  auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  std::string got;
  std::string buf(1000, '\0');
  Status error;
  while (true) {
    auto n = (*in)->Read(buf.size(), buf.data());
    if (!n.ok()) {
      error = n.status();
      break;
    }
    ASSERT_NE(*n, 0u) << "the stream must not end silently";
    got.append(buf.data(), *n);
  }
  ExpectData(got, data_.substr(0, 50000));  // never bytes of two versions
  EXPECT_EQ(error.code(), StatusCode::kChecksum);
  EXPECT_NE(error.message().find("changed"), std::string::npos) << error;
  EXPECT_EQ(error.offset(), 50000);
  EXPECT_EQ(Gets().back()["status"], 412) << Gets().back().dump();
}

TEST_F(HttpSourceTest, ChangedObjectBeforeFirstByteRestartsCleanly) {
  // The first attempt breaks before any byte reaches the reader; by the
  // retry the object has a new ETag. Nothing was handed out, so the stream
  // follows the new version instead of failing.
  server_.AddFault({{"kind", "drop"}, {"after", 0}});
  server_.AddFault({{"kind", "change_etag"}});
  auto in = Source()->OpenStream(server_.Url("/shard.tar"), HttpStreamOptions{});
  ASSERT_TRUE(in.ok()) << in.status();
  ExpectData(ReadOrError(**in), data_);
  auto gets = Gets();
  ASSERT_EQ(gets.size(), 3u);
  EXPECT_EQ(gets[1]["status"], 412);
  EXPECT_EQ(gets[2]["status"], 200);
  EXPECT_TRUE(gets[2]["if_match"].is_null());
}

TEST_F(HttpSourceTest, LongerContentLengthThanExpectedIsAnError) {
  server_.AddFault({{"kind", "wrong_length"}, {"delta", 100}});
  HttpStreamOptions so;
  so.expected_size = data_.size();
  auto in = Source()->OpenStream(server_.Url("/shard.tar"), so);
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(in.status().message().find("expected 300000"), std::string::npos) << in.status();
}

TEST_F(HttpSourceTest, WrongContentLengthNeverYieldsWrongBytes) {
  for (int delta : {100, -100}) {
    server_.AddFault({{"kind", "wrong_length"}, {"delta", delta}});
    auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 0);
    if (!in.ok()) continue;  // refusing is fine; wrong data is not
    auto all = ReadAll(**in);
    if (all.ok()) {
      // A short declared length ends the body early: a prefix, flagged by
      // expected_size (next test), never different bytes.
      EXPECT_TRUE(*all == data_.substr(0, all->size())) << delta;
    }
  }
  server_.AddFault({{"kind", "wrong_length"}, {"delta", -100}});
  HttpStreamOptions so;
  so.expected_size = data_.size();
  auto in = Source()->OpenStream(server_.Url("/shard.tar"), so);
  EXPECT_EQ(in.status().code(), StatusCode::kCorrupt) << in.status();
}

TEST_F(HttpSourceTest, BodyLongerThanCapIsAnError) {
  HttpOptions o = FastOptions();
  o.max_transfer_bytes = 1000;
  auto in = Source(o)->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(in.status().message().find("cap"), std::string::npos) << in.status();
}

TEST_F(HttpSourceTest, MirrorsAreTriedInTurn) {
  std::string dead = "http://127.0.0.1:" + std::to_string(testing::FreePort());
  HttpOptions o = FastOptions();
  o.max_retries = 1;
  o.mirrors = {{dead, {"http://127.0.0.1:" + std::to_string(server_.port())}}};
  auto in = Source(o)->OpenInputStream(dead + "/shard.tar", 0);
  ASSERT_TRUE(in.ok()) << in.status();
  ExpectData(ReadOrError(**in), data_);
}

TEST_F(HttpSourceTest, RedirectsOnlyToHttp) {
  auto src = Source();
  auto ok = src->OpenInputStream(
      server_.Url("/_redirect?to=" + server_.Url("/shard.tar")), 0);
  ASSERT_TRUE(ok.ok()) << ok.status();
  ExpectData(ReadOrError(**ok), data_);
  auto bad = src->OpenInputStream(server_.Url("/_redirect?to=file:///etc/passwd"), 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kConfig) << bad.status();
}

TEST_F(HttpSourceTest, DestroyingAStalledStreamIsPrompt) {
  server_.AddFault({{"kind", "stall"}, {"after", 1000}, {"seconds", 10}});
  auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  std::string buf(1000, '\0');
  ASSERT_TRUE((*in)->Read(1000, buf.data()).ok());
  auto start = std::chrono::steady_clock::now();
  in->reset();
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(elapsed, 0.2);
}

TEST_F(HttpSourceTest, CancelFromAnotherThreadStopsABlockedRead) {
  server_.AddFault({{"kind", "stall"}, {"after", 1000}, {"seconds", 10}});
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  HttpStreamOptions so;
  so.cancel = cancel;
  auto in = Source()->OpenStream(server_.Url("/shard.tar"), so);
  ASSERT_TRUE(in.ok()) << in.status();
  std::string buf(100000, '\0');
  ASSERT_TRUE((*in)->Read(1000, buf.data()).ok());
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancel->store(true);
  });
  auto start = std::chrono::steady_clock::now();
  auto r = (*in)->Read(buf.size(), buf.data());
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stopper.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status();
  EXPECT_LT(elapsed, 1.0);
}

TEST_F(HttpSourceTest, PutUploadsSmallAndSpooledBodies) {
  HttpOptions o = FastOptions();
  o.put_memory_bytes = 100000;
  auto src = Source(o);
  for (size_t size : {size_t{10}, data_.size()}) {
    server_.AddFault({{"kind", "status"}, {"code", 503}, {"method", "PUT"}});
    auto file = src->NewWritableFile(server_.Url("/up/ckpt.bin"));
    ASSERT_TRUE(file.ok());
    for (size_t i = 0; i < size; i += 40000)
      ASSERT_TRUE((*file)->Append(std::string_view(data_).substr(i, std::min<size_t>(40000, size - i))).ok());
    Status s = (*file)->Close();
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(testing::ReadFile(root_.Join("up/ckpt.bin")), data_.substr(0, size));
  }
  ASSERT_TRUE(src->Remove(server_.Url("/up/ckpt.bin")).ok());
  EXPECT_EQ(src->Stat(server_.Url("/up/ckpt.bin")).status().code(), StatusCode::kNotFound);
}

TEST_F(HttpSourceTest, PutSpoolIsRemovedAndAMissingSpoolDirectoryIsAClearError) {
  // Bodies past put_memory_bytes go to a temporary file in $TMPDIR.
  TempDir spool;
  // Restored however the test ends: later tests in this binary spool too.
  struct RestoreTmpdir {
    const char* old = std::getenv("TMPDIR");
    std::string saved = old ? old : "";
    ~RestoreTmpdir() { old ? ::setenv("TMPDIR", saved.c_str(), 1) : ::unsetenv("TMPDIR"); }
  } restore;
  ::setenv("TMPDIR", spool.path().c_str(), 1);
  HttpOptions o = FastOptions();
  o.put_memory_bytes = 1000;
  auto src = Source(o);
  {
    auto file = src->NewWritableFile(server_.Url("/up/spooled.bin"));
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE((*file)->Append(data_).ok());
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(spool.path()),
                            std::filesystem::directory_iterator()), 1);
    ASSERT_TRUE((*file)->Close().ok());
  }
  EXPECT_EQ(testing::ReadFile(root_.Join("up/spooled.bin")), data_);
  EXPECT_TRUE(std::filesystem::is_empty(spool.path()));  // the spool is gone after Close
  ::setenv("TMPDIR", spool.Join("missing").c_str(), 1);
  auto file = src->NewWritableFile(server_.Url("/up/never.bin"));
  ASSERT_TRUE(file.ok());
  Status s = (*file)->Append(data_);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("mkstemp " + spool.Join("missing")), std::string::npos) << s;
}

TEST(HttpTlsTest, VerificationOnByDefaultAndCaBundleConfigurable) {
  TempDir dir;
  std::string cert = dir.Join("cert.pem"), key = dir.Join("key.pem");
  std::string log;
  ASSERT_EQ(testing::RunCommand("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "
                                "/CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout " +
                                    key + " -out " + cert,
                                &log),
            0)
      << log;
  testing::WriteFile(dir.Join("www.bin"), "over tls");
  HttpTestServer server(dir.path(), {"--certfile", cert, "--keyfile", key});
  std::string url = "https://127.0.0.1:" + std::to_string(server.port()) + "/www.bin";
  HttpOptions o = FastOptions();
  o.max_retries = 0;
  auto untrusted = NewHttpSource(o)->OpenInputStream(url, 0);
  ASSERT_FALSE(untrusted.ok());
  EXPECT_EQ(untrusted.status().code(), StatusCode::kConfig) << untrusted.status();
  o.ca_bundle = cert;
  auto trusted = NewHttpSource(o)->OpenInputStream(url, 0);
  ASSERT_TRUE(trusted.ok()) << trusted.status();
  EXPECT_EQ(ReadOrError(**trusted), "over tls");
}

TEST(HttpNginxTest, StreamsRangesAndStatFromNginx) {
  TempDir dir;
  std::string data = RandomBytes(3 << 20, 11);
  testing::WriteFile(dir.Join("shard.tar"), data);
  testing::NginxServer nginx(dir.path());
  auto src = NewHttpSource(FastOptions());
  auto info = src->Stat(nginx.Url("/shard.tar"));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, data.size());
  EXPECT_FALSE(info->etag.empty());
  auto in = src->OpenInputStream(nginx.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  ExpectData(ReadOrError(**in, 1 << 16), data);
  auto tail = src->OpenInputStream(nginx.Url("/shard.tar"), 1000001);
  ASSERT_TRUE(tail.ok()) << tail.status();
  ExpectData(ReadOrError(**tail), data.substr(1000001));
  auto file = src->OpenRandomAccess(nginx.Url("/shard.tar"));
  std::string buf(4096, '\0');
  ASSERT_EQ(*(*file)->ReadAt(2000000, 4096, buf.data()), 4096u);
  EXPECT_TRUE(buf == data.substr(2000000, 4096));
  EXPECT_EQ(src->Stat(nginx.Url("/missing")).status().code(), StatusCode::kNotFound);
}

// A slow reader with a small buffer: receiving pauses (CURLPAUSE) and
// resumes many times, and no byte is lost or repeated across the pauses.
// (That memory stays flat with object size is measured by the benchmark.)
TEST_F(HttpSourceTest, SlowReaderPausesAndResumesWithoutLoss) {
  HttpOptions o = FastOptions();
  o.stream_buffer_bytes = 16 << 10;
  auto in = Source(o)->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  std::string got, buf(1000, '\0');
  while (true) {
    auto n = (*in)->Read(buf.size(), buf.data());
    ASSERT_TRUE(n.ok()) << n.status();
    if (*n == 0) break;
    got.append(buf.data(), *n);
    if (got.size() == 100000) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ExpectData(got, data_);
}

// 1,000 connection resets at random points over a data set of small objects:
// every byte arrives exactly once, in order.
TEST_F(HttpSourceTest, ThousandResetsDeliverEveryByteExactlyOnce) {
  const int kObjects = 40;
  std::vector<std::string> objects;
  for (int i = 0; i < kObjects; ++i) {
    objects.push_back(RandomBytes(24000 + i * 500, 100 + i));
    testing::WriteFile(root_.Join("obj" + std::to_string(i)), objects.back());
  }
  server_.AddFault({{"kind", "drop"}, {"random", true}, {"count", 1000}});
  HttpOptions o = FastOptions();
  o.initial_backoff_s = 0;
  o.max_retries = 50;
  auto src = Source(o);
  for (int round = 0; round < 100; ++round) {
    for (int i = 0; i < kObjects; ++i) {
      auto in = src->OpenInputStream(server_.Url("/obj" + std::to_string(i)), 0);
      ASSERT_TRUE(in.ok()) << in.status();
      auto all = ReadAll(**in, 3000);
      ASSERT_TRUE(all.ok()) << all.status();
      ASSERT_EQ(all->size(), objects[i].size());
      ASSERT_TRUE(*all == objects[i]) << "object " << i;
    }
    int drops = 0;
    for (auto& r : Gets()) drops += r["fault"] == "drop";
    if (drops >= 1000) break;
  }
  int drops = 0;
  for (auto& r : Gets()) drops += r["fault"] == "drop";
  EXPECT_EQ(drops, 1000);
}

TEST_F(HttpSourceTest, NoSecretInErrorsOrDebugLog) {
  auto capture = std::make_unique<internal::ScopedLogCapture>();

  const std::string secret = "s3cr3tV4lue";
  std::string base = "http://user:" + secret + "@127.0.0.1:" + std::to_string(server_.port());
  std::string query = "?X-Amz-Signature=" + secret + "&X-Amz-Credential=" + secret +
                      "&X-Amz-Security-Token=" + secret + "&token=" + secret;
  server_.AddFault({{"kind", "status"}, {"code", 503}, {"count", 2}});
  server_.AddFault({{"kind", "drop"}, {"after", 1000}});
  HttpOptions o = FastOptions();
  o.max_retries = 1;
  auto strict = Source(o);
  auto src = Source();
  std::vector<std::string> messages;
  auto unavailable = strict->OpenInputStream(base + "/shard.tar" + query, 0);
  messages.push_back(unavailable.status().ToString() + unavailable.status().url());
  auto missing = src->Stat(base + "/missing" + query);
  messages.push_back(missing.status().ToString() + missing.status().url());
  auto resumed = src->OpenInputStream(base + "/shard.tar" + query, 0);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  ExpectData(ReadOrError(**resumed), data_);
  messages.push_back((*resumed)->url());
  auto dead = strict->OpenInputStream(
      "http://user:" + secret + "@127.0.0.1:" + std::to_string(testing::FreePort()) + "/x" + query, 0);
  messages.push_back(dead.status().ToString() + dead.status().url());

  std::string text = capture->Text();
  capture.reset();
  EXPECT_FALSE(unavailable.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(text.find("REDACTED"), std::string::npos) << "debug log should show urls";
  EXPECT_EQ(text.find(secret), std::string::npos) << text;
  for (const auto& m : messages) {
    EXPECT_EQ(m.find(secret), std::string::npos) << m;
    EXPECT_NE(m.find("REDACTED"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace shardstream
