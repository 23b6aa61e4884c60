// Ranged parts over many connections (transfer.h) against real loopback
// servers: our fault-injecting server, whose request log shows every part
// that went over the wire, and nginx.
#include "shardstream/transfer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <map>
#include <set>
#include <thread>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shardstream/checksum.h"
#include "shardstream/http_source.h"
#include "shardstream/shard_cache.h"
#include "shardstream/uploader.h"
#include "shardstream/url.h"
#include "support/checkpoint_util.h"
#include "support/http_server.h"
#include "support/test_util.h"
#include "support/transfer_options.h"
#include "transfer/transfer_engine.h"

namespace shardstream {
namespace {

using testing::HttpTestServer;
using testing::ScopedTransferOptions;
using testing::TempDir;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kPart = 64 << 10;  // the smallest part size: many parts of a small object

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

Result<std::string> ReadAll(InputStream& in, size_t chunk = 10000) {
  std::string out;
  std::string buf(chunk, '\0');
  while (true) {
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t got, in.Read(chunk, buf.data()));
    if (got == 0) return out;
    out.append(buf.data(), got);
  }
}

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class TransferTest : public ::testing::Test {
 protected:
  TransferTest()
      : data_(RandomBytes(1 << 20, 11)),
        server_(root_.path()),
        options_([](TransferOptions& o) {
          o.part_size = kPart;
          o.parts_per_stream = 8;
          o.hedge_factor = 0;  // on in the tests that want it
        }) {
    testing::WriteFile(root_.Join("shard.tar"), data_);
  }

  void Tune(const std::function<void(TransferOptions&)>& f) { options_.Change(f); }
  std::shared_ptr<HttpSource> Source() {
    HttpOptions o;
    o.initial_backoff_s = 0.001;
    o.max_backoff_s = 0.01;
    o.connect_timeout_s = 2;
    return NewHttpSource(o);
  }
  std::vector<nlohmann::json> Gets() const {
    std::vector<nlohmann::json> out;
    for (auto& r : server_.Requests())
      if (r["method"] == "GET") out.push_back(r);
    return out;
  }
  void ExpectBytes(const Result<std::string>& got, const std::string& want) {
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), want.size());
    EXPECT_TRUE(*got == want) << "bytes differ";
  }

  TempDir root_;
  std::string data_;
  HttpTestServer server_;
  ScopedTransferOptions options_;
};

TEST_F(TransferTest, PartsArriveInOrderOverManyConnections) {
  auto before = GetTransferStats();
  auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ((*in)->size(), data_.size());
  ExpectBytes(ReadAll(**in), data_);
  auto gets = Gets();
  // The first GET streams part 0; every other part is one bounded range,
  // pinned to the first answer's ETag.
  ASSERT_EQ(gets.size(), data_.size() / kPart);
  EXPECT_TRUE(gets[0]["range"].is_null());
  std::set<std::string> ranges;
  for (size_t i = 1; i < gets.size(); ++i) {
    ranges.insert(gets[i]["range"].get<std::string>());
    EXPECT_FALSE(gets[i]["if_match"].is_null());
  }
  for (uint64_t k = 1; k < data_.size() / kPart; ++k)
    EXPECT_EQ(ranges.count("bytes=" + std::to_string(k * kPart) + "-" +
                           std::to_string((k + 1) * kPart - 1)), 1u) << k;
  auto after = GetTransferStats();
  EXPECT_EQ(after.parted_streams, before.parted_streams + 1);
  EXPECT_EQ(after.parts - before.parts, data_.size() / kPart - 1);
  EXPECT_EQ(after.bytes - before.bytes, data_.size());
  EXPECT_GT(after.part_p50_s, 0);
  EXPECT_GE(after.part_p99_s, after.part_p50_s);
}

TEST_F(TransferTest, FromAnOffsetAndWithAnOddLastPart) {
  const uint64_t offset = 100003;
  testing::WriteFile(root_.Join("odd.tar"), data_.substr(0, data_.size() - 777));
  auto in = Source()->OpenInputStream(server_.Url("/odd.tar"), offset);
  ASSERT_TRUE(in.ok()) << in.status();
  ExpectBytes(ReadAll(**in, 4099), data_.substr(offset, data_.size() - 777 - offset));
  EXPECT_EQ((*in)->position(), data_.size() - 777);
}

