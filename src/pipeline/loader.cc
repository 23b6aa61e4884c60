// Loader: the facade. Create resolves the data set and plans the first
// epoch; next() starts the epoch's LoaderRun (threads start at the first
// next()), hands batches out and records what the caller received for
// exactly-once resume; state/restore and the batch counts ask the plan;
// stats() reads the counters. The consumer's epoch state is Loader::Impl
// (loader_impl.h); option checks are option_checks.h.
#include "shardstream/loader.h"

#include <algorithm>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <chrono>
#include <mutex>

#include "common/log.h"
#include "plan/resolve_shards.h"
#include "pipeline/first_sample.h"
#include "pipeline/loader_impl.h"
#include "pipeline/mds_fields.h"
#include "pipeline/row_fields.h"
#include "pipeline/option_checks.h"
#include "shardstream/dataset_inputs.h"
#include "shardstream/url.h"

namespace shardstream {

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Loader::~Loader() { Stop(); }

Result<std::unique_ptr<Loader>> Loader::Create(LoaderOptions options) {
  SHARDSTREAM_RETURN_IF_ERROR(internal::ValidateLoaderOptions(options));
  auto impl = std::make_unique<Impl>();
  std::vector<std::string> inputs;
  if (!options.manifest.empty()) inputs.push_back(options.manifest);
  inputs.insert(inputs.end(), options.inputs.begin(), options.inputs.end());
  ResolveOptions ro;
  ro.source = options.source;
  ro.learn_counts = options.learn_sample_counts;
  ro.index_dir = options.index_dir;
  ro.parquet = &options.parquet;
  if (options.streams.empty()) {
    SHARDSTREAM_ASSIGN_OR_RETURN(impl->manifest, internal::ResolveShards(inputs, ro));
  } else {
    // Each stream on its own (its counts learned as for one data set), its
    // shards appended to one manifest.
    impl->layout = internal::EpochLayout(options.streams, options.epoch_size, options.seed);
    for (size_t k = 0; k < options.streams.size(); ++k) {
      const MixStream& so = options.streams[k];
      auto m = internal::ResolveShards(so.inputs, ro);
      if (!m.ok()) return m.status().WithContext("loader: stream " + std::to_string(k));
      internal::EpochLayout::Stream st;
      st.name = so.name.empty() ? "stream" + std::to_string(k) : so.name;
      st.begin = impl->manifest.size();
      st.samples = m->TotalSamples();
      if (st.samples < 0)
        return Status::Config("loader: stream '" + st.name + "' has shards of unknown sample count; "
                              "mixing needs them: give a manifest, or index the shards");
      if (st.samples == 0)
        return Status::Config("loader: stream '" + st.name + "' has no samples");
      impl->manifest.AppendTable(*m);
      st.end = impl->manifest.size();
      impl->layout.AddStream(std::move(st));
    }
    impl->stream_samples.assign(impl->layout.streams().size(), 0);
  }
  impl->manifest_fingerprint = impl->manifest.Fingerprint();
  SHARDSTREAM_ASSIGN_OR_RETURN(const uint64_t keep,
                               internal::CheckMemoryBudget(options, impl->manifest));
  SHARDSTREAM_ASSIGN_OR_RETURN(impl->mds_columns, internal::MdsColumnsOf(impl->manifest));
  SHARDSTREAM_RETURN_IF_ERROR(
      internal::ResolveMdsFields(impl->mds_columns, &options, &impl->token_decode));
  SHARDSTREAM_ASSIGN_OR_RETURN(impl->row_columns, internal::RowColumnsOf(options, impl->manifest));
  SHARDSTREAM_RETURN_IF_ERROR(internal::ResolveRowFields(impl->row_columns, &options));
  impl->opt = std::move(options);
  if (impl->opt.mode == LoaderMode::kEval) impl->opt.shuffle_buffer = 0;  // manifest order
  // Made here, not with the first run, so that stats() may read it from any thread.
  const LoaderOptions& o = impl->opt;
  if (o.direct_reads && !o.tokens.field.empty() && o.shuffle_buffer > 1 && keep > 0)
    impl->kept_mappings = std::make_shared<internal::KeptMappings>(keep);
  SHARDSTREAM_RETURN_IF_ERROR(impl->Plan(nullptr, impl->opt.epoch));
#ifdef __GLIBC__
  // Start-up over a large data set frees its scratch (the manifest's read
  // buffer, duplicate check, plan) in pieces glibc keeps in its heaps; give
  // those pages back, or every rank and worker of a node holds them for good.
  if (impl->manifest.size() > 10000) malloc_trim(0);
#endif
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

Result<Batch> Loader::next() {
  Impl& m = *impl_;
  if (m.stopped || m.cancelled.load()) return Status::Cancelled("loader stopped");
  if (!m.sticky.ok()) return m.sticky;
  if (m.ended) return Batch();
  if (m.batch_target >= 0 && m.returned >= m.batch_target) {
    // Equal batches: this consumer's share ends with everyone's. A run
    // that padded ran out of data (skipped): what it did not deliver was
    // skipped, not cut.
    m.ended = true;
    const bool padded = m.run != nullptr && m.run->padded() > 0;
    m.EndRun();
    if (m.equal_cut && !padded) m.CountCut();
    return Batch();
  }
  if (!m.run && m.opt.fields.empty() && m.opt.tokens.field.empty()) {
    // No fields named: take every field of the data set's first sample
    // (once; a failure is returned and tried again at the next call).
    SHARDSTREAM_ASSIGN_OR_RETURN(m.opt.fields, internal::FieldsOfFirstSample(m.opt, m.manifest));
    FieldDecode unused;  // no token field here
    SHARDSTREAM_RETURN_IF_ERROR(internal::ResolveMdsFields(m.mds_columns, &m.opt, &unused));
    SHARDSTREAM_RETURN_IF_ERROR(internal::ResolveRowFields(m.row_columns, &m.opt));
    if (m.opt.fields.size() > 64) {
      m.opt.fields.clear();
      return Status::Config("loader: the first sample has more than 64 fields; name the fields");
    }
  }
  if (!m.run) {
    internal::RunConfig rc;
    rc.options = &m.opt;
    rc.shards = m.mixing() ? &m.layout.shards() : nullptr;
    rc.table = m.mixing() ? nullptr : &m.manifest;
    rc.offsets = m.mixing() ? &m.layout.offsets() : nullptr;
    rc.urls = m.PlanNames();
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
    rc.kept_mappings = m.kept_mappings;
    rc.token_decode = m.token_decode;
    if (m.batch_target >= 0) rc.batch_target = m.batch_target - m.returned;
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
  int reports = 0;
  // stats().waiting_seconds reads this while the wait lasts; every way out of
  // it (a batch, an error, the watchdog's error) clears it.
  struct WaitMark {
    std::atomic<int64_t>* since;
    ~WaitMark() { since->store(0); }
  } mark{&m.waiting_since_ns};
  if (timed_out)
    m.waiting_since_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 t0.time_since_epoch()).count());
  while (timed_out) {
    const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
    if (m.opt.watchdog_s > 0 && waited >= m.opt.watchdog_s * (reports + 1)) {
      ++reports;
      std::string report = m.WatchdogReport(waited);
      internal::Log().warn("{}", report);
      {
        std::lock_guard<std::mutex> lock(m.stats_mu);
        ++m.watchdog_reports;
        m.watchdog_report = report;
      }
      if (m.opt.watchdog_error) {
        m.sticky = Status::Unavailable(report + "\n(watchdog_error: raised instead of waiting on)");
        // Cancelled, not joined: a read that is truly stuck would hold the
        // join, the very wait this error ends. The next plan (set_epoch,
        // restore) or Stop joins the run.
        std::lock_guard<std::mutex> lock(m.run_mu);
        if (m.run) m.run->Cancel();
        return m.sticky;
      }
    }
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
  m.waiting_since_ns.store(0);  // (the mark's own clear comes at the return)
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
  return m.plan.num_samples < 0 ? -1 : m.SampleBatches(m.plan.num_samples);
}

int64_t Loader::rank_batches_per_epoch() const {
  Impl& m = *impl_;
  const int workers = m.opt.num_workers;
  if (workers <= 1) return batches_per_epoch();
  if (m.plan.num_samples < 0) return -1;
  const bool tokens = !m.opt.tokens.field.empty();
  if (tokens && (m.opt.mode == LoaderMode::kEval || m.opt.tokens.tokenize)) return -1;
  // Every consumer returns the smallest count.
  if (tokens && m.equal_cut) return m.batch_target * workers;
  // A restored own state knows only its own count.
  if (tokens && m.batch_target >= 0) return -1;
  if (tokens && !m.LoadTokenCounts().ok()) return -1;
  Result<EpochPlan> all = EpochPlan::Create(m.PlanCounts(), m.plan_fingerprint, m.plan_options,
                                            m.plan_resume.get());
  if (!all.ok()) return -1;
  int64_t n = 0;
  for (int w = 0; w < workers; ++w) {
    const ConsumerPlan p = all->Consumer(m.opt.rank, w);
    n += tokens ? m.TokenBatches(p) : m.SampleBatches(p.num_samples);
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
  s.mapped_kept_bytes = m.kept_mappings != nullptr ? m.kept_mappings->kept_bytes() : 0;
  s.memory_kind = static_cast<HostMemoryKind>(c.memory_kind.load());
  s.slot_bytes = c.slot_bytes;
  s.slots = static_cast<uint64_t>(std::max<int64_t>(m.opt.prefetch, 1)) + 2;
  s.heap_spills = c.heap_spills;
  s.copy_waits = c.copy_waits;
  s.reader_wait_seconds = static_cast<double>(c.consumer_wait_ns.load()) / 1e9;
  s.caller_wait_seconds = static_cast<double>(c.caller_wait_ns.load()) / 1e9;
  if (const int64_t since = m.waiting_since_ns.load(); since != 0)
    s.waiting_seconds = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                Clock::now().time_since_epoch()).count() - since) / 1e9;
  {
    std::lock_guard<std::mutex> lock(m.stats_mu);
    s.watchdog_reports = m.watchdog_reports;
    s.watchdog_report = m.watchdog_report;
  }
  return s;
}

}  // namespace shardstream
