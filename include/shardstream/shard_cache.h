// ShardCache: the node-local shard cache. A directory (on NVMe) with a byte
// limit, shared by every process on the machine (ranks x DataLoader workers).
//
//  * Open(url) returns a stream at once. On a hit it reads the cached file;
//    on a miss one process downloads the shard (on a pool thread) into a
//    temporary file while readers in this and other processes parse it as it
//    grows ("stream-through"); nobody fetches it a second time.
//  * An entry is published by renaming a verified temporary (size, and the
//    manifest checksum when known) into place; a reader never sees a partial
//    entry under the final name. Processes coordinate with flock(2), but
//    correctness does not depend on it: without working locks a shard may be
//    downloaded twice, never published corrupt.
//  * Over the limit, least recently used entries are unlinked down to the low
//    watermark; an entry that any process has open is never evicted.
//  * Disk full: evict and retry once, then keep streaming from the source
//    without caching (logged once).
//
// The on-disk layout is in docs/cache_format.md; user guide in docs/cache.md.
//
// Thread-safety: every ShardCache method may be called concurrently. A
// CachedShard is used by one thread at a time (Cancel() from any thread).
// No thread is started before the first download; destruction cancels the
// downloads in flight and joins the pool. CachedShards may outlive the cache
// (their reads then fail with kCancelled if they still wait for bytes).
// Do not carry a ShardCache across fork(): create one in each process.
#ifndef SHARDSTREAM_SHARD_CACHE_H_
#define SHARDSTREAM_SHARD_CACHE_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shardstream/export.h"
#include "shardstream/manifest.h"
#include "shardstream/result.h"
#include "shardstream/source.h"

namespace shardstream {

enum class CacheMode {
  kReadWrite,  // hits from the cache, misses downloaded into it.
  kReadOnly,   // hits from the cache, misses streamed from the source; never writes.
  kOff,        // everything streamed from the source; the directory is not touched.
};

struct ShardCacheOptions {
  // The cache directory; created if missing. REQUIRED unless mode is kOff.
  std::string dir;
  // Bytes of shard data the directory may hold (entries plus downloads in
  // progress). REQUIRED (> 0) for kReadWrite.
  uint64_t limit_bytes = 0;
  // Eviction frees space down to this fraction of limit_bytes. Default: 0.9.
  double low_watermark = 0.9;
  CacheMode mode = CacheMode::kReadWrite;
  // Where shards are fetched from. Default: DefaultSource() (scheme router).
  std::shared_ptr<Source> source;
  // Every write inside `dir` (temporaries, renames, removals) goes through
  // this Source, so faults such as ENOSPC can be injected. Default: LocalSource().
  std::shared_ptr<Source> fs;
  // Download attempts per shard when the bytes fail verification or the
  // source fails with a retryable error. Default: 3.
  int max_attempts = 3;
  // Threads of the download pool (separate from the callers' reader threads).
  // Each download reads its shard in ranged parts over several connections
  // (transfer.h), within the process's connection budget. Default: 8.
  int download_threads = 8;
  // How many of the upcoming shards Prefetch() downloads ahead. Default: 8.
  int prefetch_lookahead = 8;
  // A reader waiting for bytes gives up with kUnavailable after this long
  // without progress. Default: 120 s.
  std::chrono::milliseconds stall_timeout{120000};
  // fdatasync an entry before publishing it, so a power loss never leaves a
  // published entry with missing data. Default: true.
  bool sync_entries = true;
  // Hash cached entries again on every hit (entries are verified once when
  // written). Default: false.
  bool verify_hits = false;
  // Bytes per file append: a download gathers the source's reads into whole
  // chunks at chunk-aligned offsets (holding bytes back from readers for at
  // most 2 ms), which the page cache stores in fewer, larger pieces.
  // Default: 256 KiB.
  size_t chunk_size = size_t{256} << 10;
};

// What the manifest says about a shard. Unknown fields stay at their defaults.
struct SHARDSTREAM_EXPORT ShardRef {
  std::string url;
  int64_t size = -1;     // bytes; -1 when unknown
  std::string checksum;  // "xxh3_128:<hex>" or empty
  ShardRef() = default;
  ShardRef(std::string u, int64_t s = -1, std::string c = {})  // NOLINT: implicit from url
      : url(std::move(u)), size(s), checksum(std::move(c)) {}
  ShardRef(const char* u) : url(u) {}  // NOLINT
  // From a manifest entry (its resolved url).
  static ShardRef FromEntry(const ShardEntry& entry);
};

// Counters since the cache was created (this process only).
struct CacheStats {
  uint64_t hits = 0;             // Opens served from a complete entry
  uint64_t misses = 0;           // Opens that started a download
  uint64_t joined = 0;           // Opens that joined a download already running
  uint64_t uncached = 0;         // Opens streamed from the source without caching
  uint64_t downloads = 0;        // entries published by this process
  uint64_t prefetches = 0;       // downloads started by Prefetch()
  uint64_t retries = 0;          // download attempts after the first
  uint64_t checksum_failures = 0;
  uint64_t evictions = 0;        // entries unlinked to make room
  uint64_t evicted_bytes = 0;
  uint64_t nospace_events = 0;   // ENOSPC while writing an entry
  uint64_t bytes_from_cache = 0;   // delivered to readers from cache files
  uint64_t bytes_from_source = 0;  // fetched from sources (downloads + uncached)
  std::map<std::string, uint64_t> source_bytes_by_scheme;  // "http", "s3", "file", ...
};

// One entry on disk (see ListCacheEntries).
struct CacheEntryInfo {
  std::string key;        // file name stem in the directory
  std::string url;        // redacted url, from the entry's metadata ("" if missing)
  uint64_t size = 0;
  std::string checksum;   // as verified when written ("" when unknown)
  int64_t last_use_ns = 0;  // entry file mtime
  bool in_use = false;    // pinned by a reader in some process
  bool temporary = false; // a download in progress or left by a crashed process
};

// An open shard: an InputStream (front to back) that pins its cache entry
// until destroyed. Reads block until bytes arrive while the shard is still
// downloading; the last byte is delivered only after the bytes read have been
// verified against the expected size and checksum, so a stream that ends
// without error delivered exactly the shard the manifest describes.
// On failure Read returns kChecksum (bytes differ from the manifest),
// kUnavailable (stalled past stall_timeout, source down), kCancelled (Cancel()
// or cache destroyed), or the source's error.
class SHARDSTREAM_EXPORT CachedShard : public InputStream {
 public:
  ~CachedShard() override;
  // True when opened from a complete cache entry.
  virtual bool hit() const = 0;
  // Makes a blocked or future Read return kCancelled. Safe from any thread.
  virtual void Cancel() = 0;
};

class SHARDSTREAM_EXPORT ShardCache {
 public:
  // On failure returns kConfig for invalid options, or kIo if the directory
  // cannot be created. Starts no thread. In kReadWrite mode, temporaries left
  // by crashed processes are removed.
  static Result<std::unique_ptr<ShardCache>> Create(ShardCacheOptions options);
  ~ShardCache();
  ShardCache(const ShardCache&) = delete;
  ShardCache& operator=(const ShardCache&) = delete;

