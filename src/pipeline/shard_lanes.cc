#include "pipeline/shard_lanes.h"

#include <cassert>
#include <chrono>

#include <pthread.h>

#include <utility>

#include "common/log.h"
#include "pipeline/wait_histogram.h"
#include "shardstream/url.h"

namespace shardstream::internal {
namespace {

// Lends a stream to a TarReader while the lane keeps a reference to cancel it.
class SharedStream final : public InputStream {
 public:
  explicit SharedStream(std::shared_ptr<CachedShard> s) : s_(std::move(s)) {}
  const std::string& url() const override { return s_->url(); }
  Result<size_t> Read(size_t n, void* out) override { return s_->Read(n, out); }
  uint64_t position() const override { return s_->position(); }
  std::optional<uint64_t> size() const override { return s_->size(); }

 private:
  std::shared_ptr<CachedShard> s_;
};

}  // namespace

ShardLanes::ShardLanes(std::vector<LaneRange> ranges, LaneConfig config, LaneCounters* counters)
    : ranges_(std::move(ranges)), config_(std::move(config)), counters_(counters) {
  assert(config_.consume);  // workers leave only when the consumer is done
  const int nlanes = std::max(1, config_.lanes);
  nthreads_ = std::max(1, std::min(config_.threads, nlanes));
  for (int l = 0; l < nlanes; ++l) {
    auto lane = std::make_unique<Lane>();
    lane->index = l;
    lane->ring.resize(std::max<size_t>(config_.ring, 1));
    lanes_.push_back(std::move(lane));
  }
  for (size_t j = 0; j < ranges_.size(); ++j) lanes_[j % lanes_.size()]->ranges.push_back(j);
  for (auto& lane : lanes_) lane->finished = lane->ranges.empty();
  // Where each range's bytes come from, decided once (no string work per sample).
  for (const LaneRange& r : ranges_) {
    std::string scheme = UrlScheme(r.ref.url);
    uint8_t kind = 4;
    if (config_.cache != nullptr) kind = 0;
    else if (scheme.empty() || scheme == "file") kind = 1;
    else if (scheme == "http" || scheme == "https") kind = 2;
    else if (scheme == "s3") kind = 3;
    kinds_.push_back(kind);
  }
}

ShardLanes::~ShardLanes() { Stop(); }

void ShardLanes::Start() {
  if (started_) return;
  started_ = true;
  for (int t = 0; t < nthreads_; ++t) threads_.emplace_back([this] { Run(); });
}

void ShardLanes::Stop() {
  Cancel();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  // Lanes a thread left mid-range (stopped) still hold their readers.
  for (auto& lane : lanes_) CloseReader(lane.get());
}

void ShardLanes::Cancel() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& lane : lanes_)
      if (lane->cached != nullptr) lane->cached->Cancel();  // a read blocked on a download
  }
  space_.notify_all();
}

LaneItem* ShardLanes::TryPop(int l) {
  Lane* lane = lanes_[static_cast<size_t>(l)].get();
  const size_t n = lane->ring.size();
  if (lane->claim_pos == lane->claim_count) {
    // Hand back the claimed slots and claim the next batch under one lock:
    // one lock round trip (and one contended cache line) per batch instead
    // of per sample. Order is kept: the batch is the lane's next items.
    bool wake;
    size_t k;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const bool wanted = WantsMore(*lane);
      lane->head = (lane->head + lane->claim_count) % n;
      lane->count -= lane->claim_count;
      lane->bytes -= lane->claim_bytes;
      k = std::min(lane->count, TakeBatch(n));
      lane->claim_pos = 0;
      lane->claim_count = k;
      lane->claim_bytes = 0;
      // The claimed items were written by the reader's core: fetch all their
      // lines now, in parallel, rather than one miss at a time as the
      // consumer reaches each field (measured: 4-5% of loader speed).
      for (size_t i = 0; i < k; ++i) {
        const LaneItem& item = lane->ring[(lane->head + i) % n];
        lane->claim_bytes += item.bytes;
        const char* p = reinterpret_cast<const char*>(&item);
        for (size_t off = 0; off < sizeof(LaneItem); off += 64) __builtin_prefetch(p + off, 1);
      }
      // Wake a worker only when the ring drops below three quarters, so it
      // refills in a burst instead of one context switch per sample.
      wake = !wanted && WantsMore(*lane);
    }
    if (wake) space_.notify_one();
    if (k == 0) return nullptr;
  }
  return &lane->ring[(lane->head + lane->claim_pos++) % n];
}

