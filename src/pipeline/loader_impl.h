// Loader::Impl: one consumer's epoch as the facade keeps it between calls:
// the plan and its delivery tracker, the runs of delivered samples not yet
// marked, token documents left part-delivered, the batch target of equal
// batches, the running LoaderRun and the statistics. Private to pipeline/:
// loader.cc is the facade over it, loader_impl.cc plans and tracks.
#ifndef SHARDSTREAM_PIPELINE_LOADER_IMPL_H_
#define SHARDSTREAM_PIPELINE_LOADER_IMPL_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/shard_names.h"
#include "pipeline/loader_run.h"
#include "pipeline/wait_histogram.h"
#include "plan/epoch_layout.h"
#include "shardstream/mds.h"
#include "shardstream/rows.h"
#include "plan/token_budget.h"
#include "shardstream/delivery_tracker.h"
#include "shardstream/loader.h"
#include "shardstream/shard_split.h"

namespace shardstream {

using Clock = std::chrono::steady_clock;

class Loader::Impl {
 public:
  LoaderOptions opt;
  // The data set's shards (all streams', in order, when mixing).
  internal::ShardTable manifest;
  // manifest.Fingerprint(), taken once the table is complete (Create): a
  // pass over every url, 0.1 s at a million shards, not to repeat per epoch.
  std::string manifest_fingerprint;
  // The columns of its MDS shards (none for tar), and how the token field
  // decodes when it is one (mds_fields.h).
  std::vector<MdsColumn> mds_columns;
  FieldDecode token_decode = FieldDecode::kAuto;
  // The columns of its JSON Lines files' first row (row_fields.h).
  std::vector<RowColumn> row_columns;
  int64_t epoch = 0;
  ConsumerPlan plan;
  std::unique_ptr<DeliveryTracker> tracker;
  // Delivered samples not yet given to the tracker, as runs of consecutive
  // samples of a shard: without a shuffle buffer each lane extends its own
  // run, so a batch costs a few comparisons per sample and no sort. Sorting
  // a large window before marking lets the tracker's per-range prefixes
  // absorb nearly all shuffled samples too, instead of one out-of-order set
  // node each; the window is allocated once, so next() allocates nothing.
  struct Run {
    int64_t shard, first, end;
  };
  static constexpr size_t kPendingDeliveries = 1 << 16;
  std::vector<Run> pending;
  void AddDelivered(const SampleId& id) {
    // The runs the lanes are extending are among the last few.
    const size_t n = pending.size();
    for (size_t i = n; i > 0 && i + 8 > n; --i) {
      Run& r = pending[i - 1];
      if (r.shard == id.shard && r.end == id.index) {
        ++r.end;
        return;
      }
    }
    if (n == kPendingDeliveries) FlushDeliveries();
    pending.push_back(Run{id.shard, id.index, id.index + 1});
  }
  // Token batches: partly delivered documents from a restore, and the one
  // the last returned batch left unfinished.
  std::map<std::pair<int64_t, int64_t>, int64_t> partial;
  bool has_carry = false;
  LoaderState::Partial carry;
  std::unique_ptr<internal::LoaderRun> run;
  // Batch slots for every epoch (allocated, or pinned, once); each run holds
  // its own reference, and a batch the caller keeps holds its slot.
  std::shared_ptr<BufferPool> pool;
  // Direct reads' index records, likewise: at most half a ring's bytes per
  // lane kept idle between shards and epochs.
  std::shared_ptr<internal::DirectRecycler> recycler;
  // Cached shards whose sample index the source lacks, likewise.
  std::shared_ptr<internal::MissingIndexes> missing_indexes;
  // Local shards kept mapped across epochs (LoaderOptions::mapped_keep_bytes);
  // set by Create, when its options ask for it.
  std::shared_ptr<internal::KeptMappings> kept_mappings;
  std::unique_ptr<internal::RunCounters> counters = std::make_unique<internal::RunCounters>();
  Status sticky;
  bool ended = false;
  bool stopped = false;
  bool warned_untracked = false;
  // Cancel() may come from another thread while next() runs: the run pointer
  // is swapped and cancelled under run_mu, and joined only by the owner.
  std::atomic<bool> cancelled{false};
  std::mutex run_mu;

