// Loader::Impl's planning and tracking: an epoch's plan for this consumer
// (mixed layout, resume, the equal-batches target), what the cut leaves out,
// and handing delivered samples to the tracker in sorted runs.
#include "pipeline/loader_impl.h"

#include <algorithm>
#include <cstdio>

#include "common/log.h"
#include "shardstream/transfer.h"
#include "shardstream/url.h"

namespace shardstream {

std::string Loader::Impl::WatchdogReport(double waited) {
  char head[96];
  std::snprintf(head, sizeof(head), "loader: no batch for %.1f s (watchdog_s %g, ", waited,
                opt.watchdog_s);
  std::string s = head + std::string("consumer ") +
                  std::to_string(plan.consumer) + ", epoch " + std::to_string(epoch) +
                  ", batch " + std::to_string(returned) + ")";
  {
    std::lock_guard<std::mutex> lock(run_mu);
    if (run)
      for (const std::string& lane : run->Describe()) s += "\n  " + lane;
  }
  const TransferStats t = GetTransferStats();
  s += "\n  transfer: " + std::to_string(t.connections) + " connections open, " +
       std::to_string(t.bytes_in_flight >> 10) + " KiB in flight, " + std::to_string(t.retries) +
       " retries (" + std::to_string(t.stalls) + " after a stall, " + std::to_string(t.throttles) +
       " throttled) since the process started";
  return s;
}

void Loader::Impl::FlushDeliveries() {
  std::sort(pending.begin(), pending.end(), [](const Run& a, const Run& b) {
    return a.shard != b.shard ? a.shard < b.shard : a.first < b.first;
  });
  for (size_t i = 0; i < pending.size();) {
    int64_t end = pending[i].end;
    size_t j = i + 1;
    while (j < pending.size() && pending[j].shard == pending[i].shard && pending[j].first == end)
      end = pending[j++].end;
    Status s = tracker->MarkDelivered(pending[i].shard, pending[i].first, end);
    if (!s.ok() && !warned_untracked) {
      warned_untracked = true;
      internal::Log().warn("loader: delivery not tracked: {}", s.ToString());
    }
    i = j;
  }
  pending.clear();
}

std::shared_ptr<const internal::ShardNames> Loader::Impl::PlanNames() const {
  std::vector<int64_t> shards;
  shards.reserve(plan.ranges.size());
  for (const ShardRange& r : plan.ranges) shards.push_back(r.shard);
  std::sort(shards.begin(), shards.end());
  shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
  std::vector<std::string> urls;
  urls.reserve(shards.size());
  for (int64_t s : shards) {
    if (mixing()) {
      const ShardEntry& e = layout.shards()[static_cast<size_t>(s)];
      urls.push_back(RedactUrl(e.resolved.empty() ? e.url : e.resolved));
    } else {
      urls.push_back(RedactUrl(manifest.resolved(static_cast<size_t>(s))));
    }
  }
  return std::make_shared<const internal::ShardNames>(std::move(shards), std::move(urls));
}

Status Loader::Impl::Plan(const ResumeState* resume, int64_t e, int64_t batches_left) {
  EndRun();
  PlanOptions po;
  po.seed = opt.seed;
  po.epoch = e;
  po.world_size = opt.world_size;
  po.rank = opt.rank;
  po.num_workers = opt.num_workers;
  po.worker = opt.worker;
  po.remainder = opt.pad_remainder ? Remainder::kPad : Remainder::kDrop;
  po.node_local = opt.node_local;
  po.local_world_size = opt.local_world_size;
  if (opt.mode == LoaderMode::kEval) {
    po.in_order = true;
    po.remainder = Remainder::kSpread;
  }
  // An eval-mode epoch is laid out in another order: its states name it, so
  // a train loader refuses them (and the other way round).
  // A mixed epoch is laid out for its nodes: a resumed one as it was saved.
  const int64_t nodes = resume != nullptr ? resume->nodes
                        : opt.node_local ? opt.world_size / std::max(1, opt.local_world_size)
                                         : 1;
  if (mixing()) {
    SHARDSTREAM_RETURN_IF_ERROR(layout.LayOut(manifest, e, std::max<int64_t>(1, nodes)));
    if (nodes > 1) po.node_of = layout.nodes();
  }
  std::vector<int64_t> counts(mixing() ? layout.shards().size() : manifest.size());
  for (size_t i = 0; i < counts.size(); ++i)
    counts[i] = mixing() ? layout.shards()[i].nsamples : manifest.nsamples(i);
  const std::string fingerprint = DataFingerprint();
  SHARDSTREAM_ASSIGN_OR_RETURN(plan, PlanConsumer(counts, fingerprint, po, resume));
  plan_counts = mixing() ? std::move(counts) : std::vector<int64_t>();
  std::vector<int64_t>().swap(counts);
  tracker = std::make_unique<DeliveryTracker>(plan);
  plan_fingerprint = fingerprint;
  plan_options = po;
  plan_resume = resume != nullptr ? std::make_shared<const ResumeState>(*resume) : nullptr;
  pending.clear();
  pending.reserve(kPendingDeliveries);
  has_carry = false;
  epoch = e;
  ended = false;
  sticky = Status::OK();
  // Token batches: how many this consumer returns.
  batch_target = token_batches = -1;
  returned = 0;
  equal_cut = false;
  if (opt.mode == LoaderMode::kEval) return Status::OK();
  const bool several = static_cast<int64_t>(opt.world_size) * opt.num_workers > 1;
  if (opt.tokens.field.empty()) {
    // Sample batches: every consumer reads as many samples, so returns as
    // many batches, unless it skips some under error_policy. Ending early
    // would leave the other DDP ranks in their next all-reduce: it pads up
    // to the count (LoaderRun::PadToTarget).
    // A consumer's own state (a worker resumed alone): exactly its count.
    if (batches_left >= 0) {
      batch_target = batches_left;
    } else if (opt.error_policy != ErrorPolicy::kRaise && several && plan.num_samples >= 0) {
      batch_target = SampleBatches(plan.num_samples);
    }
    return Status::OK();
  }
  const bool equal = opt.tokens.equal_batches;
  if (equal && batches_left >= 0) {  // a consumer's own state: exactly its count
    batch_target = token_batches = batches_left;
    return Status::OK();
  }
  if (opt.tokens.tokenize) {
    // Tokens made while reading have no count before: nothing to equalize by.
    if (equal && several)
      return Status::Config("loader: equal batches on every rank need every document's token count "
                            "before the epoch, and a tokenizer makes tokens only as it reads; set "
                            "tokens.equal_batches=false (and end the epoch by a step count), or "
                            "tokenize ahead into token shards (shardstream.convert)");
    return Status::OK();
  }
  if (plan.num_samples < 0) {
    if (equal && several)
      return Status::Config("loader: equal batches on every rank need the data set's sample counts "
                            "(" + plan.caveat + "); write a manifest or sample indexes, or set "
                            "tokens.equal_batches=false");
    return Status::OK();
  }
  if (!equal || !several) {
    token_batches = kNotCounted;  // counted when asked (batches_per_epoch)
    return Status::OK();
  }
  SHARDSTREAM_RETURN_IF_ERROR(LoadTokenCounts());
  // Every consumer's count, from the same plan every consumer makes: the
  // smallest is everyone's.
  SHARDSTREAM_ASSIGN_OR_RETURN(EpochPlan all, EpochPlan::Create(PlanCounts(), fingerprint, po, resume));
  batch_target = token_batches =
      budget->LeastBatches(all, opt.world_size, opt.num_workers, Locator(), partial);
  equal_cut = true;
  return Status::OK();
}

void Loader::Impl::CountCut() {
  FlushDeliveries();
  uint64_t docs = 0, tokens = 0;
  tracker->ForEachRemaining([&](int64_t shard, int64_t first, int64_t end) {
    const auto [real, base] = Locate(shard);
    docs += static_cast<uint64_t>(end - first);
    tokens += static_cast<uint64_t>(budget->Tokens(real, first + base, end + base));
    // Documents partly delivered (before a restore, or by the last batch)
    // lost only their rest.
    if (has_carry && carry.shard == shard && carry.sample >= first && carry.sample < end) {
      const int64_t n = budget->Tokens(real, carry.sample + base, carry.sample + base + 1);
      tokens -= static_cast<uint64_t>(std::min(n, carry.tokens));
    }
    for (auto it = partial.lower_bound({shard, first});
         it != partial.end() && it->first.first == shard && it->first.second < end; ++it) {
      if (has_carry && carry.shard == shard && carry.sample == it->first.second) continue;
      const int64_t i = it->first.second;
      const int64_t n = budget->Tokens(real, i + base, i + base + 1);
      tokens -= static_cast<uint64_t>(std::min(n, it->second));
    }
  });
  std::lock_guard<std::mutex> lock(stats_mu);
  cut_samples += docs;
  cut_tokens += tokens;
  if (docs > 0)
    internal::Log().info("loader: equal batches ended consumer {}'s epoch {} after {} batches, "
                         "{} documents ({} tokens) short of its plan (stats: cut_samples, "
                         "cut_tokens)", plan.consumer, epoch, returned, docs, tokens);
}

Status Loader::Impl::Deliver(const Batch& b) {
  if (plan.num_samples < 0) return Status::OK();  // unknown counts: nothing to track
  const int64_t n = b.num_samples();
  for (int64_t i = 0; i < n; ++i) {
    SampleId id = b.sample(i);
    AddDelivered(id);
    if (!partial.empty()) partial.erase({id.shard, id.index});
  }
  SampleId id;
  int64_t tokens;
  has_carry = b.continued(&id, &tokens);
  if (has_carry) carry = LoaderState::Partial{id.shard, id.index, tokens};
  return Status::OK();
}

}  // namespace shardstream