void ShardLanes::DirectDone(int l) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Lane* lane = lanes_[static_cast<size_t>(l)].get();
    const bool wanted = WantsMore(*lane);
    --lane->direct_ahead;
    wake = !wanted && WantsMore(*lane) && !lane->finished;
  }
  if (wake) space_.notify_one();
}

void ShardLanes::PostSide() {
  if (!config_.side) return;
  std::lock_guard<std::mutex> lock(mu_);
  side_ = true;
  if (sleepers_ > 0) space_.notify_one();
}

ShardLanes::Lane* ShardLanes::PickLane(bool wanting_only) {
  // The emptiest lane (by the fuller of its two limits) no thread is
  // filling: the one the consumer is about to wait on, if any. The lane
  // the consumer waits for comes first.
  if (consumer_lane_ >= 0) {
    Lane* want = lanes_[static_cast<size_t>(consumer_lane_)].get();
    if (!want->busy && !want->finished && want->count == 0 && HasRoom(*want)) return want;
  }
  Lane* best = nullptr;
  double best_fill = 2;
  for (auto& p : lanes_) {
    Lane* lane = p.get();
    if (lane->busy || lane->finished || !HasRoom(*lane)) continue;
    if (wanting_only && !WantsMore(*lane)) continue;
    const double fill = std::max(static_cast<double>(lane->count) / static_cast<double>(lane->ring.size()),
                                 static_cast<double>(lane->bytes) / static_cast<double>(config_.ring_bytes));
    if (fill < best_fill) {
      best = lane;
      best_fill = fill;
    }
  }
  return best;
}

void ShardLanes::Run() {
  pthread_setname_np(pthread_self(), "ss-worker");
  std::unique_lock<std::mutex> lock(mu_);
  // After a burst a worker goes on with any lane that has room; once none
  // has, it sleeps until one drops below three quarters (TryPop wakes it),
  // so refills come in bursts rather than a wake per sample.
  bool after_burst = false;
  bool handed_off = false;  // this worker just woke another for the consumer
  while (!stop_.load() && !consumer_done_) {
    if (!handed_off && ConsumerRunnable()) {
      consumer_busy_ = true;
      waiting_for_.store(-1, std::memory_order_relaxed);
      if (consumer_lane_ >= 0) AddWaitSince(&counters_->consumer_wait_ns, consumer_waiting_since_);
      lock.unlock();
      const int want = config_.consume();
      lock.lock();
      consumer_busy_ = false;
      consumer_lane_ = want;
      waiting_for_.store(want, std::memory_order_relaxed);
      consumer_waiting_since_ = std::chrono::steady_clock::now();
      if (want < 0) {
        consumer_done_ = true;
        space_.notify_all();  // the others leave too
      }
      continue;
    }
    handed_off = false;
    if (side_) {
      side_ = false;
      lock.unlock();
      const bool did = config_.side();
      lock.lock();
      if (did) {
        // There may be more (a batch's reads come in several jobs): this
        // worker comes back for it, and a sleeping one may help.
        side_ = true;
        if (sleepers_ > 0) space_.notify_one();
      }
      continue;
    }
    Lane* lane = PickLane(/*wanting_only=*/!after_burst);
    if (lane == nullptr) {
      if (after_burst) {
        after_burst = false;
        continue;
      }
      // Nothing to fill and the consumer busy or waiting on a busy lane;
      // when the consumer is done (every lane finished, or an error), it
      // wakes everyone to leave.
      ++sleepers_;
      space_.wait(lock);
      --sleepers_;
      continue;
    }
    lane->busy = true;
    size_t slot = (lane->head + lane->count) % lane->ring.size();
    const size_t free = lane->ring.size() - lane->count;
    const uint64_t bytes = lane->bytes;
    const int ahead = lane->direct_ahead;  // the consumer may lower it meanwhile: a stricter bound
    lock.unlock();
    // Fill the free slots (they are ours until published), publishing in
    // bursts: a quarter of the ring (what the hysteresis frees) keeps the
    // lane's read chunk in this core's cache across many samples, and costs
    // one lock round trip. While the consumer waits for this lane, a burst
    // is a few samples; never more bytes than the ring's limit.
    const size_t burst = std::min(free, std::max<size_t>(8, lane->ring.size() / 4));
    size_t made = 0;
    uint64_t made_bytes = 0;
    int made_direct = 0;
    bool done = false;
    while (made < burst && !done) {
      Produce(lane, &lane->ring[slot]);
      made_bytes += lane->ring[slot].bytes;
      const bool direct = lane->ring[slot].kind == LaneItem::kDirect;
      made_direct += direct ? 1 : 0;
      slot = (slot + 1) % lane->ring.size();
      ++made;
      // Only the worker holding `busy` writes `finished` (under the lock,
      // for the other workers' predicates); reading it here needs no lock.
      done = lane->finished;
      if (bytes + made_bytes >= config_.ring_bytes || ahead + made_direct == kDirectAhead ||
          (direct && waiting_for_.load(std::memory_order_relaxed) == lane->index) ||
          (made >= 8 && waiting_for_.load(std::memory_order_relaxed) == lane->index))
        break;
    }
    // Byte counters once per burst: an atomic add per sample is a cache
    // line bouncing between the workers.
    FlushCount(lane);
    lock.lock();
    lane->count += made;
    lane->bytes += made_bytes;
    lane->direct_ahead += made_direct;
    lane->busy = false;
    after_burst = true;
    if (lane->index == consumer_lane_ && ConsumerRunnable() && sleepers_ > 0 && !done) {
      // The consumer waited for this lane, which is likely the one holding
      // everything up (a lane with more shards than the others): a sleeping
      // worker runs the consumer while this one goes on reading.
      handed_off = true;
      space_.notify_one();
    }
    // Otherwise nobody needs waking for the consumer: this worker checks
    // the role first on its next turn.
  }
}

