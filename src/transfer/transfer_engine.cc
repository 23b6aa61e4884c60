#include "transfer/transfer_engine.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>

#include "shardstream/byte_size.h"

namespace shardstream {

namespace {

std::mutex& OptionsMu() {
  static auto* mu = new std::mutex;
  return *mu;
}

TransferOptions Clamped(TransferOptions o) {
  o.parts_per_stream = std::max(0, o.parts_per_stream);
  o.max_connections = std::clamp(o.max_connections, 1, 1024);
  o.initial_host_connections = std::clamp(o.initial_host_connections, 1, o.max_connections);
  if (o.part_size > 0) o.part_size = std::max<uint64_t>(o.part_size, 64 << 10);
  o.stall_s = std::max(0.0, o.stall_s);
  o.host_stall_s = std::max(0.0, o.host_stall_s);
  o.hedge_factor = std::max(0.0, o.hedge_factor);
  o.hedge_min_s = std::max(0.0, o.hedge_min_s);
  return o;
}

TransferOptions FromEnvironment() {
  TransferOptions o;
  auto bytes = [](const char* name, uint64_t* out) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return;
    auto parsed = ParseByteSize(v);
    if (parsed.ok()) *out = *parsed;
  };
  bytes("SHARDSTREAM_PART_SIZE", &o.part_size);
  bytes("SHARDSTREAM_MAX_INFLIGHT", &o.max_bytes_in_flight);
  if (const char* v = std::getenv("SHARDSTREAM_MAX_CONNECTIONS"); v && *v) {
    int n = std::atoi(v);
    if (n > 0) {
      o.max_connections = n;
      o.initial_host_connections = std::min(o.initial_host_connections, n);
    }
  }
  return Clamped(o);
}

TransferOptions& Options() {
  static auto* options = new TransferOptions(FromEnvironment());
  return *options;
}

constexpr int kBuckets = 160;
constexpr double kBucketBase = 0.001;  // seconds
constexpr double kBucketGrowth = 1.1;

double BucketUpper(int i) { return kBucketBase * std::pow(kBucketGrowth, i + 1); }

}  // namespace

void SetTransferOptions(const TransferOptions& options) {
  std::lock_guard<std::mutex> lock(OptionsMu());
  Options() = Clamped(options);
}

TransferOptions GetTransferOptions() {
  std::lock_guard<std::mutex> lock(OptionsMu());
  return Options();
}

TransferStats GetTransferStats() { return internal::TransferEngine::Get().Stats(); }

namespace internal {

std::string UrlHost(const std::string& url) {
  size_t start = url.find("://");
  if (start == std::string::npos) return {};
  start += 3;
  size_t end = url.find_first_of("/?#", start);
  std::string host = url.substr(start, end == std::string::npos ? std::string::npos : end - start);
  size_t at = host.rfind('@');  // never keep credentials
  return at == std::string::npos ? host : host.substr(at + 1);
}

TransferEngine& TransferEngine::Get() {
  // A fork copies the pointer but not the threads: an engine made by another
  // process is replaced (and leaked: its mutex may have been held at the fork).
  static std::atomic<TransferEngine*> current{nullptr};
  const pid_t me = ::getpid();
  while (true) {
    TransferEngine* e = current.load(std::memory_order_acquire);
    if (e != nullptr && e->pid_ == me) return *e;
    auto* fresh = new TransferEngine();  // lives as long as the process
    if (current.compare_exchange_strong(e, fresh, std::memory_order_acq_rel)) return *fresh;
    delete fresh;  // another thread of this process won
  }
}

TransferEngine::TransferEngine() : pid_(::getpid()), part_hist_(kBuckets + 1, 0) {}

TransferEngine::Host& TransferEngine::HostOf(const std::string& name) {
  auto [it, inserted] = hosts_.try_emplace(name);
  if (inserted) it->second.limit = GetTransferOptions().initial_host_connections;
  return it->second;
}

void TransferEngine::Submit(std::shared_ptr<TransferJob> job) {
  const int max_threads = GetTransferOptions().max_connections;
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(std::move(job));
  if (idle_ == 0 && static_cast<int>(threads_.size()) < max_threads) {
    threads_.emplace_back([this] { WorkerLoop(); });
  }
  cv_.notify_all();
}

// Reusing buffers spares each part its page faults, zeroing and unmapping
// (measured: a tenth of a cache fill's CPU time at 25 MB/s per connection).
size_t TransferEngine::KeptBuffers(const TransferOptions& o) {
  const uint64_t parts = o.max_bytes_in_flight / std::max<uint64_t>(o.part_size, 1);
  return static_cast<size_t>(std::clamp<uint64_t>(parts / 8, 1, kKeptBuffers));
}

char* TransferEngine::TakeBuffer(size_t n) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = kept_.size(); i-- > 0;) {
      if (kept_[i].second != n) continue;
      char* p = kept_[i].first;
      kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(i));
      kept_bytes_ -= n;
      return p;
    }
  }
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

