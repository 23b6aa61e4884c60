// CPU controls: reader_cpus confines the loader's worker threads and
// reader_nice lowers their priority, observed from the threads that read the
// shards (through the Source); the consumer's own thread is left alone.
#include <gtest/gtest.h>

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/thread_controls.h"
#include "shardstream/loader.h"
#include "support/loader_fixture.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::DatasetSpec;
using testing::FieldOptions;
using testing::TempDir;

int Nice() {
  errno = 0;
  return getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
}

// Records, for every stream a worker thread opens, that thread's CPUs and
// niceness.
class WhoReads final : public SourceWrapper {
 public:
  WhoReads() : SourceWrapper(LocalSource()) {}
  Result<std::unique_ptr<InputStream>> OpenInputStream(const std::string& url,
                                                       uint64_t offset) override {
    char name[16] = {};
    pthread_getname_np(pthread_self(), name, sizeof(name));
    // The plan reads indexes on the consumer's thread; the workers read the shards.
    if (std::string(name) == "ss-worker") {
      std::lock_guard<std::mutex> lock(mu_);
      cpus_.insert(internal::FormatCpuList(internal::ThreadCpus()));
      nices_.insert(Nice());
    }
    return SourceWrapper::OpenInputStream(url, offset);
  }
  std::set<std::string> cpus() {
    std::lock_guard<std::mutex> lock(mu_);
    return cpus_;
  }
  std::set<int> nices() {
    std::lock_guard<std::mutex> lock(mu_);
    return nices_;
  }

 private:
  std::mutex mu_;
  std::set<std::string> cpus_;
  std::set<int> nices_;
};

int64_t Drain(Loader* loader) {
  int64_t samples = 0;
  while (true) {
    auto b = loader->next();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok() || b->empty()) return samples;
    samples += b->rows();
  }
}

TEST(ThreadControlsTest, CpuListsAreWrittenAsTheKernelDoes) {
  EXPECT_EQ(internal::FormatCpuList({}), "");
  EXPECT_EQ(internal::FormatCpuList({3}), "3");
  EXPECT_EQ(internal::FormatCpuList({8, 0, 1, 2, 3, 3}), "0-3,8");
  EXPECT_EQ(internal::FormatCpuList({1, 3, 5, 6}), "1,3,5-6");
  EXPECT_FALSE(internal::ThreadCpus().empty());
  EXPECT_EQ(internal::ProcessCpus(), internal::ThreadCpus());  // an unconfined test thread
}

TEST(LoaderThreadControlsTest, WorkerThreadsRunOnTheirCpusAtTheirNiceness) {
  const std::vector<int> allowed = internal::ThreadCpus();
  ASSERT_FALSE(allowed.empty());
  const std::string before = internal::FormatCpuList(allowed);
  const int nice = Nice();
  ASSERT_LE(nice, 19 - 7) << "the test needs room to raise the niceness";
  // The last CPU this process may use: not the whole set, where there are several.
  const std::vector<int> mine = {allowed.back()};

  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{4, 40});
  WhoReads plain, controlled;
  LoaderOptions o = FieldOptions(d.manifest);
  o.reader_threads = 2;
  o.source = &plain;
  auto a = *Loader::Create(o);
  const int64_t total = Drain(a.get());
  EXPECT_EQ(total, d.samples);
  // Without the options the workers inherit the consumer's CPUs and niceness
  // (the control for what follows).
  EXPECT_EQ(plain.cpus(), std::set<std::string>{before});
  EXPECT_EQ(plain.nices(), std::set<int>{nice});

  o.source = &controlled;
  o.reader_cpus = mine;
  o.reader_nice = 7;
  auto b = *Loader::Create(o);
  EXPECT_EQ(Drain(b.get()), total);
  EXPECT_EQ(controlled.cpus(), std::set<std::string>{internal::FormatCpuList(mine)});
  EXPECT_EQ(controlled.nices(), std::set<int>{nice + 7});
  // The consumer's thread is as it was.
  EXPECT_EQ(internal::FormatCpuList(internal::ThreadCpus()), before);
  EXPECT_EQ(Nice(), nice);
}

// A training thread confined to one CPU gives its readers the others: what
// the process may use counts, not what the calling thread was given.
TEST(LoaderThreadControlsTest, AConsumerPinnedToOneCpuGivesItsWorkersAnother) {
  const std::vector<int> all = internal::ThreadCpus();
  const std::vector<int> consumer = {all.front()}, workers = {all.back()};
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{2, 30});
  WhoReads who;
  LoaderOptions o = FieldOptions(d.manifest);
  o.source = &who;
  o.reader_cpus = workers;
  struct Restore {
    const std::vector<int>& cpus;
    ~Restore() {
      cpu_set_t back;
      CPU_ZERO(&back);
      for (int c : cpus) CPU_SET(c, &back);
      sched_setaffinity(0, sizeof(back), &back);
    }
  } restore{all};
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(consumer[0], &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(internal::ProcessCpus(), all);
  auto r = Loader::Create(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Drain(r->get()), d.samples);
  EXPECT_EQ(who.cpus(), std::set<std::string>{internal::FormatCpuList(workers)});
  EXPECT_EQ(internal::ThreadCpus(), consumer);
}

TEST(LoaderThreadControlsTest, ACpuTheProcessMayNotUseOrANicenessOutOfRangeIsAConfigError) {
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{1, 4});
  LoaderOptions o = FieldOptions(d.manifest);
  o.reader_cpus = {CPU_SETSIZE - 1};
  auto r = Loader::Create(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kConfig);
  EXPECT_NE(r.status().message().find("reader_cpus: CPU " + std::to_string(CPU_SETSIZE - 1) +
                                      " is not one this process may use (" +
                                      internal::FormatCpuList(internal::ThreadCpus()) + ")"),
            std::string::npos)
      << r.status();
  o.reader_cpus = {-1};
  EXPECT_EQ(Loader::Create(o).status().code(), StatusCode::kConfig);
  o.reader_cpus = {};
  o.reader_nice = 20;
  r = Loader::Create(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("reader_nice 20: expected 0-19"), std::string::npos)
      << r.status();
  o.reader_nice = -1;
  EXPECT_EQ(Loader::Create(o).status().code(), StatusCode::kConfig);
}

}  // namespace
}  // namespace shardstream