TEST_F(TransferTest, ResetsAndTruncationsInAnyPartLoseAndRepeatNoByte) {
  server_.AddFault({{"kind", "drop"}, {"random", true}, {"count", 12}});
  server_.AddFault({{"kind", "truncate"}, {"random", true}, {"count", 12}});
  auto before = GetTransferStats();
  auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  ExpectBytes(ReadAll(**in, 3001), data_);
  EXPECT_GE(GetTransferStats().retries - before.retries, 20u);
}

TEST_F(TransferTest, ObjectChangedBetweenPartsIsAnErrorNeverMixedBytes) {
  Tune([](TransferOptions& o) { o.parts_per_stream = 1; });  // parts asked for one by one
  auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  // Short of the end of part 0: part 1 is asked for once part 0 is read.
  std::string buf(kPart, '\0');
  ASSERT_EQ(*(*in)->Read(kPart - 1, buf.data()), kPart - 1);
  server_.AddFault({{"kind", "change_etag"}});
  auto r = ReadAll(**in);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kChecksum) << r.status();
  EXPECT_NE(r.status().message().find("changed"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("/shard.tar"), std::string::npos) << r.status();
  EXPECT_EQ(r.status().offset(), static_cast<int64_t>(kPart)) << r.status();
}

TEST_F(TransferTest, RangeAnsweredWith200InAPartIsAnError) {
  Tune([](TransferOptions& o) { o.parts_per_stream = 1; });
  auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  server_.AddFault({{"kind", "ignore_range"}});
  auto r = ReadAll(**in);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << r.status();
  EXPECT_NE(r.status().message().find("Range ignored"), std::string::npos) << r.status();
  EXPECT_EQ(r.status().offset(), static_cast<int64_t>(kPart)) << r.status();
}

TEST_F(TransferTest, ForbiddenInTheMiddleNamesTheUrlAndOffset) {
  Tune([](TransferOptions& o) { o.parts_per_stream = 1; });
  auto in = Source()->OpenInputStream(server_.Url("/shard.tar?X-Amz-Signature=secret"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  std::string buf(kPart, '\0');
  ASSERT_EQ(*(*in)->Read(kPart - 1, buf.data()), kPart - 1);
  server_.AddFault({{"kind", "status"}, {"code", 403}});
  auto r = ReadAll(**in);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kAuth) << r.status();
  EXPECT_NE(r.status().message().find("/shard.tar"), std::string::npos) << r.status();
  EXPECT_EQ(r.status().message().find("secret"), std::string::npos) << r.status();
  EXPECT_EQ(r.status().offset(), static_cast<int64_t>(kPart)) << r.status();
}

TEST_F(TransferTest, AServerIgnoringRangeIsReadAsOneStream) {
  server_.AddFault({{"kind", "ignore_range"}});
  auto before = GetTransferStats();
  auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 5000);
  ASSERT_TRUE(in.ok()) << in.status();
  ExpectBytes(ReadAll(**in), data_.substr(5000));
  EXPECT_EQ(Gets().size(), 1u);
  EXPECT_EQ(GetTransferStats().parted_streams, before.parted_streams);
}

TEST_F(TransferTest, ASizeOtherThanTheManifestsIsAnError) {
  auto src = Source();
  HttpStreamOptions o;
  o.expected_size = data_.size() + 10;
  auto in = src->OpenStream(server_.Url("/shard.tar"), o);
  Status s = in.ok() ? ReadAll(**in).status() : in.status();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kCorrupt) << s;
  EXPECT_NE(s.message().find(std::to_string(data_.size())), std::string::npos) << s;
}

TEST_F(TransferTest, AStalledPartCostsOneRetryNotTheStream) {
  Tune([](TransferOptions& o) { o.stall_s = 1; });
  // The third GET (a part) stops after 1000 bytes for 20 s.
  server_.AddFault(nlohmann::json::array({{{"kind", "none"}, {"count", 2}},
                                          {{"kind", "stall"}, {"after", 1000}, {"seconds", 20}}}));
  auto before = GetTransferStats();
  auto start = Clock::now();
  auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  ExpectBytes(ReadAll(**in), data_);
  EXPECT_LT(Since(start), 6);
  auto after = GetTransferStats();
  EXPECT_GE(after.stalls - before.stalls, 1u);
  bool resumed = false;  // the stalled part asked again from where it stopped
  for (auto& g : Gets())
    if (!g["range"].is_null() && g["range"].get<std::string>().find("-") != std::string::npos &&
        (std::stoull(g["range"].get<std::string>().substr(6)) % kPart) == 1000)
      resumed = true;
  EXPECT_TRUE(resumed);
}