void TransferEngine::GiveBuffer(char* p, size_t n) {
  if (p == nullptr) return;
  const size_t keep = KeptBuffers(GetTransferOptions());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (kept_.size() < keep) {
      kept_.emplace_back(p, n);
      kept_bytes_ += n;
      return;
    }
    // Full: the new size (part_size changed) replaces one of another size.
    for (auto& k : kept_) {
      if (k.second != n) {
        kept_bytes_ += n - k.second;
        std::swap(k.first, p);
        std::swap(k.second, n);
        break;
      }
    }
  }
  ::munmap(p, n);
}

double TransferEngine::HostLimit(const std::string& host) {
  std::lock_guard<std::mutex> lock(mu_);
  return HostOf(host).limit;
}

uint64_t TransferEngine::KeptBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kept_bytes_;
}

void TransferEngine::ReleaseBytes(uint64_t n) {
  if (n == 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    bytes_in_flight_ -= std::min(bytes_in_flight_, n);
  }
  cv_.notify_all();
}

void TransferEngine::Signal(const std::string& host, HostSignal signal) {
  const auto options = GetTransferOptions();
  {
    std::lock_guard<std::mutex> lock(mu_);
    Host& h = HostOf(host);
    if (signal == HostSignal::kSuccess) {
      // Until the host first pushes back, a slow start: one connection more
      // per part, so the limit doubles per round of parts (from 16 to 64 in
      // two rounds: at 25 MB/s per connection a round of 8 MiB parts takes
      // 0.3 s, and 4 connections more per round took longer than an epoch of
      // two 1 GiB shards to get there). After it, additive increase: about
      // four connections more per round.
      const double step = h.pushed_back ? 1.0 / std::max(1.0, h.limit / 4) : 1.0;
      h.limit = std::min<double>(options.max_connections, h.limit + step);
    } else {
      // Multiplicative decrease with jitter, at most once a second, so that a
      // storm of answers to requests already sent counts once.
      auto now = std::chrono::steady_clock::now();
      if (now - h.last_decrease >= std::chrono::seconds(1)) {
        thread_local std::mt19937_64 rng{std::random_device{}()};
        double factor = std::uniform_real_distribution<double>(0.4, 0.6)(rng);
        h.limit = std::max(1.0, std::floor(h.limit * factor));
        h.last_decrease = now;
        h.pushed_back = true;
      }
    }
  }
  cv_.notify_all();
}

std::shared_ptr<TransferJob> TransferEngine::Pick(std::string* host,
                                                  std::vector<std::shared_ptr<TransferJob>>* dead,
                                                  std::vector<std::pair<char*, size_t>>* unmap) {
  const TransferOptions options = GetTransferOptions();
  const uint64_t budget = options.max_bytes_in_flight;
  const int upload_slots = std::max(1, options.max_connections / 4);
  // Jobs whose stream is gone leave unrun (destroyed by the caller, unlocked:
  // the last reference to a stream's state gives its bytes back).
  for (size_t i = 0; i < queue_.size();) {
    if (queue_[i]->Rank() < 0) {
      dead->push_back(std::move(queue_[i]));
      queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  size_t best = queue_.size();
  int64_t best_rank = 0;
  for (size_t i = 0; i < queue_.size(); ++i) {
    const int64_t rank = queue_[i]->Rank();
    if (best != queue_.size() && rank >= best_rank) continue;
    if (queue_[i]->Upload() && uploads_running_ >= upload_slots) continue;
    const Host& h = HostOf(queue_[i]->host());
    const bool fits = rank == 0 || bytes_in_flight_ + queue_[i]->Bytes() <= budget;
    if (fits && h.running < static_cast<int>(h.limit)) {
      best = i;
      best_rank = rank;
    }
  }
  if (best == queue_.size()) return nullptr;
  // Kept buffers make room for the part (its own buffer may be one of them).
  while (!kept_.empty() &&
         bytes_in_flight_ + kept_bytes_ + queue_[best]->Bytes() > budget) {
    unmap->push_back(kept_.back());
    kept_bytes_ -= kept_.back().second;
    kept_.pop_back();
  }
  auto job = std::move(queue_[best]);
  queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(best));
  bytes_in_flight_ += job->Bytes();
  *host = job->host();
  HostOf(*host).running++;
  if (job->Upload()) uploads_running_++;
  return job;
}

void TransferEngine::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    std::string host;
    std::shared_ptr<TransferJob> job;
    std::vector<std::shared_ptr<TransferJob>> dead;
    std::vector<std::pair<char*, size_t>> unmap;
    idle_++;
    // Ranks change as readers move on: look again now and then.
    while ((job = Pick(&host, &dead, &unmap)) == nullptr) {
      if (!dead.empty()) {
        lock.unlock();
        dead.clear();
        lock.lock();
        continue;
      }
      if (queue_.empty()) {
        cv_.wait(lock);
      } else {
        cv_.wait_for(lock, std::chrono::milliseconds(100));
      }
    }
    idle_--;
    running_++;
    const bool upload = job->Upload();
    lock.unlock();
    dead.clear();
    for (auto& [p, n] : unmap) ::munmap(p, n);
    job->Run();
    job.reset();
    lock.lock();
    running_--;
    if (upload) uploads_running_--;
    HostOf(host).running--;
    cv_.notify_all();
  }
}