void ShardLanes::FlushCount(Lane* lane) {
  // CloseReader flushes at the end of each range, so what is left belongs
  // to the range being read.
  if (lane->unpublished_bytes == 0 || lane->next_range >= lane->ranges.size()) return;
  Count(lane->ranges[lane->next_range], lane->unpublished_bytes);
  lane->unpublished_bytes = 0;
}

void ShardLanes::CloseReader(Lane* lane) {
  FlushCount(lane);
  lane->direct.reset();
  if (!lane->reader) return;
  const TarStats& st = lane->reader->stats();
  counters_->skipped_samples += st.skipped_samples;
  counters_->skipped_shards += st.skipped_shards;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lane->cached = nullptr;
  }
  lane->reader.reset();
}

void ShardLanes::Count(size_t range, uint64_t bytes) {
  switch (kinds_[range]) {
    case 0: counters_->bytes_cache += bytes; break;
    case 1: counters_->bytes_file += bytes; break;
    case 2: counters_->bytes_http += bytes; break;
    case 3: counters_->bytes_s3 += bytes; break;
    default: counters_->bytes_other += bytes;
  }
}

Status ShardLanes::OpenRange(Lane* lane, const LaneRange& r, LaneItem* scratch) {
  lane->read = 0;
  if (config_.direct && config_.cache == nullptr && config_.tar.source == nullptr) {
    std::string why;
    lane->direct = DirectRange::Open(r.ref.url, config_.direct_field, config_.direct_dtype, r.first,
                                     r.end, &why);
    if (lane->direct != nullptr) return Status::OK();
    Log().debug("reading {} through read buffers, not directly: {}", RedactUrl(r.ref.url), why);
  }
  return OpenReader(lane, r, r.first, scratch);
}

Status ShardLanes::OpenReader(Lane* lane, const LaneRange& r, int64_t at, LaneItem* scratch) {
  int64_t skip = at;
  if (config_.cache != nullptr) {
    // Tell the cache what comes after this range, so it downloads ahead
    // (ranges are opened roughly in plan order across the lanes).
    std::vector<ShardRef> upcoming;
    const size_t at = static_cast<size_t>(&r - ranges_.data());
    for (size_t j = at + 1; j < ranges_.size() && upcoming.size() < 16; ++j)
      upcoming.push_back(ranges_[j].ref);
    config_.cache->Prefetch(upcoming);
    auto stream = config_.cache->Open(r.ref);
    if (!stream.ok()) return stream.status();
    ++counters_->cache_opens;
    if ((*stream)->hit()) ++counters_->cache_hits;
    std::shared_ptr<CachedShard> shared(std::move(*stream));
    {
      std::lock_guard<std::mutex> lock(mu_);
      lane->cached = shared;
      if (stop_.load()) shared->Cancel();  // Cancel() ran before the lane knew the stream
    }
    SHARDSTREAM_ASSIGN_OR_RETURN(
        lane->reader, TarReader::Open(std::make_unique<SharedStream>(std::move(shared)), config_.tar));
  } else if (at > 0) {
    auto opened = TarReader::OpenAt(r.ref.url, at, nullptr, config_.tar);
    if (opened.ok()) {
      lane->reader = std::move(*opened);
      skip = 0;
    } else if (opened.status().code() == StatusCode::kNotFound ||
               opened.status().code() == StatusCode::kCorrupt) {
      // No (or a stale) sidecar index: read from the start and skip.
      SHARDSTREAM_ASSIGN_OR_RETURN(lane->reader, TarReader::Open(r.ref.url, config_.tar));
    } else {
      return opened.status();
    }
  } else {
    SHARDSTREAM_ASSIGN_OR_RETURN(lane->reader, TarReader::Open(r.ref.url, config_.tar));
  }
  for (int64_t i = 0; i < skip; ++i) {
    SHARDSTREAM_ASSIGN_OR_RETURN(bool more, lane->reader->Next(&scratch->sample));
    if (!more) break;
  }
  return Status::OK();
}

