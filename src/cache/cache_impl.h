// ShardCache internals shared by shard_cache.cc (opening, hits, eviction),
// download.cc (the download pool) and shard_stream.cc (the reader side).
#ifndef SHARDSTREAM_CACHE_CACHE_IMPL_H_
#define SHARDSTREAM_CACHE_CACHE_IMPL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/cache_dir.h"
#include "shardstream/shard_cache.h"

namespace shardstream {

namespace internal {

// One download of one shard by this process, shared by the pool thread that
// runs it and the readers in this process that stream it as it grows.
struct Download {
  ShardRef ref;
  std::string key;
  bool prefetch = false;
  FileLock entry_lock;                        // exclusive, held until the end
  std::unique_ptr<InputStream> first_stream;  // opened by Open(), used by attempt 1

  std::mutex mu;
  std::condition_variable cv;
  std::string temp_path;    // the current attempt's temporary ("" before one exists), its entry once renamed
  uint64_t generation = 0;  // bumped per attempt
  uint64_t written = 0;     // bytes of the current attempt on disk
  // The least `written` a reader waiting in this process asked for: appends
  // short of it wake nobody (unless the source slows down or pauses).
  uint64_t wake_at = 0;
  int64_t size = -1;        // the current attempt's size, when the source says (-1: unknown)
  bool done = false;
  bool uncached = false;    // gave up caching: readers continue from the source
  Status status;            // final outcome when done
  // The last attempt checked against the manifest's checksum (0: none yet)
  // and the outcome, known before the entry is synced and published.
  uint64_t checked_generation = 0;
  Status check_status;
};

// What a reader reads from at a given moment. Every byte of an entry or a
// temporary is read through a RandomAccessFile from the cache's Source
// (ShardCacheOptions::fs), so fault injection reaches cache hits too.
struct Attachment {
  enum Kind { kFile, kGrowing, kSource } kind = kSource;
  bool hit = false;
  std::unique_ptr<RandomAccessFile> file;  // kFile, kGrowing (foreign)
  // kGrowing (foreign): the same temporary, for its identity only (inode and
  // link count: published or discarded), never read.
  int identity_fd = -1;
  FileLock pin;                         // kFile: shared lock on the entry
  uint64_t size = 0;                    // kFile: entry size
  std::shared_ptr<Download> download;   // kGrowing in this process
  std::unique_ptr<InputStream> stream;  // kSource
  Attachment() = default;
  Attachment(Attachment&& o) noexcept;
  Attachment& operator=(Attachment&& o) noexcept;
  ~Attachment();
};

}  // namespace internal

class ShardCache::Impl {
 public:
  explicit Impl(ShardCacheOptions options);
  ~Impl();

  // Where a reader at byte `pos` of `ref` should read from now. May start a
  // download (count_open: statistics of an Open rather than a reattach).
  // cached_only: a complete entry or kNotFound, never a download or the
  // source (and a miss is not counted).
  Result<internal::Attachment> Acquire(const ShardRef& ref, uint64_t pos, bool count_open,
                                       bool cached_only = false);
  // A stream from the source itself at `pos` (no caching).
  Result<internal::Attachment> FromSource(const ShardRef& ref, uint64_t pos);

  // Pool.
  void EnqueueDownload(std::shared_ptr<internal::Download> d);
  void Prefetch(const std::vector<ShardRef>& upcoming);
  void WaitIdle();
  void Stop();
  bool stopping() const { return stopping_.load(); }
  // A download's source stream: cancelled by Stop(), so that destroying the
  // cache does not wait for a slow or stalled network transfer.
  Result<std::unique_ptr<InputStream>> OpenDownloadStream(const std::string& url) {
    StreamOptions o;
    o.cancel = cancel_;
    return opts.source->OpenInputStreamWith(url, o);
  }

  // Evicts down to `bytes`, and by at least `free_at_least` bytes (a full
  // disk) where entries not in use allow. Returns the usage left.
  Result<uint64_t> EvictTo(uint64_t bytes, uint64_t free_at_least = 0);

  void CountSourceBytes(const std::string& url, uint64_t n);
  template <typename F>
  void UpdateStats(F f) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    f(stats_);
  }
  CacheStats stats() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    return stats_;
  }

  const ShardCacheOptions opts;

 private:
  // Opens the complete entry of `key` if present and consistent with `ref`
  // (null otherwise: an entry that cannot be opened is a miss).
  std::unique_ptr<RandomAccessFile> OpenEntry(const std::string& key, const ShardRef& ref,
                                              uint64_t* size);
  std::shared_ptr<internal::Download> ActiveDownload(const std::string& key);
  bool CachingSuspended();

  // download.cc
  void WorkerLoop();
  void PrefetchOne(const ShardRef& ref);
  void RunDownload(internal::Download& d);
  // Reserves room for `size` bytes and creates the temporary. Returns false
  // in *fits when the shard cannot be cached now (too large, all pinned).
  Result<std::unique_ptr<WritableFile>> Reserve(const std::string& key, int64_t size,
                                                std::string* temp, bool* fits);
  Status Publish(internal::Download& d, WritableFile& file, const std::string& temp,
                 const std::string& checksum, uint64_t size);
  void OnNoSpace(const Status& s, bool give_up, uint64_t need);
  // Any other write failure in the cache directory: stream uncached a while.
  void OnCacheError(const Status& s);
  // Streams without caching for a while; true the first time for `warned`
  // (*warned is guarded by mu_), so each kind of failure is logged once.
  bool SuspendCaching(bool* warned);
  void FinishDownload(internal::Download& d, Status status, bool uncached);

  std::atomic<bool> stopping_{false};
  std::shared_ptr<std::atomic<bool>> cancel_ = std::make_shared<std::atomic<bool>>(false);

  mutable std::mutex stats_mu_;
  CacheStats stats_;

  std::mutex mu_;  // guards everything below
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  std::map<std::string, std::weak_ptr<internal::Download>> active_;
  std::deque<std::shared_ptr<internal::Download>> reader_queue_;
  std::deque<ShardRef> prefetch_queue_;
  std::vector<std::thread> threads_;
  int idle_threads_ = 0;
  int running_prefetch_ = 0;
  int running_ = 0;
  std::chrono::steady_clock::time_point suspended_until_{};
  bool warned_nospace_ = false;
  bool warned_error_ = false;

  friend class ShardCache;
};

namespace internal {
// shard_stream.cc
std::unique_ptr<CachedShard> NewShardStream(std::shared_ptr<ShardCache::Impl> impl,
                                            const ShardRef& ref, Attachment att);
// A complete entry's file, pinned; waits for a download first unless
// cached_only (then kNotFound when the shard is not cached yet).
Result<std::unique_ptr<RandomAccessFile>> OpenPinnedRandomAccess(
    std::shared_ptr<ShardCache::Impl> impl, const ShardRef& ref, bool cached_only = false);
}  // namespace internal

}  // namespace shardstream

#endif  // SHARDSTREAM_CACHE_CACHE_IMPL_H_