TEST_F(TransferTest, ASlowPartIsHedgedAndTheLoserDropped) {
  Tune([](TransferOptions& o) {
    o.hedge_factor = 3;
    o.hedge_min_s = 0.3;
    o.stall_s = 30;  // not a stall: a slow part
    o.parts_per_stream = 4;
  });
  // Parts complete first (a median to compare with), then one part pauses
  // 10 s after 1000 bytes.
  server_.AddFault(nlohmann::json::array({{{"kind", "none"}, {"count", 8}},
                                          {{"kind", "stall"}, {"after", 1000}, {"seconds", 10}}}));
  auto before = GetTransferStats();
  auto start = Clock::now();
  auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  ExpectBytes(ReadAll(**in), data_);
  EXPECT_LT(Since(start), 5);
  auto after = GetTransferStats();
  EXPECT_EQ(after.hedges - before.hedges, 1u);
  EXPECT_EQ(after.hedge_wins - before.hedge_wins, 1u);
  // The loser's connection is dropped, not read to its end.
  in->reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(GetTransferStats().connections, 0);
}

TEST_F(TransferTest, A503StormIsBoundedInRequestsAndThrottlesTheHost) {
  server_.AddFault(nlohmann::json::array({{{"kind", "none"}, {"count", 1}},
                                          {{"kind", "status"}, {"code", 503}, {"count", 10}}}));
  auto before = GetTransferStats();
  auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  ExpectBytes(ReadAll(**in), data_);
  auto after = GetTransferStats();
  EXPECT_EQ(after.throttles - before.throttles, 10u);
  // Every part once, plus one request per 503: nothing else.
  EXPECT_EQ(Gets().size(), data_.size() / kPart + 10);
}

TEST_F(TransferTest, DestroyingAStreamMidPartsIsPromptAndGivesBackTheBudget) {
  server_.AddFault({{"kind", "stall"}, {"after", 10}, {"seconds", 20}, {"count", 3}});
  {
    auto in = Source()->OpenInputStream(server_.Url("/shard.tar"), 0);
    ASSERT_TRUE(in.ok()) << in.status();
    std::string buf(1000, '\0');
    (void)(*in)->Read(10, buf.data());
  }
  auto start = Clock::now();
  // A job gives back its stream's bytes just after its connection closes.
  while ((GetTransferStats().connections > 0 || GetTransferStats().bytes_in_flight > 0) &&
         Since(start) < 2)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(GetTransferStats().connections, 0);
  EXPECT_EQ(GetTransferStats().bytes_in_flight, 0u);
}

TEST_F(TransferTest, APrefetchedStreamIsTakenOverWithoutAnotherRequest) {
  auto src = Source();
  src->Prefetch(server_.Url("/shard.tar"));
  const size_t parts = data_.size() / kPart;
  const size_t window = 8;  // parts_per_stream: the first GET's part and 7 more
  auto start = Clock::now();
  while (Gets().size() < window && Since(start) < 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(Gets().size(), window);  // asked for before any open, and no further
  src->Prefetch(server_.Url("/shard.tar"));  // already under way: nothing more
  auto in = src->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  ExpectBytes(ReadAll(**in), data_);
  EXPECT_EQ(Gets().size(), parts);
}

TEST_F(TransferTest, APrefetchThatFailedLeavesTheErrorToTheOpen) {
  auto src = Source();
  src->Prefetch(server_.Url("/missing.tar"));
  auto in = src->OpenInputStream(server_.Url("/missing.tar"), 0);
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), StatusCode::kNotFound) << in.status();
}

TEST_F(TransferTest, AnOpenFromAnOffsetDoesNotTakeThePrefetch) {
  auto src = Source();
  src->Prefetch(server_.Url("/shard.tar"));
  auto in = src->OpenInputStream(server_.Url("/shard.tar"), 100);
  ASSERT_TRUE(in.ok()) << in.status();
  ExpectBytes(ReadAll(**in), data_.substr(100));
  // The prefetch is still there for an open from byte 0.
  auto whole = src->OpenInputStream(server_.Url("/shard.tar"), 0);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ExpectBytes(ReadAll(**whole), data_);
  EXPECT_EQ(Gets().size(), 2 * data_.size() / kPart);
}

