// `shardstream plan MANIFEST --world-size W ...`: prints which shard ranges
// each consumer (rank x worker) reads in an epoch, and how many samples.
#include <nlohmann/json.hpp>

#include <iostream>

#include "shardstream/dataset_inputs.h"
#include "shardstream/manifest.h"
#include "shardstream/resume_state.h"
#include "shardstream/shard_split.h"
#include "shardstream/url.h"
#include "tools/command.h"

namespace shardstream::tools {
namespace {

struct PlanArgs {
  std::string manifest;
  int world_size = 1;
  int workers = 1;
  int64_t epoch = 0;
  uint64_t seed = 0;
  int rank = -1;  // -1: every rank
  bool node_local = false;
  int local_world_size = 0;
  bool pad = false;
  bool json = false;
  std::string resume;
};

Result<ResumeState> LoadState(const std::string& url) {
  SHARDSTREAM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(*DefaultSource(), url));
  if (text.rfind("SSRS", 0) == 0) return ResumeState::FromBytes(text);
  return ResumeState::FromJson(text);
}

std::string RangeText(const ShardRange& r) {
  if (r.end == ShardRange::kWholeShard) return "[all samples]";
  return "[" + std::to_string(r.first) + ", " + std::to_string(r.end) + ")";
}

int RunPlan(const PlanArgs& a) {
  // A dry run: sample counts from existing indexes only, no shard is read.
  ResolveOptions ro;
  ro.build_indexes = false;
  auto manifest = ResolveDataset({a.manifest}, ro);
  if (!manifest.ok()) {
    std::cerr << "shardstream plan: " << manifest.status() << "\n";
    return 1;
  }
  PlanOptions o;
  o.seed = a.seed;
  o.epoch = a.epoch;
  o.world_size = a.world_size;
  o.num_workers = a.workers;
  o.rank = a.rank < 0 ? 0 : a.rank;
  o.remainder = a.pad ? Remainder::kPad : Remainder::kDrop;
  o.node_local = a.node_local;
  o.local_world_size = a.local_world_size;
  std::optional<ResumeState> state;
  if (!a.resume.empty()) {
    auto s = LoadState(a.resume);
    if (!s.ok()) {
      std::cerr << "shardstream plan: " << s.status().WithContext("reading " + RedactUrl(a.resume))
                << "\n";
      return 1;
    }
    state = std::move(s).value();
  }
  auto plan = EpochPlan::Create(*manifest, o, state ? &*state : nullptr);
  if (!plan.ok()) {
    std::cerr << "shardstream plan: " << plan.status() << "\n";
    return 1;
  }
  const int first_rank = a.rank < 0 ? 0 : a.rank;
  const int last_rank = a.rank < 0 ? a.world_size - 1 : a.rank;
  const auto& shards = manifest->shards;
  if (a.json) {
    nlohmann::json out;
    out["manifest"] = RedactUrl(a.manifest);
    out["shards"] = shards.size();
    out["total_samples"] = manifest->TotalSamples();
    out["seed"] = a.seed;
    out["epoch"] = a.epoch;
    out["world_size"] = a.world_size;
    out["num_workers"] = a.workers;
    out["counts_known"] = plan->counts_known();
    out["samples_per_consumer"] = plan->samples_per_consumer();
    out["shards_per_consumer"] = plan->shards_per_consumer();
    out["dropped"] = plan->dropped();
    out["padded"] = plan->padded();
    out["caveat"] = plan->caveat();
    nlohmann::json consumers = nlohmann::json::array();
    for (int r = first_rank; r <= last_rank; ++r) {
      for (int w = 0; w < a.workers; ++w) {
        ConsumerPlan cp = plan->Consumer(r, w);
        nlohmann::json ranges = nlohmann::json::array();
        for (const ShardRange& sr : cp.ranges)
          ranges.push_back({{"shard", sr.shard},
                            {"url", RedactUrl(shards[static_cast<size_t>(sr.shard)].url)},
                            {"first", sr.first},
                            {"end", sr.end},
                            {"repeat", sr.repeat}});
        consumers.push_back({{"rank", r},
                             {"worker", w},
                             {"samples", cp.num_samples},
                             {"ranges", std::move(ranges)}});
      }
    }
    out["consumers"] = std::move(consumers);
    std::cout << out.dump(1) << "\n";
    return 0;
  }
  std::cout << "manifest " << RedactUrl(a.manifest) << ": " << shards.size() << " shards, ";
  if (plan->counts_known())
    std::cout << manifest->TotalSamples() << " samples\n";
  else
    std::cout << "sample counts unknown\nwarning: " << plan->caveat() << "\n";
  std::cout << "epoch " << a.epoch << ", seed " << a.seed << ": " << plan->num_consumers()
            << " consumers (" << a.world_size << " ranks x " << a.workers << " workers), ";
  if (plan->counts_known())
    std::cout << plan->samples_per_consumer() << " samples each";
  else
    std::cout << plan->shards_per_consumer() << " shards each";
  std::cout << ", dropped " << plan->dropped() << ", padded " << plan->padded() << "\n";
  for (int r = first_rank; r <= last_rank; ++r) {
    for (int w = 0; w < a.workers; ++w) {
      ConsumerPlan cp = plan->Consumer(r, w);
      std::cout << "rank " << r << " worker " << w << ": ";
      if (cp.num_samples >= 0) std::cout << cp.num_samples << " samples in ";
      std::cout << cp.ranges.size() << " ranges\n";
      for (const ShardRange& sr : cp.ranges)
        std::cout << "  shard " << sr.shard << " "
                  << RedactUrl(shards[static_cast<size_t>(sr.shard)].url) << " " << RangeText(sr)
                  << (sr.repeat ? " (repeat)" : "") << "\n";
    }
  }
  return 0;
}

}  // namespace
}  // namespace shardstream::tools

SHARDSTREAM_COMMAND(plan, [](CLI::App& app) {
  using namespace shardstream::tools;
  auto args = std::make_shared<PlanArgs>();
  auto* sub = app.add_subcommand(
      "plan", "Print each consumer's shard ranges and sample count for an epoch");
  sub->add_option("MANIFEST", args->manifest, "manifest (jsonl, csv, json) or brace pattern")
      ->required();
  sub->add_option("--world-size", args->world_size, "number of ranks")->required()
      ->check(CLI::PositiveNumber);
  sub->add_option("--workers", args->workers, "DataLoader workers per rank (default 1)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--epoch", args->epoch, "epoch (default 0)")->check(CLI::NonNegativeNumber);
  sub->add_option("--seed", args->seed, "shuffle seed (default 0)");
  sub->add_option("--rank", args->rank, "print only this rank (default: all)")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--node-local", args->node_local,
                "assign shards to nodes once for all epochs (needs --local-world-size)");
  sub->add_option("--local-world-size", args->local_world_size, "ranks per node");
  sub->add_flag("--pad", args->pad, "pad the remainder by wrapping instead of dropping it");
  sub->add_option("--resume", args->resume, "resume state (JSON or binary) to plan the rest of");
  sub->add_flag("--json", args->json, "print JSON");
  sub->callback([args] {
    if (args->rank >= args->world_size) {
      std::cerr << "shardstream plan: --rank " << args->rank << " outside --world-size "
                << args->world_size << "\n";
      ExitWith(1);
      return;
    }
    ExitWith(RunPlan(*args));
  });
});