HostActivity* TransferEngine::Activity(const std::string& host) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& a = activity_[host];
  if (!a) a = std::make_unique<HostActivity>();
  return a.get();
}

double TransferEngine::NoteStall(HostActivity* host, double stall_s) {
  using std::chrono::duration_cast;
  using std::chrono::nanoseconds;
  const int64_t now = duration_cast<nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  const int64_t began = now - static_cast<int64_t>(stall_s * 1e9);
  const int64_t gap = static_cast<int64_t>((2 * stall_s + 1) * 1e9);
  std::lock_guard<std::mutex> lock(host->mu);
  const int64_t last_byte = host->last_byte_ns.load(std::memory_order_relaxed);
  if (host->stalled_since_ns == 0 || last_byte > host->stalled_since_ns ||
      now - host->last_stall_ns > gap) {
    host->stalled_since_ns = std::max(began, last_byte);
  }
  host->last_stall_ns = now;
  return static_cast<double>(now - host->stalled_since_ns) / 1e9;
}

void TransferEngine::CountReaderWait(std::chrono::steady_clock::duration d) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  reader_wait_seconds_ += std::chrono::duration<double>(d).count();
}

void TransferEngine::CountPart(double seconds) {
  int i = seconds <= kBucketBase
              ? 0
              : static_cast<int>(std::log(seconds / kBucketBase) / std::log(kBucketGrowth));
  std::lock_guard<std::mutex> lock(stats_mu_);
  part_hist_[static_cast<size_t>(std::clamp(i, 0, kBuckets))]++;
  parts_++;
}

void TransferEngine::ConnectionUp() {
  std::lock_guard<std::mutex> lock(stats_mu_);
  if (connections_++ == 0) busy_since_ = std::chrono::steady_clock::now();
  peak_connections_ = std::max(peak_connections_, connections_);
}

void TransferEngine::ConnectionDown() {
  std::lock_guard<std::mutex> lock(stats_mu_);
  if (--connections_ == 0)
    busy_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
}

namespace {
double Quantile(const std::vector<uint64_t>& hist, uint64_t total, double q) {
  if (total == 0) return 0;
  uint64_t want = static_cast<uint64_t>(std::ceil(q * static_cast<double>(total)));
  uint64_t seen = 0;
  for (size_t i = 0; i < hist.size(); ++i) {
    seen += hist[i];
    if (seen >= want) return BucketUpper(static_cast<int>(i));
  }
  return BucketUpper(static_cast<int>(hist.size()) - 1);
}
}  // namespace

double TransferEngine::PartMedianSeconds() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return Quantile(part_hist_, parts_, 0.5);
}

TransferStats TransferEngine::Stats() const {
  TransferStats s;
  s.bytes = bytes_.load();
  s.retries = retries_.load();
  s.stalls = stalls_.load();
  s.throttles = throttles_.load();
  s.streams = streams_.load();
  s.parted_streams = parted_.load();
  s.hedges = hedges_.load();
  s.hedge_wins = hedge_wins_.load();
  s.upload_parts = upload_parts_.load();
  s.upload_bytes = upload_bytes_.load();
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    s.connections = connections_;
    s.peak_connections = peak_connections_;
    s.busy_seconds = busy_seconds_;
    if (connections_ > 0)
      s.busy_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
    s.reader_wait_seconds = reader_wait_seconds_;
    s.parts = parts_;
    s.part_p50_s = Quantile(part_hist_, parts_, 0.5);
    s.part_p99_s = Quantile(part_hist_, parts_, 0.99);
  }
  s.bytes_per_s = s.busy_seconds > 0 ? static_cast<double>(s.bytes) / s.busy_seconds : 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.bytes_in_flight = bytes_in_flight_;
  }
  return s;
}

}  // namespace internal
}  // namespace shardstream