TEST_F(TransferTest, AForkedChildOpensAnewInsteadOfWaitingOnItsParentsPrefetch) {
  // An object of one part: the child's own open then starts no thread (a
  // thread started after a multi-threaded fork is refused under TSan).
  const std::string small = data_.substr(0, 10000);
  testing::WriteFile(root_.Join("small.tar"), small);
  auto src = Source();
  src->Prefetch(server_.Url("/small.tar"));  // its first GET runs on an engine thread
  pid_t pid = ::fork();
  if (pid == 0) {  // the parent's prefetch has no engine thread here
    auto in = src->OpenInputStream(server_.Url("/small.tar"), 0);
    if (!in.ok()) ::_exit(2);
    auto bytes = ReadAll(**in);
    ::_exit(bytes.ok() && *bytes == small ? 0 : 3);
  }
  int status = -1;
  auto start = Clock::now();
  while (::waitpid(pid, &status, WNOHANG) == 0 && Since(start) < 20)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (Since(start) >= 20) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    FAIL() << "the child hung";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // The parent's prefetch is still its own.
  auto in = src->OpenInputStream(server_.Url("/small.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  ExpectBytes(ReadAll(**in), small);
}

// Eight processes on one node share a cache directory: each shard is
// downloaded once, in parts, and every part is asked for once in all.
TEST_F(TransferTest, EightProcessesFetchEachShardOnceInParts) {
  constexpr int kShards = 4, kProcesses = 8;
  std::vector<ShardRef> refs;
  for (int i = 0; i < kShards; ++i) {
    std::string name = "/p" + std::to_string(i) + ".tar";
    std::string bytes = RandomBytes(1 << 20, 100 + i);
    testing::WriteFile(root_.Join(name.substr(1)), bytes);
    refs.emplace_back(server_.Url(name), static_cast<int64_t>(bytes.size()),
                      ChecksumOf(bytes));
  }
  TempDir cache_dir;
  server_.ClearLog();
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcesses; ++p) {
    pid_t pid = ::fork();
    if (pid == 0) {  // the child: no gtest, an exit status
      ShardCacheOptions o;
      o.dir = cache_dir.path();
      o.limit_bytes = 64 << 20;
      o.source = Source();
      auto cache = ShardCache::Create(o);
      if (!cache.ok()) ::_exit(2);
      for (int k = 0; k < kShards; ++k) {
        const ShardRef& ref = refs[static_cast<size_t>((k + p) % kShards)];
        auto shard = (*cache)->Open(ref);
        if (!shard.ok()) ::_exit(3);
        auto bytes = ReadAll(**shard, 65536);
        if (!bytes.ok()) ::_exit(4);
        if (ChecksumOf(*bytes) != ref.checksum) ::_exit(5);
      }
      // _exit skips the cache's destructor: a download whose bytes were all
      // read may not be published yet, and its entry would be lost with the
      // process (another process then downloads the shard again).
      (*cache)->WaitIdle();
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  std::map<std::string, std::multiset<std::string>> ranges;  // path -> ranges asked for
  for (auto& g : Gets())
    ranges[g["path"].get<std::string>()].insert(g["range"].is_null() ? "" : g["range"].get<std::string>());
  ASSERT_EQ(ranges.size(), static_cast<size_t>(kShards));
  for (auto& [path, asked] : ranges) {
    EXPECT_EQ(asked.size(), (1u << 20) / kPart) << path;  // the first GET and 15 parts
    EXPECT_EQ(std::set<std::string>(asked.begin(), asked.end()).size(), asked.size()) << path;
  }
}

// A MultipartSink whose part uploads wait at a gate, counting how many wait
// at once.
class GatedSink final : public MultipartSink {
 public:
  explicit GatedSink(std::shared_ptr<MultipartSink> inner) : inner_(std::move(inner)) {}
  Result<std::string> Create(const std::string& url) override { return inner_->Create(url); }
  Result<std::string> UploadPart(const std::string& url, const std::string& id, int number,
                                 std::string_view data) override {
    {
      std::unique_lock<std::mutex> l(mu_);
      waiting_++;
      peak_ = std::max(peak_, waiting_);
      cv_.notify_all();
      cv_.wait(l, [&] { return open_; });
      waiting_--;
    }
    return inner_->UploadPart(url, id, number, data);
  }
  Status Complete(const std::string& url, const std::string& id,
                  const std::vector<std::string>& etags) override {
    return inner_->Complete(url, id, etags);
  }
  Status Abort(const std::string& url, const std::string& id) override {
    return inner_->Abort(url, id);
  }
  Result<std::vector<Pending>> ListPending(const std::string& prefix) override {
    return inner_->ListPending(prefix);
  }
  bool WaitForOne(double seconds) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::duration<double>(seconds), [&] { return waiting_ > 0; });
  }
  void Open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }
  int peak() {
    std::lock_guard<std::mutex> l(mu_);
    return peak_;
  }

 private:
  std::shared_ptr<MultipartSink> inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0, peak_ = 0;
  bool open_ = false;
};

