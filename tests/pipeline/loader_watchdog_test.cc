// The loader's watchdog: a next() that waits watchdog_s for a batch reports
// what each reader lane is at, in the log and in stats(), and with
// watchdog_error fails instead of waiting on.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/log_capture.h"
#include "shardstream/loader.h"
#include "support/loader_fixture.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::DatasetSpec;
using testing::FieldOptions;
using testing::TempDir;

// Streams of shards whose url contains `filter` stop after `after` bytes
// until the gate opens: a server that stopped sending mid-shard.
class GatedSource final : public SourceWrapper {
 public:
  GatedSource(std::string filter, uint64_t after)
      : SourceWrapper(LocalSource()), filter_(std::move(filter)), after_(after) {}
  void Open() { open_ = true; }

  Result<std::unique_ptr<InputStream>> OpenInputStream(const std::string& url,
                                                       uint64_t offset) override {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto in, SourceWrapper::OpenInputStream(url, offset));
    if (url.find(filter_) == std::string::npos) return in;
    return std::unique_ptr<InputStream>(new Gated(std::move(in), this));
  }

 private:
  class Gated final : public InputStream {
   public:
    Gated(std::unique_ptr<InputStream> in, GatedSource* s) : in_(std::move(in)), s_(s) {}
    const std::string& url() const override { return in_->url(); }
    uint64_t position() const override { return in_->position(); }
    std::optional<uint64_t> size() const override { return in_->size(); }
    Result<size_t> Read(size_t n, void* out) override {
      const uint64_t pos = in_->position();
      if (pos < s_->after_) {
        n = std::min<uint64_t>(n, s_->after_ - pos);
      } else {
        while (!s_->open_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      return in_->Read(n, out);
    }

   private:
    std::unique_ptr<InputStream> in_;
    GatedSource* s_;
  };

  const std::string filter_;
  const uint64_t after_;
  std::atomic<bool> open_{false};
};

// Every shard but shard 1 reads freely; shard 1 stops after 40 samples'
// worth of bytes, so the epoch's batches stop coming once the others are read.
struct Stalled {
  TempDir dir;
  testing::Dataset d = testing::WriteDataset(dir.path(), DatasetSpec{3, 60});
  std::shared_ptr<GatedSource> source = std::make_shared<GatedSource>("shard-000001", 40 * 2048);
  LoaderOptions Options(double watchdog_s) const {
    LoaderOptions o = FieldOptions(d.manifest);
    o.source = source.get();
    o.shuffle_buffer = 0;
    o.watchdog_s = watchdog_s;
    return o;
  }
};

// Batches until next() has waited `timeout` for one (then the call is
// still running in `waiter`), or an error or the end.
struct Drain {
  std::atomic<int> batches{0};
  std::atomic<bool> done{false};
  Status error;
  std::thread waiter;
  explicit Drain(Loader* loader) {
    waiter = std::thread([this, loader] {
      while (true) {
        auto b = loader->next();
        if (!b.ok()) {
          error = b.status();
          break;
        }
        if (b->empty()) break;
        ++batches;
      }
      done = true;
    });
  }
  ~Drain() {
    if (waiter.joinable()) waiter.join();
  }
};

TEST(LoaderWatchdogTest, AStalledShardIsReportedWithItsLaneAndByteThenTheEpochGoesOn) {
  Stalled s;
  internal::ScopedLogCapture log;
  auto loader = *Loader::Create(s.Options(0.3));
  Drain drain(loader.get());
  // Wait for the first report: the stalled lane names shard 1, its url and a byte offset.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (loader->stats().watchdog_reports == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  LoaderStats st = loader->stats();
  ASSERT_GE(st.watchdog_reports, 1u);
  EXPECT_FALSE(drain.done);
  EXPECT_GT(st.waiting_seconds, 0.25);
  const std::string& report = st.watchdog_report;
  EXPECT_NE(report.find("no batch for"), std::string::npos) << report;
  EXPECT_NE(report.find("reading shard 1 (" + s.d.shard_paths[1]), std::string::npos) << report;
  EXPECT_NE(report.find(" at byte "), std::string::npos) << report;
  EXPECT_NE(report.find("lane 0:"), std::string::npos) << report;
  EXPECT_NE(report.find("transfer: "), std::string::npos) << report;
  EXPECT_NE(log.Text().find("reading shard 1 ("), std::string::npos);
  // Reported again at each further multiple while it still waits.
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (loader->stats().watchdog_reports < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GE(loader->stats().watchdog_reports, 2u);
  // The source comes back: every sample arrives, nothing lost.
  s.source->Open();
  drain.waiter.join();
  EXPECT_TRUE(drain.error.ok()) << drain.error;
  EXPECT_EQ(drain.batches, (180 + 7) / 8);
  EXPECT_EQ(loader->stats().waiting_seconds, 0);
}

TEST(LoaderWatchdogTest, WithWatchdogErrorTheWaitFailsNamingTheStalledShard) {
  Stalled s;
  LoaderOptions o = s.Options(0.3);
  o.watchdog_error = true;
  auto loader = *Loader::Create(o);
  Status err;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 100 && err.ok(); ++i) {
    auto b = loader->next();
    if (!b.ok()) err = b.status();
    else ASSERT_FALSE(b->empty()) << "the epoch ended without the stall";
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(err.code(), StatusCode::kUnavailable) << err;
  EXPECT_NE(err.message().find("reading shard 1 (" + s.d.shard_paths[1]), std::string::npos) << err;
  EXPECT_NE(err.message().find("watchdog_error"), std::string::npos) << err;
  EXPECT_LT(waited, 20.0);
  EXPECT_EQ(loader->next().status().code(), StatusCode::kUnavailable);  // sticky
  s.source->Open();
  // A new epoch reads again.
  ASSERT_TRUE(loader->set_epoch(1).ok());
  auto ids = testing::DrainIds(loader.get());
  EXPECT_EQ(ids.size(), 180u);
}

TEST(LoaderWatchdogTest, OffMeansOff) {
  Stalled s;
  auto loader = *Loader::Create(s.Options(0));
  Drain drain(loader.get());
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  EXPECT_FALSE(drain.done);  // it is waiting: the control that the stall holds
  EXPECT_GT(loader->stats().waiting_seconds, 0.5);
  EXPECT_EQ(loader->stats().watchdog_reports, 0u);
  s.source->Open();
  drain.waiter.join();
  EXPECT_TRUE(drain.error.ok()) << drain.error;
  EXPECT_EQ(loader->stats().watchdog_reports, 0u);
}

}  // namespace
}  // namespace shardstream
