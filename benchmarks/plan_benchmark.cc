// Plan benchmark: 1,000,000 shards for 4,096 consumers (512 ranks x 8
// workers). Each scenario runs in a forked child, so its peak RSS
// (getrusage via wait4) is its own; times are the median of --runs runs.
//
//   build/benchmarks/plan_benchmark [--shards N] [--ranks R] [--workers K] [--runs N]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "shardstream/delivery_tracker.h"
#include "shardstream/manifest.h"
#include "shardstream/shard_split.h"

using namespace shardstream;

namespace {

struct Config {
  int64_t shards = 1000000;
  int ranks = 512;
  int workers = 8;
  int runs = 7;
};

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Uneven counts, 500..1499 samples per shard, from a fixed LCG.
std::vector<int64_t> Counts(int64_t n) {
  std::vector<int64_t> counts(static_cast<size_t>(n));
  uint64_t x = 12345;
  for (auto& c : counts) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    c = 500 + static_cast<int64_t>((x >> 33) % 1000);
  }
  return counts;
}

double MaxRssMiB() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

void Die(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
  std::exit(1);
}

// Runs `body` --runs times in a child process (after `setup` there), prints
// the median and the child's peak RSS.
void Scenario(const char* name, const Config& cfg, std::function<void()> setup,
              std::function<std::string()> body) {
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    setup();
    double rss_before = MaxRssMiB();
    std::vector<double> times;
    std::string note;
    for (int r = 0; r < cfg.runs; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      note = body();
      times.push_back(Seconds(t0));
    }
    std::sort(times.begin(), times.end());
    std::printf("%-44s median %9.3f ms  (min %9.3f, max %9.3f)  peak RSS %6.1f MiB "
                "(%.1f MiB before the timed part)  %s\n",
                name, 1e3 * times[times.size() / 2], 1e3 * times.front(), 1e3 * times.back(),
                MaxRssMiB(), rss_before, note.c_str());
    std::fflush(stdout);
    _exit(0);
  }
  int status = 0;
  rusage ru{};
  wait4(pid, &status, 0, &ru);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "%s failed\n", name);
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    long v = std::atol(argv[i + 1]);
    if (k == "--shards") cfg.shards = v;
    else if (k == "--ranks") cfg.ranks = static_cast<int>(v);
    else if (k == "--workers") cfg.workers = static_cast<int>(v);
    else if (k == "--runs") cfg.runs = static_cast<int>(v);
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  std::printf("plan benchmark: %lld shards, %d ranks x %d workers = %d consumers, %d runs\n",
              static_cast<long long>(cfg.shards), cfg.ranks, cfg.workers, cfg.ranks * cfg.workers,
              cfg.runs);
  PlanOptions o;
  o.seed = 1234;
  o.epoch = 3;
  o.world_size = cfg.ranks;
  o.num_workers = cfg.workers;
  static std::vector<int64_t> counts;
  static Manifest manifest;
  static std::optional<EpochPlan> built;
  static ResumeState state;
  auto make_counts = [&] { counts = Counts(cfg.shards); };

  auto all_consumers = [&](const EpochPlan& plan) {
    size_t ranges = 0;
    for (int r = 0; r < o.world_size; ++r)
      for (int w = 0; w < o.num_workers; ++w) ranges += plan.Consumer(r, w).ranges.size();
    return ranges;
  };
  // All consumers' plans held at once, as a launcher printing them would.
  Scenario("all consumers (plans kept in memory)", cfg, make_counts, [&] {
    auto plan = EpochPlan::Create(counts, "fp", o);
    if (!plan.ok()) Die(plan.status());
    std::vector<ConsumerPlan> plans;
    plans.reserve(static_cast<size_t>(plan->num_consumers()));
    size_t ranges = 0;
    for (int r = 0; r < o.world_size; ++r)
      for (int w = 0; w < o.num_workers; ++w) {
        plans.push_back(plan->Consumer(r, w));
        ranges += plans.back().ranges.size();
      }
    return std::to_string(ranges) + " ranges, " + std::to_string(plan->samples_per_consumer()) +
           " samples each, dropped " + std::to_string(plan->dropped());
  });
  Scenario("all consumers (streamed)", cfg, make_counts, [&] {
    auto plan = EpochPlan::Create(counts, "fp", o);
    if (!plan.ok()) Die(plan.status());
    return std::to_string(all_consumers(*plan)) + " ranges";
  });
  // PlanConsumer shuffles only as far as the consumer's span: the middle
  // rank is the typical cost, the last consumer the worst.
  for (auto [name, rank, worker] :
       {std::make_tuple("one consumer: PlanConsumer, first", 0, 0),
        std::make_tuple("one consumer: PlanConsumer, middle", cfg.ranks / 2, 0),
        std::make_tuple("one consumer: PlanConsumer, last", cfg.ranks - 1, cfg.workers - 1)}) {
    Scenario(name, cfg, make_counts, [&, rank = rank, worker = worker] {
      PlanOptions one = o;
      one.rank = rank;
      one.worker = worker;
      auto plan = PlanConsumer(counts, "fp", one);
      if (!plan.ok()) Die(plan.status());
      return std::to_string(plan->ranges.size()) + " ranges";
    });
  }
  Scenario("one consumer: EpochPlan::Create + ThisConsumer", cfg, make_counts, [&] {
    PlanOptions one = o;
    one.rank = o.world_size / 2;
    auto plan = EpochPlan::Create(counts, "fp", one);
    if (!plan.ok()) Die(plan.status());
    return std::to_string(plan->ThisConsumer().ranges.size()) + " ranges";
  });
  Scenario("one consumer from a built EpochPlan", cfg,
           [&] {
             make_counts();
             built.emplace(*EpochPlan::Create(counts, "fp", o));
           },
           [&] {
             size_t n = 0;
             for (int i = 0; i < 1000; ++i) n += built->Consumer(i % o.world_size, 0).ranges.size();
             return "x1000 calls, " + std::to_string(n / 1000) + " ranges each (time is for 1000)";
           });
  Scenario("node-local (8 ranks per node), all consumers", cfg, make_counts, [&] {
    PlanOptions nl = o;
    nl.node_local = true;
    nl.local_world_size = 8;
    auto plan = EpochPlan::Create(counts, "fp", nl);
    if (!plan.ok()) Die(plan.status());
    return std::to_string(all_consumers(*plan)) + " ranges, dropped " +
           std::to_string(plan->dropped());
  });
  Scenario("resume (every consumer half done), all", cfg,
           [&] {
             make_counts();
             auto plan = *EpochPlan::Create(counts, "fp", o);
             std::vector<ResumeState> states;
             state = *plan.base();
             for (int r = 0; r < o.world_size; ++r)
               for (int w = 0; w < o.num_workers; ++w) {
                 ConsumerPlan cp = plan.Consumer(r, w);
                 int64_t p = cp.ranges.front().position;
                 state.delivered.emplace_back(p, p + cp.num_samples / 2);
               }
             state.Normalize();
           },
           [&] {
             PlanOptions other = o;
             other.world_size = o.world_size / 2;  // resume on half the ranks
             auto plan = EpochPlan::Create(counts, "fp", other, &state);
             if (!plan.ok()) Die(plan.status());
             size_t ranges = 0;
             for (int r = 0; r < other.world_size; ++r)
               for (int w = 0; w < other.num_workers; ++w)
                 ranges += plan->Consumer(r, w).ranges.size();
             return std::to_string(ranges) + " ranges, state " +
                    std::to_string(state.ToBytes().size()) + " bytes";
           });
  // With a full in-memory Manifest (ShardEntry strings and maps), as
  // EpochPlan::Create(manifest, ...) sees it; Fingerprint() included.
  Scenario("from a Manifest of ShardEntry, all consumers", cfg,
           [&] {
             manifest.shards.resize(static_cast<size_t>(cfg.shards));
             std::vector<int64_t> c = Counts(cfg.shards);
             char name[32];
             for (size_t i = 0; i < manifest.shards.size(); ++i) {
               std::snprintf(name, sizeof(name), "d/%07zu.tar", i);
               manifest.shards[i].url = name;
               manifest.shards[i].resolved = name;
               manifest.shards[i].nsamples = c[i];
               manifest.shards[i].size = c[i] * 4096;
             }
           },
           [&] {
             auto plan = EpochPlan::Create(manifest, o);
             if (!plan.ok()) Die(plan.status());
             return std::to_string(all_consumers(*plan)) + " ranges";
           });
  return 0;
}
