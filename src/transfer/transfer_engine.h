// The process's transfer engine: worker threads (started on first use, up
// to TransferOptions::max_connections) that run jobs, each one GET on one
// connection. A free worker takes the queued job of lowest rank (0: a reader
// waits on it now) whose host has a free connection under its AIMD limit and
// whose bytes fit the in-flight budget (rank 0 always fits, so a reader never
// waits on the budget). Also the home of the transfer counters
// (GetTransferStats) and of the options in force. Checkpoint upload parts
// run here too, after every read and on at most a quarter of the connections.
//
// After fork() the child gets a fresh engine on first use (the parent's
// threads do not exist there; the old one is leaked, never touched).
//
// Thread-safety: everything may be called from any thread.
#ifndef SHARDSTREAM_TRANSFER_TRANSFER_ENGINE_H_
#define SHARDSTREAM_TRANSFER_TRANSFER_ENGINE_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shardstream/export.h"
#include "shardstream/transfer.h"

namespace shardstream::internal {

class TransferJob {
 public:
  virtual ~TransferJob() = default;
  // The host the job connects to (its AIMD limit).
  virtual const std::string& host() const = 0;
  // 0 when a reader waits on the job's bytes now, larger the further ahead
  // of its reader; negative: not wanted any more (dropped unrun).
  virtual int64_t Rank() const = 0;
  // Bytes the job holds for its reader once it runs (taken from the budget
  // at dispatch; the job's owner gives them back with ReleaseBytes).
  virtual uint64_t Bytes() const = 0;
  // Runs on a worker, Bytes() taken from the budget.
  virtual void Run() = 0;
  // An upload (a checkpoint part): runs on at most a quarter of the
  // connections, so that reads always have connections left.
  virtual bool Upload() const { return false; }
};

// Whether a host sends anything at all: the time of its last body byte on
// any connection (streams store it, lock-free), and the window of stalls
// with no byte since (NoteStall).
struct HostActivity {
  std::atomic<int64_t> last_byte_ns{0};  // steady clock
  std::mutex mu;                         // below
  int64_t stalled_since_ns = 0;          // 0: not stalling
  int64_t last_stall_ns = 0;
};

// What a GET ended with, for its host's AIMD limit.
enum class HostSignal { kSuccess, kThrottled, kConnectionError };

class SHARDSTREAM_EXPORT TransferEngine {
 public:
  // The engine of this process (a new one in a forked child).
  static TransferEngine& Get();

  void Submit(std::shared_ptr<TransferJob> job);
  void ReleaseBytes(uint64_t n);
  void Signal(const std::string& host, HostSignal signal);

  // Counters kept by the streams (see transfer.h).
  void CountBytes(uint64_t n) { bytes_.fetch_add(n, std::memory_order_relaxed); }
  void CountRetry(bool stall) {
    retries_.fetch_add(1, std::memory_order_relaxed);
    if (stall) stalls_.fetch_add(1, std::memory_order_relaxed);
  }
  void CountThrottle() { throttles_.fetch_add(1, std::memory_order_relaxed); }
  void CountStream(bool parted) {
    streams_.fetch_add(1, std::memory_order_relaxed);
    if (parted) parted_.fetch_add(1, std::memory_order_relaxed);
  }
  void CountHedge() { hedges_.fetch_add(1, std::memory_order_relaxed); }
  void CountHedgeWin() { hedge_wins_.fetch_add(1, std::memory_order_relaxed); }
  void CountUpload(uint64_t n) {
    upload_parts_.fetch_add(1, std::memory_order_relaxed);
    upload_bytes_.fetch_add(n, std::memory_order_relaxed);
  }
  void CountReaderWait(std::chrono::steady_clock::duration d);
  void CountPart(double seconds);
  // A connection (a job's or a plain stream's) opens or closes: counts
  // connections and the busy time.
  void ConnectionUp();
  void ConnectionDown();
  // The host's activity record (lives as long as the engine).
  HostActivity* Activity(const std::string& host);
  // A GET to the host stalled (no byte for stall_s). Returns how long the
  // host has sent no byte on any connection while asked: since the first
  // of a run of stalls with no byte in between (a run ends when no stall
  // follows within 2 * stall_s + 1 s: the host was not being asked).
  double NoteStall(HostActivity* host, double stall_s);
  // A part's buffer of n bytes: one kept from a consumed part of the same
  // size, else fresh anonymous memory; null when out of memory. Given back
  // with GiveBuffer, which keeps at most kKeptBuffers and returns the rest
  // to the system at once (a heap block of this size would stay in the
  // process after free). Kept buffers count against max_bytes_in_flight:
  // a part that would not fit beside them returns some to the system.
  // KeptBuffers: how many, an eighth of the budget's parts, 1 to 8.
  static constexpr size_t kKeptBuffers = 8;
  static size_t KeptBuffers(const TransferOptions& o);
  char* TakeBuffer(size_t n);
  void GiveBuffer(char* p, size_t n);
  // Parted streams open now (PartedStream), for their windows.
  void StreamOpened() { open_streams_.fetch_add(1, std::memory_order_relaxed); }
  void StreamClosed() { open_streams_.fetch_sub(1, std::memory_order_relaxed); }
  int OpenStreams() const { return open_streams_.load(std::memory_order_relaxed); }
  // A host's AIMD limit now (its initial one if it has none yet), and the
  // bytes of kept buffers: for tests.
  double HostLimit(const std::string& host);
  uint64_t KeptBytes() const;
  // The median part time so far (0 before any part), for hedging.
  double PartMedianSeconds() const;

  TransferStats Stats() const;

 private:
  TransferEngine();
  void WorkerLoop();
  // The job to run next, or null; takes its bytes and host slot.
  // Kept buffers the budget needs back go to *unmap (unmapped unlocked).
  std::shared_ptr<TransferJob> Pick(std::string* host,
                                    std::vector<std::shared_ptr<TransferJob>>* dead,
                                    std::vector<std::pair<char*, size_t>>* unmap);
  struct Host {
    double limit = 0;
    int running = 0;
    std::chrono::steady_clock::time_point last_decrease{};
    bool pushed_back = false;  // a decrease happened: slow start is over
  };
  Host& HostOf(const std::string& name);

  const pid_t pid_;  // the process that made it
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<TransferJob>> queue_;
  std::vector<std::thread> threads_;  // never joined: the engine lives as long as the process
  int idle_ = 0;
  int running_ = 0;
  int uploads_running_ = 0;
  uint64_t bytes_in_flight_ = 0;
  std::map<std::string, Host> hosts_;
  std::map<std::string, std::unique_ptr<HostActivity>> activity_;

  std::atomic<int> open_streams_{0};
  std::vector<std::pair<char*, size_t>> kept_;  // consumed part buffers (mu_)
  uint64_t kept_bytes_ = 0;
  std::atomic<uint64_t> bytes_{0}, retries_{0}, stalls_{0}, throttles_{0}, streams_{0},
      parted_{0}, hedges_{0}, hedge_wins_{0}, upload_parts_{0}, upload_bytes_{0};

  mutable std::mutex stats_mu_;  // below
  int connections_ = 0;
  int peak_connections_ = 0;
  std::chrono::steady_clock::time_point busy_since_{};
  double busy_seconds_ = 0;
  double reader_wait_seconds_ = 0;
  std::vector<uint64_t> part_hist_;  // log-spaced part times (see CountPart)
  uint64_t parts_ = 0;
};

// The host[:port] of an http(s) url ("" if none).
std::string UrlHost(const std::string& url);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_TRANSFER_TRANSFER_ENGINE_H_
