// Loader: plans the epoch, owns the per-epoch LoaderRun (threads start at
// the first next()), tracks what the caller received for exactly-once
// resume, and keeps the statistics.
#include "shardstream/image.h"
#include "shardstream/loader.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <atomic>
#include <mutex>

#include "common/log.h"
#include "pipeline/first_sample.h"
#include "pipeline/loader_run.h"
#include "plan/epoch_layout.h"
#include "plan/token_budget.h"
#include "pipeline/wait_histogram.h"
#include "shardstream/dataset_inputs.h"
#include "shardstream/delivery_tracker.h"
#include "shardstream/shard_index.h"
#include "shardstream/shard_split.h"
#include "shardstream/tar_reader.h"
#include "shardstream/url.h"

namespace shardstream {

using Clock = std::chrono::steady_clock;

class Loader::Impl {
 public:
  LoaderOptions opt;
  Manifest manifest;
  std::shared_ptr<const std::vector<std::string>> urls;
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

  // Mixed streams (LoaderOptions::streams): the epoch's shard list.
  internal::EpochLayout layout;
  bool mixing() const { return layout.mixing(); }
  // What resume states carry: the data set's fingerprint, the mix, the mode
  // (legacy: as earlier releases wrote it).
  std::string DataFingerprint(bool legacy = false) const {
    return (legacy ? manifest.LegacyFingerprint() : manifest.Fingerprint()) +
           (mixing() ? layout.Fingerprint() : "") + (opt.mode == LoaderMode::kEval ? "/eval" : "");
  }
  // The manifest shard and first sample of entry v of the epoch's list.
  std::pair<int64_t, int64_t> Locate(int64_t v) const { return layout.Locate(v); }