  // Opens a shard for reading from the start (see CachedShard). Returns once
  // the first bytes can be requested, not when the download ends. Errors of
  // the source that occur before any byte (kNotFound, kAuth) are returned
  // here; later ones by Read.
  Result<std::unique_ptr<CachedShard>> Open(const ShardRef& shard);

  // A pinned random-access view of a complete entry: waits for the download
  // to finish and be verified first. In kOff mode, or when the shard cannot
  // be cached, returns the source's own RandomAccessFile (not verified).
  Result<std::unique_ptr<RandomAccessFile>> OpenRandomAccess(const ShardRef& shard);
  // A pinned random-access view of a complete entry, at once: never waits,
  // downloads or reads the source. Counts a hit. On failure returns
  // kNotFound when the shard is not cached (also while it downloads, and in
  // kOff mode).
  Result<std::unique_ptr<RandomAccessFile>> OpenIfCached(const ShardRef& shard);

  // Tells the cache which shards come next, in order. Of the first
  // prefetch_lookahead of them, those neither cached nor downloading are
  // downloaded by the pool (at most download_threads - 1 at once, so that a
  // reader's miss always finds a thread); shards from an earlier call that
  // have not started are dropped. Never evicts an entry in use; skips a shard
  // that does not fit. Errors are not reported here (a later Open sees them).
  // No-op unless kReadWrite. Call it whenever the reader moves on.
  void Prefetch(const std::vector<ShardRef>& upcoming);

  // Blocks until no prefetch download is queued or running (tests, tools).
  void WaitIdle();

  // Unlinks least recently used entries not in use until the directory holds
  // at most `bytes`. Returns the number of bytes it holds afterwards.
  Result<uint64_t> EvictTo(uint64_t bytes);
  // Unlinks the entry of `url` if present and not in use. On failure returns
  // kUnavailable if it is in use, kNotFound if not cached.
  Status Evict(const std::string& url);

  CacheStats stats() const;
  const ShardCacheOptions& options() const;

  class Impl;

 private:
  explicit ShardCache(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// Directory-level helpers for tools; safe while other processes use the cache.
// Entries (complete and temporary) sorted by last use, oldest first.
SHARDSTREAM_EXPORT Result<std::vector<CacheEntryInfo>> ListCacheEntries(const std::string& dir);
// Removes every entry not in use and every abandoned temporary. Refuses
// (kConfig) a directory that is not a shardstream cache.
SHARDSTREAM_EXPORT Status ClearCache(const std::string& dir);
// The cache key (file name stem) of a url: a hash of the redacted url.
SHARDSTREAM_EXPORT std::string CacheKey(const std::string& url);

}  // namespace shardstream

#endif  // SHARDSTREAM_SHARD_CACHE_H_
