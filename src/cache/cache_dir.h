// The cache directory's on-disk layout (docs/cache_format.md), its file locks,
// and the directory-wide operations that need no in-process state: scanning,
// space accounting, LRU eviction and removal of abandoned temporaries.
//
// Reads and locks use POSIX calls directly (the cache is a local directory);
// every write (removal) goes through the `fs` Source given by the caller.
#ifndef SHARDSTREAM_CACHE_CACHE_DIR_H_
#define SHARDSTREAM_CACHE_CACHE_DIR_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "shardstream/result.h"
#include "shardstream/source.h"

namespace shardstream::internal {

// Marks a directory as a shardstream cache (content: format version line).
inline constexpr const char* kCacheMarker = "SHARDSTREAM_CACHE";
inline constexpr const char* kCacheFormat = "shardstream-cache 1\n";
// Serialises space reservation and eviction between processes.
inline constexpr const char* kDirLock = ".dir.lock";

std::string EntryPath(const std::string& dir, const std::string& key);  // <key>.shard
std::string MetaPath(const std::string& dir, const std::string& key);   // <key>.json
std::string LockPath(const std::string& dir, const std::string& key);   // <key>.lock
// <key>.<size or "u">.<pid>.<random hex>.tmp
std::string NewTempPath(const std::string& dir, const std::string& key, int64_t size);

// Writes a small file atomically (temporary "<stem>.meta.<pid>.<rand>.tmp",
// rename). The temporary name is unique per process even after fork(), and
// abandoned ones are cleaned like download temporaries.
Status WriteSmallFileAtomic(Source& fs, const std::string& dir, const std::string& stem,
                            const std::string& path, std::string_view text, bool sync);

// An flock(2)ed file descriptor, released on destruction.
class FileLock {
 public:
  FileLock() = default;
  explicit FileLock(int fd) : fd_(fd) {}
  ~FileLock() { Release(); }
  FileLock(FileLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FileLock& operator=(FileLock&& o) noexcept {
    if (this != &o) { Release(); fd_ = o.fd_; o.fd_ = -1; }
    return *this;
  }
  bool held() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void Release();

 private:
  int fd_ = -1;
};

// Opens (creating) `path` and flocks it shared or exclusive. With
// block=false returns a FileLock that is not held() when another process
// holds a conflicting lock. The lock is taken on the file the path names
// after locking (a lock file unlinked by an evictor meanwhile is retried).
// With create=false a missing file gives kNotFound (read-only caches).
Result<FileLock> LockFile(const std::string& path, bool exclusive, bool block,
                          bool create = true);

// Writes `text` as the whole content of a held lock file (the name of the
// temporary being downloaded, for readers in other processes).
void SetLockContent(const FileLock& lock, const std::string& text);
// Reads a lock file's content; empty when missing.
std::string ReadLockContent(const std::string& path);

struct DirItem {
  enum Kind { kEntry, kTemp, kOther } kind = kOther;
  std::string key;
  std::string path;
  uint64_t size = 0;      // bytes on disk now
  uint64_t reserved = 0;  // bytes it counts against the limit
  int64_t mtime_ns = 0;
  pid_t pid = 0;          // temporaries: the writer
};

// Entries and temporaries in `dir` (other files are ignored).
Result<std::vector<DirItem>> ScanDir(const std::string& dir);
// Bytes counted against the limit: entries, plus temporaries at the larger of
// their expected and current size.
uint64_t Usage(const std::vector<DirItem>& items);

// True when the writer of a temporary is gone: its flock is free and its pid
// is dead (or the file has not changed for an hour, for reused pids).
bool TempAbandoned(const DirItem& temp);

// Removes abandoned temporaries; drops them from `items`. Returns the count.
int RemoveAbandonedTemps(Source& fs, std::vector<DirItem>& items);

struct EvictOutcome {
  uint64_t count = 0;
  uint64_t bytes = 0;
};
// Unlinks the least recently used entries whose lock is free until Usage()
// is at most `target`; updates `items`. Never touches `keep_key`.
EvictOutcome EvictLru(Source& fs, const std::string& dir, std::vector<DirItem>& items,
                      uint64_t target, const std::string& keep_key = {});
// Unlinks one entry (data, metadata, lock) if its lock can be taken
// exclusively at once. Returns false when it is in use.
bool RemoveEntryIfUnused(Source& fs, const std::string& dir, const std::string& key);

// Whether a Status reports a full disk or an exceeded quota.
bool IsNoSpace(const Status& status);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_CACHE_CACHE_DIR_H_