TEST_F(TransferTest, CheckpointUploadPartsShareTheEngineAndLeaveReadsTheirConnections) {
  // 4 connections: uploads get one of them, however many parts are queued.
  Tune([](TransferOptions& o) { o.max_connections = 4; o.initial_host_connections = 4; });
  TempDir local, remote;
  auto gated = std::make_shared<GatedSink>(NewSourceMultipartSink(LocalSource(), remote.path()));
  UploaderOptions uo;
  uo.remote_source = LocalSource();
  uo.multipart = gated;
  uo.multipart_threshold = 1;
  uo.part_size = kPart;
  uo.part_threads = 4;
  auto wired = testing::WireUploader(local.path(), remote.path(), uo);
  const std::string big = RandomBytes(8 * kPart + 5, 3);
  auto before = GetTransferStats();
  ASSERT_TRUE(wired.writer->SaveFiles(1, {{"model.bin", big}}).ok());
  // The upload holds its connection at the gate while a reader streams a
  // 16-part object over the other three.
  ASSERT_TRUE(gated->WaitForOne(10));
  ExpectBytes(ReadAll(**Source()->OpenInputStream(server_.Url("/shard.tar"), 0)), data_);
  EXPECT_EQ(gated->peak(), 1);
  EXPECT_EQ(Gets().size(), data_.size() / kPart);
  gated->Open();
  ASSERT_TRUE(wired.uploader->Wait(20000).ok());
  auto uploaded = ReadFileToString(*LocalSource(), JoinUrl(JoinUrl(remote.path(), "ckpt-000001"),
                                                           "model.bin"));
  ASSERT_TRUE(uploaded.ok()) << uploaded.status();
  EXPECT_TRUE(*uploaded == big);
  auto after = GetTransferStats();
  EXPECT_EQ(after.upload_parts - before.upload_parts, 9u);
  EXPECT_EQ(after.upload_bytes - before.upload_bytes, big.size());
  EXPECT_EQ(gated->peak(), 1);
}

TEST_F(TransferTest, ADefaultWindowIsTheStreamsShareOfTheBudget) {
  // parts_per_stream 0: a stream asks for its share of the connections and
  // bytes (less the kept buffers), never fewer than 16 parts.
  Tune([](TransferOptions& o) {
    o.parts_per_stream = 0;
    o.max_connections = 40;
    o.initial_host_connections = 40;
    o.max_bytes_in_flight = 64 * kPart;
  });
  testing::WriteFile(root_.Join("a.tar"), RandomBytes(128 * kPart, 1));
  testing::WriteFile(root_.Join("b.tar"), RandomBytes(128 * kPart, 2));
  auto& engine = internal::TransferEngine::Get();
  auto src = Source();
  auto gets_of = [&](const std::string& path) {
    size_t n = 0;
    for (auto& g : Gets()) n += g["path"] == path;
    return n;
  };
  auto settled = [&](const std::string& path) {
    size_t last = 0;
    for (int stable = 0; stable < 8;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(60));
      size_t now = gets_of(path);
      stable = now == last && now > 0 ? stable + 1 : 0;
      last = now;
    }
    return last;
  };
  // Prefetches hold their streams open without a reader: each asks for its
  // window and stops. Streams of earlier tests in this process may be open.
  src->Prefetch(server_.Url("/a.tar"));
  const size_t a = settled("/a.tar");
  const int open_a = engine.OpenStreams();
  ASSERT_GE(open_a, 1);
  EXPECT_EQ(a, std::max<size_t>(16, 40 / static_cast<size_t>(open_a)));
  src->Prefetch(server_.Url("/b.tar"));
  const size_t b = settled("/b.tar");
  const int open_b = engine.OpenStreams();
  ASSERT_EQ(open_b, open_a + 1);
  EXPECT_EQ(b, std::max<size_t>(16, 40 / static_cast<size_t>(open_b)));
  if (open_a == 1) {  // alone in the process: 40 and then 20
    EXPECT_EQ(a, 40u);
    EXPECT_EQ(b, 20u);
  }
  // Both read whole and in order from there.
  for (const char* name : {"/a.tar", "/b.tar"}) {
    auto in = src->OpenInputStream(server_.Url(name), 0);
    ASSERT_TRUE(in.ok()) << in.status();
    ExpectBytes(ReadAll(**in, 1 << 16), RandomBytes(128 * kPart, name[1] == 'a' ? 1 : 2));
  }
}