  // Token batches: the documents' token counts and what a plan makes of
  // them (made at the first plan that needs them, kept for every epoch).
  std::unique_ptr<internal::TokenBudget> budget;
  // Batches this consumer returns in the epoch: a cap (equal_batches with
  // several consumers, or a restored own state's count; -1: none) and what
  // batches_per_epoch() answers (-1: unknown); batches returned so far.
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
  std::vector<int64_t> plan_counts;
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
  const std::vector<ShardEntry>& list = mixing() ? layout.shards() : manifest.shards;
  std::vector<int64_t> counts(list.size());
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = list[i].nsamples;
  if (mixing()) {
    auto u = std::make_shared<std::vector<std::string>>();
    for (const ShardEntry& s : layout.shards()) u->push_back(RedactUrl(s.resolved.empty() ? s.url : s.resolved));
    urls = std::move(u);
  }
  const std::string fingerprint = DataFingerprint();
  SHARDSTREAM_ASSIGN_OR_RETURN(plan, PlanConsumer(counts, fingerprint, po, resume));
  tracker = std::make_unique<DeliveryTracker>(plan);
  plan_counts = counts;
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
  if (opt.tokens.field.empty() || opt.mode == LoaderMode::kEval) return Status::OK();
  const bool equal = opt.tokens.equal_batches;
  if (equal && batches_left >= 0) {  // a consumer's own state: exactly its count
    batch_target = token_batches = batches_left;
    return Status::OK();
  }
  const bool several = static_cast<int64_t>(opt.world_size) * opt.num_workers > 1;
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
  SHARDSTREAM_ASSIGN_OR_RETURN(EpochPlan all, EpochPlan::Create(counts, fingerprint, po, resume));
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

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Loader::~Loader() { Stop(); }

namespace {

Status ValidateStreams(const LoaderOptions& o) {
  if (!o.manifest.empty() || !o.inputs.empty())
    return Status::Config("loader: give the data as streams or as manifest/inputs, not both");
  if (o.mode == LoaderMode::kEval) return Status::Config("loader: eval mode does not mix streams");
  const bool weighted = o.streams.front().weight >= 0;
  for (size_t k = 0; k < o.streams.size(); ++k) {
    const MixStream& so = o.streams[k];
    const std::string which = "loader: stream " + std::to_string(k) + ": ";
    if (so.inputs.empty()) return Status::Config(which + "no inputs");
    const int given = (so.weight >= 0) + (so.repeat >= 0) + (so.choose >= 0);
    if (given > 1) return Status::Config(which + "give one of weight, repeat and choose");
    if ((so.weight >= 0) != weighted)
      return Status::Config(which + "weights are given for every stream or for none");
    if (weighted && !(so.weight > 0)) return Status::Config(which + "weight must be > 0");
  }
  if (o.epoch_size < 0) return Status::Config("loader: epoch_size must be >= 0");
  if (o.epoch_size > 0 && !weighted)
    return Status::Config("loader: epoch_size applies to weighted streams");
  return Status::OK();
}

Status Validate(const LoaderOptions& o) {
  if (!o.streams.empty()) SHARDSTREAM_RETURN_IF_ERROR(ValidateStreams(o));
  if (o.manifest.empty() && o.inputs.empty() && o.streams.empty())
    return Status::Config("loader: no data set given (a manifest, shards, a directory or a pattern)");
  if (o.batch_size < 1) return Status::Config("loader: batch_size must be >= 1");
  if (!o.tokens.field.empty()) {
    if (o.tokens.seq_len < 1) return Status::Config("loader: tokens.seq_len must be >= 1");
    if (!IsInteger(o.tokens.dtype) || !IsInteger(o.tokens.input_dtype))
      return Status::Config("loader: token dtypes must be integer types");
  }
  if (o.fields.size() > 64) return Status::Config("loader: at most 64 fields");
  for (const FieldSpec& f : o.fields) {
    if (f.name.empty()) return Status::Config("loader: a field spec has no name");
    if (f.name.find(';') != std::string::npos) {
      // Alternatives: each named, and under kAuto each decoded alike.
      std::string_view rest = f.name;
      const FieldDecode first = DecodeForName(f.name);
      while (true) {
        const size_t semi = rest.find(';');
        const std::string_view one = rest.substr(0, semi);
        if (one.empty())
          return Status::Config("loader: field '" + f.name + "': an empty alternative");
        if (f.decode == FieldDecode::kAuto && DecodeForName(one) != first)
          return Status::Config("loader: field '" + f.name + "': its alternatives decode "
                                "differently by extension ('" + std::string(one) +
                                "'); give the field a decode");
        if (semi == std::string_view::npos) break;
        rest.remove_prefix(semi + 1);
      }
    }
    if (f.decode == FieldDecode::kImage)
      SHARDSTREAM_RETURN_IF_ERROR(ValidateImageSpec(f.image, f.name).WithContext("loader"));
  }
  if (o.mode == LoaderMode::kEval && (o.drop_last || o.pad_remainder))
    return Status::Config("loader: eval mode reads every sample once: drop_last and "
                          "pad_remainder must be false");
  if (o.prefetch < 1) return Status::Config("loader: prefetch must be >= 1");
  if (o.reader_threads < 1) return Status::Config("loader: reader_threads must be >= 1");
  if (o.read_chunk < (size_t{64} << 10)) return Status::Config("loader: read_chunk must be >= 64 KiB");
  return Status::OK();
}

// What the options make resident, for memory_budget (docs/pipeline.md).
struct MemoryEstimate {
  uint64_t slots = 0, read = 0, buffered = 0;
  uint64_t total() const { return slots + read + buffered; }
};

MemoryEstimate Estimate(const LoaderOptions& o, const Manifest& m) {
  MemoryEstimate e;
  double avg = 0;
  int64_t n = 0, bytes = 0;
  for (const ShardEntry& s : m.shards) {
    if (s.nsamples > 0 && s.size > 0) {
      n += s.nsamples;
      bytes += s.size;
    }
  }
  avg = n > 0 ? static_cast<double>(bytes) / static_cast<double>(n) : 64 * 1024;
  const uint64_t nslots = static_cast<uint64_t>(o.prefetch) + 2;
  uint64_t slot;
  const uint64_t B = static_cast<uint64_t>(o.batch_size);
  if (!o.tokens.field.empty()) {
    uint64_t L = static_cast<uint64_t>(o.tokens.seq_len);
    slot = B * L * (DTypeSize(o.tokens.dtype) + 4 + 4) + B * 4 + o.variable_bytes;
  } else {
    slot = static_cast<uint64_t>(static_cast<double>(B) * avg) + o.variable_bytes;
  }
  e.slots = nslots * slot;
  const uint64_t lanes = static_cast<uint64_t>(std::max(o.open_shards, o.reader_threads));
  const uint64_t chunk = o.read_chunk;
  // Each open shard holds the chunk being parsed, the one its buffered
  // samples still point into, and the tar reader keeps a couple of spare
  // chunks for reuse.
  e.read = lanes * 4 * chunk;
  // Samples in the lane rings, and in the shuffle buffer: a shuffled sample
  // may keep its whole read chunk alive, bounded here by twice its size.
  const size_t queue = static_cast<size_t>(std::max<int64_t>(o.shard_queue, 1));
  // A lane's ring (at most RingBytes of samples, plus the last burst of 8;
  // the batch the assembler has claimed is part of it).
  const double per_lane =
      std::min(static_cast<double>(queue) * avg, static_cast<double>(internal::RingBytes(o)) + 8 * avg);
  const double shuffle = static_cast<double>(std::max<int64_t>(o.shuffle_buffer, 1));
  e.buffered = static_cast<uint64_t>(static_cast<double>(lanes) * per_lane + shuffle * std::min(2 * avg, static_cast<double>(chunk)));
  // Images decoded ahead: their pixels sit with their samples in the rings
  // (within the rings' byte bound) and in the shuffle buffer; each batch
  // slot holds a batch of them.
  double pixels = 0;
  for (const FieldSpec& f : o.fields)
    if (f.decode == FieldDecode::kImage && f.image.height > 0)
      pixels += 3.0 * f.image.height * f.image.width;
  e.buffered += static_cast<uint64_t>(pixels * shuffle + static_cast<double>(lanes) *
                                                           static_cast<double>(internal::RingBytes(o)) *
                                                           (pixels > 0 ? 1 : 0));
  e.slots += nslots * static_cast<uint64_t>(pixels) * B;
  // Allocator slack (per-thread arenas, fragmentation from fields copied
  // out of chunk boundaries): a quarter more, plus thread stacks in use,
  // rings and tables.
  e.buffered += (e.slots + e.read + e.buffered) / 4 + (uint64_t{2} << 20);
  return e;
}

}  // namespace

Result<std::unique_ptr<Loader>> Loader::Create(LoaderOptions options) {
  SHARDSTREAM_RETURN_IF_ERROR(Validate(options));
  auto impl = std::make_unique<Impl>();
  std::vector<std::string> inputs;
  if (!options.manifest.empty()) inputs.push_back(options.manifest);
  inputs.insert(inputs.end(), options.inputs.begin(), options.inputs.end());
  ResolveOptions ro;
  ro.source = options.source;
  ro.learn_counts = options.learn_sample_counts;
  ro.index_dir = options.index_dir;
  if (options.streams.empty()) {
    SHARDSTREAM_ASSIGN_OR_RETURN(impl->manifest, ResolveDataset(inputs, ro));
  } else {
    // Each stream on its own (its counts learned as for one data set), its
    // shards appended to one manifest.
    impl->layout = internal::EpochLayout(options.streams, options.epoch_size, options.seed);
    for (size_t k = 0; k < options.streams.size(); ++k) {
      const MixStream& so = options.streams[k];
      auto m = ResolveDataset(so.inputs, ro);
      if (!m.ok()) return m.status().WithContext("loader: stream " + std::to_string(k));
      internal::EpochLayout::Stream st;
      st.name = so.name.empty() ? "stream" + std::to_string(k) : so.name;
      st.begin = impl->manifest.shards.size();
      st.samples = m->TotalSamples();
      if (st.samples < 0)
        return Status::Config("loader: stream '" + st.name + "' has shards of unknown sample count; "
                              "mixing needs them: give a manifest, or index the shards");
      if (st.samples == 0)
        return Status::Config("loader: stream '" + st.name + "' has no samples");
      for (ShardEntry& e : m->shards) impl->manifest.shards.push_back(std::move(e));
      st.end = impl->manifest.shards.size();
      impl->layout.AddStream(std::move(st));
    }
    impl->stream_samples.assign(impl->layout.streams().size(), 0);
  }
  if (options.memory_budget > 0) {
    MemoryEstimate e = Estimate(options, impl->manifest);
    if (e.total() > options.memory_budget)
      return Status::Config("loader: the options need about " + std::to_string(e.total() >> 20) +
                            " MiB (batch slots " + std::to_string(e.slots >> 20) +
                            " MiB, read buffers " + std::to_string(e.read >> 20) +
                            " MiB, buffered samples " + std::to_string(e.buffered >> 20) +
                            " MiB), over memory_budget " +
                            std::to_string(options.memory_budget >> 20) +
                            " MiB; lower prefetch, batch_size, open_shards, read_chunk or "
                            "shuffle_buffer");
  }
  auto urls = std::make_shared<std::vector<std::string>>();
  for (const ShardEntry& s : impl->manifest.shards)
    urls->push_back(RedactUrl(s.resolved.empty() ? s.url : s.resolved));
  impl->urls = std::move(urls);
  impl->opt = std::move(options);
  if (impl->opt.mode == LoaderMode::kEval) impl->opt.shuffle_buffer = 0;  // manifest order
  SHARDSTREAM_RETURN_IF_ERROR(impl->Plan(nullptr, impl->opt.epoch));
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

Result<Batch> Loader::next() {
  Impl& m = *impl_;
  if (m.stopped || m.cancelled.load()) return Status::Cancelled("loader stopped");
  if (!m.sticky.ok()) return m.sticky;
  if (m.ended) return Batch();
  if (m.batch_target >= 0 && m.returned >= m.batch_target) {
    // Equal batches: this consumer's share ends with everyone's.
    m.ended = true;
    m.EndRun();
    if (m.equal_cut) m.CountCut();
    return Batch();
  }
  if (!m.run && m.opt.fields.empty() && m.opt.tokens.field.empty()) {
    // No fields named: take every field of the data set's first sample
    // (once; a failure is returned and tried again at the next call).
    SHARDSTREAM_ASSIGN_OR_RETURN(m.opt.fields, internal::FieldsOfFirstSample(m.opt, m.manifest));
    if (m.opt.fields.size() > 64) {
      m.opt.fields.clear();
      return Status::Config("loader: the first sample has more than 64 fields; name the fields");
    }
  }
  if (!m.run) {
    internal::RunConfig rc;
    rc.options = &m.opt;
    rc.shards = m.mixing() ? &m.layout.shards() : &m.manifest.shards;
    rc.offsets = m.mixing() ? &m.layout.offsets() : nullptr;
    rc.urls = m.urls;
    rc.plan = m.plan;
    rc.epoch = m.epoch;
    rc.skip_tokens = m.partial;
    rc.pool = &m.pool;
    if (!m.recycler && m.opt.direct_reads && !m.opt.tokens.field.empty())
      m.recycler = std::make_shared<internal::DirectRecycler>(
          static_cast<uint64_t>(std::max(m.opt.open_shards, m.opt.reader_threads)) *
          internal::RingBytes(m.opt) / 2);
    rc.recycler = m.recycler;
    if (!m.missing_indexes && m.recycler && m.opt.cache)
      m.missing_indexes = std::make_shared<internal::MissingIndexes>();
    rc.missing_indexes = m.missing_indexes;
    if (m.has_carry) rc.skip_tokens[{m.carry.shard, m.carry.sample}] = m.carry.tokens;
    std::lock_guard<std::mutex> lock(m.run_mu);
    if (m.cancelled.load()) return Status::Cancelled("loader stopped");
    m.run = std::make_unique<internal::LoaderRun>(std::move(rc), m.counters.get());
    m.run->Start();
  }
  const Clock::time_point t0 = Clock::now();
  {
    std::lock_guard<std::mutex> lock(m.stats_mu);
    if (!m.timing) {
      m.timing = true;
      m.first_next = m.last_log = t0;
    }
  }
  // Wait in slices: holding every batch slot while asking for another
  // would otherwise hang forever. (A queued kUnavailable is the run's error,
  // not a slice that passed.)
  bool timed_out = false;
  Result<Batch> r = m.run->queue().Pop(std::chrono::milliseconds(100), &timed_out);
  while (timed_out) {
    if (m.run->StarvedOfSlots()) {
      // A usage error, not a transient one: retrying cannot help.
      return Status::Config(
          "loader: the caller holds every batch slot (" + std::to_string(m.opt.prefetch + 2) +
          " = prefetch + 2): batches are views into a pool of slots, so keeping every batch "
          "(list(loader), a list of batches) runs out of them. Keep copies of what you keep "
          "(tensor.clone() in PyTorch, np.array(x) in NumPy) and drop the batches, or raise "
          "prefetch= (LoaderOptions::prefetch in C++)");
    }
    r = m.run->queue().Pop(std::chrono::milliseconds(100), &timed_out);
  }
  const Clock::time_point t1 = Clock::now();
  m.counters->queue_depth = static_cast<int64_t>(m.run->queue().size());
  if (!r.ok()) {
    m.sticky = r.status();
    m.EndRun();
    return r.status();
  }
  bool log = false;
  {
    std::lock_guard<std::mutex> lock(m.stats_mu);
    m.waits.Add(std::chrono::duration<double, std::micro>(t1 - t0).count());
    if (!r->empty()) {
      ++m.batches;
      m.samples += static_cast<uint64_t>(r->num_samples());
      if (m.mixing()) {
        for (int64_t i = 0; i < r->num_samples(); ++i) {
          const int64_t v = r->sample(i).shard;
          if (v >= 0 && static_cast<size_t>(v) < m.layout.shards().size())
            ++m.stream_samples[static_cast<size_t>(m.layout.stream_of(m.Locate(v).first))];
        }
      }
      for (size_t i = 0; i < r->num_tensors(); ++i) m.bytes += r->tensor(i).nbytes;
    }
    if (m.opt.log_interval_s > 0 &&
        std::chrono::duration<double>(t1 - m.last_log).count() >= m.opt.log_interval_s) {
      m.last_log = t1;
      log = true;
    }
  }
  if (log) internal::Log().info("{}", stats().ToString());
  if (r->empty()) {
    m.ended = true;
    m.EndRun();
    return Batch();
  }
  SHARDSTREAM_RETURN_IF_ERROR(m.Deliver(*r));
  ++m.returned;
  return r;
}

bool Loader::ready() const {
  const Impl& m = *impl_;
  if (m.stopped || m.cancelled.load() || !m.sticky.ok() || m.ended) return true;
  if (m.batch_target >= 0 && m.returned >= m.batch_target) return true;
  return m.run != nullptr && m.run->queue().size() > 0;
}

Status Loader::set_epoch(int64_t epoch) {
  if (impl_->stopped) return Status::Cancelled("loader stopped");
  impl_->partial.clear();
  return impl_->Plan(nullptr, epoch);
}

int64_t Loader::epoch() const { return impl_->epoch; }

Result<LoaderState> Loader::state() const {
  Impl& m = *impl_;
  if (m.plan.num_samples < 0)
    return Status::Config("loader: no resume state without sample counts (" + m.plan.caveat + ")");
  LoaderState s;
  m.FlushDeliveries();
  s.resume = m.tracker->State();
  for (const auto& [id, tokens] : m.partial) {
    if (m.has_carry && m.carry.shard == id.first && m.carry.sample == id.second) continue;
    s.partial.push_back(LoaderState::Partial{id.first, id.second, tokens});
  }
  if (m.has_carry) s.partial.push_back(m.carry);
  return s;
}

Result<LoaderState> Loader::own_state() const {
  SHARDSTREAM_ASSIGN_OR_RETURN(LoaderState s, state());
  // Positions of this plan, sorted: whatever lies between them belongs to
  // other consumers, to an earlier plan (the base), or to nobody (dropped).
  std::vector<std::pair<int64_t, int64_t>> mine;
  for (const ShardRange& r : impl_->plan.ranges)
    if (!r.repeat && r.position >= 0 && r.size() > 0)
      mine.emplace_back(r.position, r.position + r.size());
  std::sort(mine.begin(), mine.end());
  int64_t at = 0;
  for (const auto& [begin, end] : mine) {
    if (begin > at) s.resume.delivered.emplace_back(at, begin);
    at = std::max(at, end);
  }
  if (at < s.resume.positions()) s.resume.delivered.emplace_back(at, s.resume.positions());
  s.resume.Normalize();  // once: AddDelivered would re-sort for every gap
  if (impl_->batch_target >= 0) s.batches_left = std::max<int64_t>(0, impl_->batch_target - impl_->returned);
  return s;
}

Status Loader::restore(const LoaderState& state) {
  if (impl_->stopped) return Status::Cancelled("loader stopped");
  // The partial documents first: the plan counts their rows from where they stopped.
  impl_->partial.clear();
  for (const LoaderState::Partial& p : state.partial) impl_->partial[{p.shard, p.sample}] = p.tokens;
  if (state.resume.fingerprint.find(";shards=") == std::string::npos &&
      state.resume.fingerprint == impl_->DataFingerprint(/*legacy=*/true)) {
    // Saved by an earlier release over this very manifest.
    ResumeState resume = state.resume;
    resume.fingerprint = impl_->DataFingerprint();
    return impl_->Plan(&resume, resume.epoch, state.batches_left);
  }
  return impl_->Plan(&state.resume, state.resume.epoch, state.batches_left);
}

int64_t Loader::samples_per_epoch() const { return impl_->plan.num_samples; }

int64_t Loader::batches_per_epoch() const {
  const Impl& m = *impl_;
  if (!m.opt.tokens.field.empty()) {
    if (m.token_batches == Impl::kNotCounted) {
      // One consumer, or equal batches off: counted on first asking (it
      // reads every shard's index), the batches left after a restore.
      Impl& w = *impl_;
      w.token_batches = m.plan.num_samples >= 0 && w.LoadTokenCounts().ok()
                            ? w.TokenBatches(m.plan)
                            : -1;
    }
    return m.token_batches;
  }
  if (m.plan.num_samples < 0) return -1;
  const int64_t n = m.plan.num_samples, b = m.opt.batch_size;
  return m.opt.drop_last ? n / b : (n + b - 1) / b;
}

int64_t Loader::rank_batches_per_epoch() const {
  Impl& m = *impl_;
  const int workers = m.opt.num_workers;
  if (workers <= 1) return batches_per_epoch();
  if (m.plan.num_samples < 0) return -1;
  const bool tokens = !m.opt.tokens.field.empty();
  if (tokens && m.opt.mode == LoaderMode::kEval) return -1;
  // Every consumer returns the smallest count.
  if (tokens && m.equal_cut) return m.batch_target * workers;
  // A restored own state knows only its own count.
  if (tokens && m.batch_target >= 0) return -1;
  if (tokens && !m.LoadTokenCounts().ok()) return -1;
  Result<EpochPlan> all = EpochPlan::Create(m.plan_counts, m.plan_fingerprint, m.plan_options,
                                            m.plan_resume.get());
  if (!all.ok()) return -1;
  const int64_t b = m.opt.batch_size;
  int64_t n = 0;
  for (int w = 0; w < workers; ++w) {
    const ConsumerPlan p = all->Consumer(m.opt.rank, w);
    if (tokens) {
      n += m.TokenBatches(p);
    } else {
      n += m.opt.drop_last ? p.num_samples / b : (p.num_samples + b - 1) / b;
    }
  }
  return n;
}

void Loader::Stop() {
  impl_->stopped = true;
  impl_->cancelled.store(true);
  impl_->EndRun();
}

void Loader::Cancel() {
  impl_->cancelled.store(true);
  std::lock_guard<std::mutex> lock(impl_->run_mu);
  if (impl_->run) impl_->run->Cancel();
}

LoaderStats Loader::stats() const {
  const Impl& m = *impl_;
  const internal::RunCounters& c = *m.counters;
  LoaderStats s;
  s.epoch = m.epoch;
  {
    std::lock_guard<std::mutex> lock(m.stats_mu);
    s.batches = m.batches;
    s.samples = m.samples;
    s.bytes = m.bytes;
    for (size_t k = 0; k < m.layout.streams().size(); ++k)
      s.stream_samples[m.layout.streams()[k].name] = m.stream_samples[k];
    if (m.timing) s.seconds = std::chrono::duration<double>(Clock::now() - m.first_next).count();
    m.waits.Fill(&s);
  }
  if (s.seconds > 0) {
    s.batches_per_s = static_cast<double>(s.batches) / s.seconds;
    s.samples_per_s = static_cast<double>(s.samples) / s.seconds;
    s.bytes_per_s = static_cast<double>(s.bytes) / s.seconds;
  }
  auto put = [&](const char* k, uint64_t v) {
    if (v > 0) s.read_bytes[k] = v;
  };
  put("cache", c.bytes_cache);
  put("file", c.bytes_file);
  put("http", c.bytes_http);
  put("s3", c.bytes_s3);
  put("other", c.bytes_other);
  s.queue_depth = c.queue_depth;
  s.queue_capacity = std::max<int64_t>(m.opt.prefetch, 1);
  s.shuffle_fill = c.shuffle_fill;
  s.shuffle_capacity = m.opt.shuffle_buffer > 1 ? m.opt.shuffle_buffer : 0;
  if (m.opt.cache) {
    s.cache_hit_rate = c.cache_opens > 0 ? static_cast<double>(c.cache_hits) /
                                               static_cast<double>(c.cache_opens)
                                         : 0;
    s.cache_hits = c.cache_hits;
    s.cache_opens = c.cache_opens;
  }

  s.skipped_samples = c.skipped_samples + c.decode_skips;
  s.skipped_shards = c.skipped_shards;
  {
    std::lock_guard<std::mutex> lock(m.stats_mu);
    s.cut_samples = m.cut_samples;
    s.cut_tokens = m.cut_tokens;
  }
  s.direct_samples = c.direct_samples;
  s.memory_kind = static_cast<HostMemoryKind>(c.memory_kind.load());
  s.slot_bytes = c.slot_bytes;
  s.slots = static_cast<uint64_t>(std::max<int64_t>(m.opt.prefetch, 1)) + 2;
  s.heap_spills = c.heap_spills;
  s.copy_waits = c.copy_waits;
  s.reader_wait_seconds = static_cast<double>(c.consumer_wait_ns.load()) / 1e9;
  s.caller_wait_seconds = static_cast<double>(c.caller_wait_ns.load()) / 1e9;
  return s;
}

}  // namespace shardstream