void ShardLanes::Produce(Lane* lane, LaneItem* item) {
  item->status = Status::OK();
  item->bytes = 0;
  const size_t ri = lane->ranges[lane->next_range];
  const LaneRange& r = ranges_[ri];
  auto finish_range = [&] {
    CloseReader(lane);
    item->kind = LaneItem::kEnd;
    if (++lane->next_range == lane->ranges.size()) {
      std::lock_guard<std::mutex> lock(mu_);
      lane->finished = true;
    }
  };
  auto fail = [&](Status s) {
    CloseReader(lane);
    item->kind = LaneItem::kError;
    item->status = std::move(s);
    std::lock_guard<std::mutex> lock(mu_);
    lane->finished = true;
  };
  if (!lane->reader && !lane->direct) {
    Status s = OpenRange(lane, r, item);
    if (!s.ok()) {
      if (config_.tar.policy == ErrorPolicy::kSkipShard || config_.tar.policy == ErrorPolicy::kSkipSample) {
        if (s.code() == StatusCode::kCorrupt || s.code() == StatusCode::kChecksum) {
          ++counters_->skipped_shards;
          return finish_range();
        }
      }
      return fail(s.WithContext("opening shard", RedactUrl(r.ref.url)));
    }
  }
  if (r.end >= 0 && lane->read == r.end - r.first) return finish_range();
  if (lane->direct) {
    // A chunk of the range's records in one item: the consumer takes its
    // documents straight from them (no ring slot, no item per document).
    // The lane holds at most kDirectAhead chunks the consumer has not
    // finished (Lane::direct_ahead): the one it reads and the next. Each
    // holds at most a quarter of the ring's bytes.
    DirectRange& d = *lane->direct;
    if (d.next() == d.end()) return finish_range();
    std::string why;
    auto chunk = d.Next(config_.ring_bytes / 4, config_.direct_recycler, &why);
    if (chunk != nullptr) {
      lane->read = d.next() - r.first;
      item->kind = LaneItem::kDirect;
      item->shard = r.shard;
      item->direct.shard = std::move(chunk);
      item->direct.sample = item->direct.shard->first;
      item->bytes = item->direct.shard->memory();
      return;
    }
    // The rest of the range the usual way, from the sample that ended it.
    const int64_t at = d.next();
    Log().debug("reading {} through read buffers from sample {} on: {}", RedactUrl(r.ref.url), at,
                why);
    lane->direct.reset();
    Status s = OpenReader(lane, r, at, item);
    if (!s.ok()) return fail(s.WithContext("opening shard", RedactUrl(r.ref.url)));
    lane->read = at - r.first;
    if (r.end >= 0 && lane->read == r.end - r.first) return finish_range();
  }
  item->direct.shard.reset();
  auto more = lane->reader->Next(&item->sample);
  if (!more.ok()) return fail(more.status());
  if (!*more) {
    if (r.end >= 0 && config_.tar.policy == ErrorPolicy::kRaise) {
      return fail(Status(StatusCode::kCorrupt,
                         "shard " + RedactUrl(r.ref.url) + " ended after " +
                             std::to_string(r.first + lane->read) + " samples; the manifest says " +
                             std::to_string(r.end),
                         RedactUrl(r.ref.url)));
    }
    return finish_range();
  }
  ++lane->read;
  item->kind = LaneItem::kSample;
  item->shard = r.shard;
  item->bytes = item->sample.bytes();
  lane->unpublished_bytes += item->bytes;
  if (config_.prepare) config_.prepare(item);
}

}  // namespace shardstream::internal