TEST(TransferEngineTest, SlowStartDoublesPerRoundUntilTheHostPushesBack) {
  ScopedTransferOptions options([](TransferOptions& o) {
    o.max_connections = 64;
    o.initial_host_connections = 16;
  });
  auto& engine = internal::TransferEngine::Get();
  const std::string host = "slow-start.invalid:1";
  ASSERT_EQ(engine.HostLimit(host), 16);
  for (int i = 0; i < 16; ++i) engine.Signal(host, internal::HostSignal::kSuccess);
  EXPECT_EQ(engine.HostLimit(host), 32);  // a round of 16 parts: doubled
  for (int i = 0; i < 100; ++i) engine.Signal(host, internal::HostSignal::kSuccess);
  EXPECT_EQ(engine.HostLimit(host), 64);  // never past max_connections
  engine.Signal(host, internal::HostSignal::kThrottled);
  const double after = engine.HostLimit(host);
  EXPECT_GE(after, 25);  // halved, with jitter (0.4-0.6)
  EXPECT_LE(after, 39);
  // From here additive: a round of parts adds about four connections.
  const int round = static_cast<int>(after);
  for (int i = 0; i < round; ++i) engine.Signal(host, internal::HostSignal::kSuccess);
  EXPECT_GT(engine.HostLimit(host), after + 3);
  EXPECT_LT(engine.HostLimit(host), after + 5);
}

TEST_F(TransferTest, ConsumedPartBuffersAreReusedWithinTheBudget) {
  auto& engine = internal::TransferEngine::Get();
  const size_t n = 3 * kPart;  // a size no other test uses
  char* first = engine.TakeBuffer(n);
  ASSERT_NE(first, nullptr);
  first[0] = 'x';
  engine.GiveBuffer(first, n);  // kept (in place of one of another size if full)
  EXPECT_GE(engine.KeptBytes(), n);
  char* again = engine.TakeBuffer(n);
  EXPECT_EQ(again, first);  // the same memory, no new mapping
  EXPECT_EQ(again[0], 'x');
  engine.GiveBuffer(again, n);
  EXPECT_LE(engine.KeptBytes(), internal::TransferEngine::kKeptBuffers * n);
  // A stream under a small budget: kept buffers and parts together stay
  // within it (the part a reader waits on may go past it).
  Tune([](TransferOptions& o) {
    o.parts_per_stream = 0;
    o.max_bytes_in_flight = 12 * kPart;
  });
  testing::WriteFile(root_.Join("c.tar"), RandomBytes(64 * kPart, 3));
  auto in = Source()->OpenInputStream(server_.Url("/c.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  std::string out, buf(kPart / 4, '\0');
  uint64_t worst = 0;
  while (true) {
    auto got = (*in)->Read(buf.size(), buf.data());
    ASSERT_TRUE(got.ok()) << got.status();
    if (*got == 0) break;
    out.append(buf.data(), *got);
    worst = std::max(worst, GetTransferStats().bytes_in_flight + engine.KeptBytes());
  }
  EXPECT_TRUE(out == RandomBytes(64 * kPart, 3));
  // (Two counters read apart: a part taking a kept buffer may be counted in
  // both for a moment.)
  EXPECT_LE(worst, 12 * kPart + 2 * kPart);
}

TEST(TransferNginxTest, PartsFromNginxWithAPerConnectionCap) {
  TempDir root;
  std::string data = RandomBytes(24 << 20, 5);
  testing::WriteFile(root.Join("big.tar"), data);
  testing::NginxServer nginx(root.path(), "limit_rate 4m;");
  ScopedTransferOptions options([](TransferOptions& o) { o.part_size = 1 << 20; });
  auto start = Clock::now();
  auto in = NewHttpSource()->OpenInputStream(nginx.Url("/big.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  auto got = ReadAll(**in, 1 << 20);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == data);
  // One connection at 4 MB/s would take 6 s; 16 at once take well under 2.
  EXPECT_LT(Since(start), 3.5);
}

}  // namespace
}  // namespace shardstream
