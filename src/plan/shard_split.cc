// EpochPlan: equal contiguous spans of the epoch's planned positions, or of
// the positions a resume state has not yet delivered.
#include "shardstream/shard_split.h"

#include <algorithm>
#include <cassert>
#include <cctype>
#include <limits>
#include <numeric>

#include "plan/layout.h"
#include "plan/prng.h"

namespace shardstream {

struct EpochPlan::Impl {
  PlanOptions options;
  bool counts_known = true;
  std::string caveat;
  std::vector<internal::Segment> segments;
  int64_t segment_length = 0;
  // The positions to hand out ("todo"), in order, as intervals with running
  // totals: all planned positions, or a resume state's undelivered ones.
  std::vector<std::pair<int64_t, int64_t>> todo;
  std::vector<int64_t> todo_prefix;  // size todo.size() + 1
  int64_t per_consumer = 0;
  int64_t dropped = 0;
  int64_t padded = 0;
  std::shared_ptr<const ResumeState> base;

  int64_t todo_total() const { return todo_prefix.back(); }
  // Appends the ranges of todo offsets [x, y) (0 <= x <= y <= todo_total()).
  void EmitTodo(int64_t x, int64_t y, bool repeat, std::vector<ShardRange>* out) const;
};

namespace {

Status CheckOptions(const PlanOptions& o) {
  if (o.world_size < 1 || o.num_workers < 1)
    return Status::Config("plan: world_size and num_workers must be >= 1 (got " +
                          std::to_string(o.world_size) + ", " + std::to_string(o.num_workers) + ")");
  if (o.rank < 0 || o.rank >= o.world_size)
    return Status::Config("plan: rank " + std::to_string(o.rank) + " outside world_size " +
                          std::to_string(o.world_size));
  if (o.worker < 0 || o.worker >= o.num_workers)
    return Status::Config("plan: worker " + std::to_string(o.worker) + " outside num_workers " +
                          std::to_string(o.num_workers));
  if (o.epoch < 0) return Status::Config("plan: epoch must be >= 0");
  if (o.node_local && (o.in_order || o.remainder == Remainder::kSpread))
    return Status::Config("plan: node_local does not combine with in-order (evaluation) plans");
  if (o.node_local && (o.local_world_size < 1 || o.world_size % o.local_world_size != 0))
    return Status::Config("plan: node_local needs local_world_size >= 1 dividing world_size " +
                          std::to_string(o.world_size) + " (got " +
                          std::to_string(o.local_world_size) + ")");
  return Status::OK();
}

int64_t CeilDiv(int64_t a, int64_t b) { return a == 0 ? 0 : (a - 1) / b + 1; }

// A caller's node_of must name a node for every shard.
Status CheckNodeOf(const PlanOptions& o, size_t shards, int64_t nodes) {
  if (o.node_of.empty()) return Status::OK();
  if (o.node_of.size() != shards)
    return Status::Config("plan: node_of names " + std::to_string(o.node_of.size()) +
                          " shards, the list has " + std::to_string(shards));
  for (uint32_t v : o.node_of)
    if (v >= nodes)
      return Status::Config("plan: node_of names node " + std::to_string(v) + " of " +
                            std::to_string(nodes));
  return Status::OK();
}

}  // namespace

void EpochPlan::Impl::EmitTodo(int64_t x, int64_t y, bool repeat,
                               std::vector<ShardRange>* out) const {
  if (x >= y) return;
  size_t k = static_cast<size_t>(
      std::upper_bound(todo_prefix.begin(), todo_prefix.end(), x) - todo_prefix.begin() - 1);
  while (x < y) {
    const int64_t offset = x - todo_prefix[k];
    const int64_t take = std::min(todo[k].second - todo[k].first - offset, y - x);
    const int64_t a = todo[k].first + offset;
    internal::EmitRanges(segments, segment_length, a, a + take, repeat, out);
    x += take;
    ++k;
  }
}

Result<EpochPlan> EpochPlan::Create(const Manifest& manifest, const PlanOptions& options,
                                    const ResumeState* resume) {
  std::vector<int64_t> counts(manifest.shards.size());
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = manifest.shards[i].nsamples;
  return Create(counts, manifest.Fingerprint(), options, resume);
}

// What differs between the data set a state was saved over and this one,
// from their fingerprints (Manifest::Fingerprint(), then what a loader adds
// for mixed streams, "/mix:...", and eval mode, "/eval").
static std::string DataSetDifference(const std::string& saved, const std::string& here) {
  auto number = [](const std::string& fp, const std::string& key) -> std::string {
    size_t at = fp.find(";" + key + "=");
    if (at == std::string::npos) return "";
    at += key.size() + 2;
    size_t end = at;
    while (end < fp.size() && (std::isdigit(static_cast<unsigned char>(fp[end])) || fp[end] == '-')) ++end;
    return fp.substr(at, end - at);
  };
  auto suffix = [](const std::string& fp) {
    const size_t slash = fp.find('/');
    return slash == std::string::npos ? std::string() : fp.substr(slash);
  };
  auto mode = [](const std::string& s) {
    std::string m = s.find("/mix:") != std::string::npos ? "mixed streams" : "one data set";
    if (s.size() >= 5 && s.compare(s.size() - 5, 5, "/eval") == 0) m += " in eval mode";
    return m;
  };
  const std::string saved_shards = number(saved, "shards"), here_shards = number(here, "shards");
  const std::string saved_samples = number(saved, "samples"), here_samples = number(here, "samples");
  if (saved_shards.empty())
    return "the state was saved by an earlier release, which also compared the shards' urls, "
           "sizes and checksums, and one of them differs (fingerprint " + saved + ", this data "
           "set " + here + ")";
  if (saved_shards != here_shards || saved_samples != here_samples)
    return "the state's data set has " + saved_shards + " shards and " + saved_samples +
           " samples, this one " + here_shards + " shards and " + here_samples + " samples";
  if (saved.substr(0, saved.find('/')) != here.substr(0, here.find('/')))
    return "both have " + here_shards + " shards and " + here_samples + " samples, but the "
           "shards' names, their sample counts or their order differ";
  if (mode(suffix(saved)) != mode(suffix(here)))
    return "the same shards, but the state was saved reading " + mode(suffix(saved)) +
           ", and this loader reads " + mode(suffix(here));
  return "the same shards, but the streams are mixed otherwise (other streams, weights, repeat, "
         "choose or epoch_size)";
}

Result<EpochPlan> EpochPlan::Create(const std::vector<int64_t>& nsamples,
                                    const std::string& fingerprint, const PlanOptions& options,
                                    const ResumeState* resume) {
  SHARDSTREAM_RETURN_IF_ERROR(CheckOptions(options));
  if (nsamples.empty()) return Status::Config("plan: the manifest lists no shards");
  if (nsamples.size() > std::numeric_limits<uint32_t>::max())
    return Status::Config("plan: more than 2^32-1 shards");
  auto impl = std::make_shared<Impl>();
  impl->options = options;
  impl->counts_known =
      std::all_of(nsamples.begin(), nsamples.end(), [](int64_t n) { return n >= 0; });
  // Unknown counts: plan in units of whole shards (one unit per shard).
  std::vector<int64_t> units;
  const std::vector<int64_t>* counts = &nsamples;
  if (!impl->counts_known) {
    units.assign(nsamples.size(), 1);
    counts = &units;
    impl->caveat =
        "sample counts unknown (no manifest): shards are split evenly, every consumer gets the "
        "same number of whole shards, but sample counts per consumer may differ, the remainder "
        "is counted in shards, and the plan cannot be resumed; write a manifest with "
        "`shardstream manifest` for equal sample counts";
  }
  const int64_t consumers = static_cast<int64_t>(options.world_size) * options.num_workers;
  const bool pad = options.remainder == Remainder::kPad;
  const bool spread = options.remainder == Remainder::kSpread;

  if (resume != nullptr) {
    if (!impl->counts_known)
      return Status::Config("plan: cannot resume over a manifest with unknown sample counts");
    if (resume->fingerprint != fingerprint)
      return Status::Config("plan: the resume state belongs to another data set: " +
                            DataSetDifference(resume->fingerprint, fingerprint));
    if (resume->seed != options.seed || resume->epoch != options.epoch)
      return Status::Config("plan: the resume state is for seed " + std::to_string(resume->seed) +
                            " epoch " + std::to_string(resume->epoch) + ", the plan asks for seed " +
                            std::to_string(options.seed) + " epoch " +
                            std::to_string(options.epoch));
    if (resume->nodes < 1 || resume->nodes > static_cast<int64_t>(nsamples.size()) ||
        resume->segment_length < 0)
      return Status::Config("plan: the resume state's layout (" + std::to_string(resume->nodes) +
                            " nodes) does not fit a manifest of " +
                            std::to_string(nsamples.size()) + " shards");
    for (const auto& [a, b] : resume->delivered)
      if (a < 0 || b < a || b > resume->positions())
        return Status::Config("plan: the resume state's delivered interval [" +
                              std::to_string(a) + ", " + std::to_string(b) +
                              ") is outside its epoch");
    SHARDSTREAM_RETURN_IF_ERROR(CheckNodeOf(options, nsamples.size(), resume->nodes));
    impl->segments = internal::BuildSegments(*counts, options.seed, options.epoch, resume->nodes,
                                             options.in_order, options.node_of);
    impl->segment_length = resume->segment_length;
    for (const auto& seg : impl->segments)
      if (seg.samples() == 0 && impl->segment_length > 0)
        return Status::Config("plan: resume state needs samples on every node");
    // The todo list is the complement of what was delivered.
    int64_t at = 0;
    for (const auto& [a, b] : resume->delivered) {
      if (a > at) impl->todo.emplace_back(at, a);
      at = std::max(at, b);
    }
    if (at < resume->positions()) impl->todo.emplace_back(at, resume->positions());
    auto base = std::make_shared<ResumeState>(*resume);
    base->Normalize();
    impl->base = std::move(base);
  } else {
    const int64_t nodes = options.node_local ? options.world_size / options.local_world_size : 1;
    const int64_t per_node = consumers / nodes;
    SHARDSTREAM_RETURN_IF_ERROR(CheckNodeOf(options, nsamples.size(), nodes));
    impl->segments = internal::BuildSegments(*counts, options.seed, options.epoch, nodes,
                                             options.in_order, options.node_of);
    if (spread) {
      impl->segment_length = impl->segments[0].samples();  // one node (CheckOptions)
    } else {
      // Every consumer must get the same count, so the smallest (drop) or
      // the largest (pad) node sets it.
      int64_t n = pad ? 0 : std::numeric_limits<int64_t>::max();
      for (const auto& seg : impl->segments) {
        int64_t k = pad ? CeilDiv(seg.samples(), per_node) : seg.samples() / per_node;
        n = pad ? std::max(n, k) : std::min(n, k);
      }
      impl->segment_length = n * per_node;
    }
    for (size_t j = 0; j < impl->segments.size(); ++j) {
      // An empty node would leave its ranks idle (pad) or zero every
      // consumer's count (drop): refuse rather than plan an empty epoch.
      if (nodes > 1 && impl->segments[j].samples() == 0)
        return Status::Config("plan: node " + std::to_string(j) + " of " + std::to_string(nodes) +
                              " gets no samples (" + std::to_string(nsamples.size()) +
                              " shards); use fewer nodes or more shards");
    }
    if (impl->segment_length * nodes > 0) impl->todo.emplace_back(0, impl->segment_length * nodes);
    auto base = std::make_shared<ResumeState>();
    base->fingerprint = fingerprint;
    base->seed = options.seed;
    base->epoch = options.epoch;
    base->nodes = nodes;
    base->segment_length = impl->segment_length;
    impl->base = std::move(base);
  }

  impl->todo_prefix.resize(impl->todo.size() + 1);
  impl->todo_prefix[0] = 0;
  for (size_t k = 0; k < impl->todo.size(); ++k)
    impl->todo_prefix[k + 1] = impl->todo_prefix[k] + impl->todo[k].second - impl->todo[k].first;
  const int64_t m = impl->todo_total();
  if (spread) {
    impl->per_consumer = CeilDiv(m, consumers);  // the most any consumer gets
  } else if (resume != nullptr) {
    impl->per_consumer = pad ? CeilDiv(m, consumers) : m / consumers;
    impl->dropped = m - std::min(m, impl->per_consumer * consumers);
    impl->padded = std::max<int64_t>(0, impl->per_consumer * consumers - m);
  } else {
    impl->per_consumer = m / consumers;
    for (const auto& seg : impl->segments) {
      impl->dropped += std::max<int64_t>(0, seg.samples() - impl->segment_length);
      impl->padded += std::max<int64_t>(0, impl->segment_length - seg.samples());
    }
  }
  return EpochPlan(std::move(impl));
}

ConsumerPlan EpochPlan::Consumer(int rank, int worker) const {
  const Impl& im = *impl_;
  assert(rank >= 0 && rank < im.options.world_size);
  assert(worker >= 0 && worker < im.options.num_workers);
  ConsumerPlan plan;
  plan.rank = rank;
  plan.worker = worker;
  plan.consumer = static_cast<int64_t>(rank) * im.options.num_workers + worker;
  plan.num_consumers = num_consumers();
  plan.num_samples = im.counts_known ? im.per_consumer : -1;
  plan.caveat = im.caveat;
  plan.base = im.base;
  const int64_t m = im.todo_total();
  int64_t u = plan.consumer * im.per_consumer;
  int64_t end = u + im.per_consumer;
  if (im.options.remainder == Remainder::kSpread) {
    // Contiguous spans whose sizes differ by at most one; nothing repeats.
    u = plan.consumer * m / plan.num_consumers;
    end = (plan.consumer + 1) * m / plan.num_consumers;
    if (im.counts_known) plan.num_samples = end - u;
  }
  // Offsets past m exist only when a resumed epoch is padded: they wrap to
  // the start of the todo list as repeats.
  while (u < end) {
    const int64_t x = u % m;
    const int64_t take = std::min(end - u, m - x);
    im.EmitTodo(x, x + take, /*repeat=*/u >= m, &plan.ranges);
    u += take;
  }
  if (!im.counts_known) {
    for (ShardRange& r : plan.ranges) {
      r.first = 0;
      r.end = ShardRange::kWholeShard;
      r.position = -1;
    }
  }
  return plan;
}

ConsumerPlan EpochPlan::ThisConsumer() const {
  return Consumer(impl_->options.rank, impl_->options.worker);
}

const PlanOptions& EpochPlan::options() const { return impl_->options; }
int64_t EpochPlan::num_consumers() const {
  return static_cast<int64_t>(impl_->options.world_size) * impl_->options.num_workers;
}
int64_t EpochPlan::samples_per_consumer() const {
  return impl_->counts_known ? impl_->per_consumer : -1;
}
int64_t EpochPlan::shards_per_consumer() const {
  return impl_->counts_known ? -1 : impl_->per_consumer;
}
int64_t EpochPlan::dropped() const { return impl_->dropped; }
int64_t EpochPlan::padded() const { return impl_->padded; }
bool EpochPlan::counts_known() const { return impl_->counts_known; }
const std::string& EpochPlan::caveat() const { return impl_->caveat; }
const std::shared_ptr<const ResumeState>& EpochPlan::base() const { return impl_->base; }

namespace {

// ThisConsumer() of a fresh global plan without shuffling the whole epoch:
// Fisher-Yates runs front to back, so the order is final up to the last
// shard this consumer touches and the rest need not be computed. On average
// half the work of EpochPlan::Create; the first consumers almost none.
ConsumerPlan SingleConsumer(const std::vector<int64_t>& counts, const std::string& fingerprint,
                            const PlanOptions& o, int64_t per_consumer) {
  const int64_t consumers = static_cast<int64_t>(o.world_size) * o.num_workers;
  ConsumerPlan plan;
  plan.rank = o.rank;
  plan.worker = o.worker;
  plan.consumer = static_cast<int64_t>(o.rank) * o.num_workers + o.worker;
  plan.num_consumers = consumers;
  plan.num_samples = per_consumer;
  auto base = std::make_shared<ResumeState>();
  base->fingerprint = fingerprint;
  base->seed = o.seed;
  base->epoch = o.epoch;
  base->segment_length = per_consumer * consumers;
  plan.base = std::move(base);
  const int64_t begin = plan.consumer * per_consumer, end = begin + per_consumer;
  if (begin == end) return plan;
  std::vector<internal::Segment> seg(1);
  std::vector<uint32_t>& order = seg[0].order;
  std::vector<int64_t>& prefix = seg[0].prefix;
  order.resize(counts.size());
  std::iota(order.begin(), order.end(), 0u);
  internal::Xoshiro256 rng(
      internal::DeriveSeed(o.seed, internal::Domain::kShardOrder, static_cast<uint64_t>(o.epoch), 0));
  prefix.reserve(order.size() + 1);
  prefix.push_back(0);
  // Shuffle a block, then sum it: one loop doing both stalls on two
  // dependent cache misses per shard (the swap, then its count) and runs
  // several times slower than the two loops apart.
  constexpr size_t kBlock = 4096;
  size_t done = 0;
  while (done < order.size() && prefix.back() < end) {
    const size_t stop = std::min(order.size(), done + kBlock);
    for (size_t i = done; i < stop; ++i) internal::FisherYatesStep(order.data(), i, order.size(), rng);
    for (size_t i = done; i < stop && prefix.back() < end; ++i)
      prefix.push_back(prefix.back() + counts[order[i]]);
    done = stop;
  }
  order.resize(prefix.size() - 1);  // keep only the part of the order in use
  internal::EmitRanges(seg, plan.base->segment_length, begin, end, /*repeat=*/false, &plan.ranges);
  return plan;
}

}  // namespace

Result<ConsumerPlan> PlanConsumer(const std::vector<int64_t>& nsamples,
                                  const std::string& fingerprint, const PlanOptions& options,
                                  const ResumeState* resume) {
  if (resume == nullptr && !options.node_local && !options.in_order &&
      options.remainder != Remainder::kSpread && !nsamples.empty() &&
      nsamples.size() <= std::numeric_limits<uint32_t>::max()) {
    SHARDSTREAM_RETURN_IF_ERROR(CheckOptions(options));
    int64_t total = 0;
    bool known = true;
    for (int64_t n : nsamples) {
      known = known && n >= 0;
      total += n;
    }
    const int64_t consumers = static_cast<int64_t>(options.world_size) * options.num_workers;
    const int64_t per = options.remainder == Remainder::kPad ? CeilDiv(total, consumers)
                                                             : total / consumers;
    const int64_t end = (static_cast<int64_t>(options.rank) * options.num_workers + options.worker + 1) * per;
    // Padding that wraps needs the whole order; so do unknown counts.
    if (known && end <= total) return SingleConsumer(nsamples, fingerprint, options, per);
  }
  SHARDSTREAM_ASSIGN_OR_RETURN(EpochPlan plan,
                               EpochPlan::Create(nsamples, fingerprint, options, resume));
  return plan.ThisConsumer();
}

Result<ConsumerPlan> PlanConsumer(const Manifest& manifest, const PlanOptions& options,
                                  const ResumeState* resume) {
  std::vector<int64_t> counts(manifest.shards.size());
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = manifest.shards[i].nsamples;
  return PlanConsumer(counts, manifest.Fingerprint(), options, resume);
}

}  // namespace shardstream