  mutable std::mutex stats_mu;  // guards the fields below (stats() from any thread)
  uint64_t batches = 0, samples = 0, bytes = 0;
  std::vector<uint64_t> stream_samples;  // delivered, per stream
  bool timing = false;
  Clock::time_point first_next, last_log;
  internal::WaitHistogram waits;
  uint64_t watchdog_reports = 0;
  std::string watchdog_report;
  // When the next() in progress began waiting (steady clock, ns; 0: none),
  // for stats() from another thread.
  std::atomic<int64_t> waiting_since_ns{0};
  // What the readers are at after `waited` seconds without a batch.
  std::string WatchdogReport(double waited);

  // Mixed streams (LoaderOptions::streams): the epoch's shard list.
  internal::EpochLayout layout;
  bool mixing() const { return layout.mixing(); }
  // What resume states carry: the data set's fingerprint, the mix, the mode
  // (legacy: as earlier releases wrote it).
  std::string DataFingerprint(bool legacy = false) const {
    return (legacy ? manifest.LegacyFingerprint() : manifest_fingerprint) +
           (mixing() ? layout.Fingerprint() : "") + (opt.mode == LoaderMode::kEval ? "/eval" : "");
  }
  // The redacted urls of the shards the current plan reads (Batch::url).
  std::shared_ptr<const internal::ShardNames> PlanNames() const;
  // The manifest shard and first sample of entry v of the epoch's list.
  std::pair<int64_t, int64_t> Locate(int64_t v) const { return layout.Locate(v); }

  // Token batches: the documents' token counts and what a plan makes of
  // them (made at the first plan that needs them, kept for every epoch).
  std::unique_ptr<internal::TokenBudget> budget;
  // Batches this consumer returns in the epoch: a cap (equal_batches with
  // several consumers; sample batches of several consumers under a skip
  // policy, padded up to it; or a restored own state's count; -1: none) and
  // what batches_per_epoch() answers for tokens (-1: unknown); batches
  // returned so far.
  static constexpr int64_t kNotCounted = -2;
  int64_t batch_target = -1;
  int64_t token_batches = -1;  // or kNotCounted
  int64_t returned = 0;
  // batch_target is everyone's smallest count (equal batches, several
  // consumers), not a restored own state's.
  bool equal_cut = false;
  // What the equal-batches cut left out of this consumer's epochs since
  // Create: documents and their tokens (eod not counted).
  uint64_t cut_samples = 0, cut_tokens = 0;
  void CountCut();
  // What the last Plan laid out, to count every worker of this rank when
  // asked (rank_batches_per_epoch).
  // (Kept only when mixing: otherwise the table's column is the list's
  // counts, and a million shards would hold them twice.)
  std::vector<int64_t> plan_counts;
  std::vector<int64_t> PlanCounts() const {
    if (mixing()) return plan_counts;
    std::vector<int64_t> c(manifest.size());
    for (size_t i = 0; i < c.size(); ++i) c[i] = manifest.nsamples(i);
    return c;
  }
  std::string plan_fingerprint;
  PlanOptions plan_options;
  std::shared_ptr<const ResumeState> plan_resume;

  // `batches_left`: a restored own state's count (-1: none).
  Status Plan(const ResumeState* resume, int64_t e, int64_t batches_left = -1);
  Status LoadTokenCounts() {
    if (!budget) budget = std::make_unique<internal::TokenBudget>(opt.tokens, opt.batch_size);
    return budget->Load(manifest, opt.tokens, opt.source, opt.index_dir);
  }
  internal::TokenBudget::Locate Locator() const {
    return [this](int64_t v) { return Locate(v); };
  }
  // Batches the packer makes from consumer plan `p` (partial documents
  // from a restore start where they stopped). REQUIRES: LoadTokenCounts().
  int64_t TokenBatches(const ConsumerPlan& p) const {
    return budget->Batches(budget->Rows(p, Locator(), partial));
  }
  // Sample batches made from `samples` samples: the last one short, or
  // dropped under drop_last.
  int64_t SampleBatches(int64_t samples) const {
    const int64_t b = std::max<int64_t>(opt.batch_size, 1);
    return opt.drop_last ? samples / b : (samples + b - 1) / b;
  }
  void EndRun() {
    std::unique_ptr<internal::LoaderRun> r;
    {
      std::lock_guard<std::mutex> lock(run_mu);
      r = std::move(run);
    }
    if (r) r->Stop();
  }
  Status Deliver(const Batch& b);
  void FlushDeliveries();
};

}  // namespace shardstream

#endif  // SHARDSTREAM_PIPELINE_LOADER_IMPL_H_
