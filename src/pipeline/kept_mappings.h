// KeptMappings: local shard files that stay open, and mapped, from one
// range and epoch to the next (LoaderOptions::mapped_keep_bytes). A shuffled
// epoch copies its token documents from the shards' mappings; a mapping
// made afresh faults every page of the shard in again (on small folios and
// 1024-token documents, most of what the shuffle cost), while one kept
// from the epoch before finds its pages mapped. Files are kept first come, up to the
// budget and at most kMaxFiles of them (each holds a descriptor), and none
// is let go for another: an epoch reads every shard once, so a shard let go
// would be the next one needed (an LRU over a cycle keeps nothing useful).
// A file whose size or mtime has changed since it was kept is opened
// afresh. Kept files' views are not released (their pages stay in the
// resident set: file pages, shared with the page cache).
//
// Thread-safety: any thread.
#ifndef SHARDSTREAM_PIPELINE_KEPT_MAPPINGS_H_
#define SHARDSTREAM_PIPELINE_KEPT_MAPPINGS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "shardstream/export.h"
#include "shardstream/result.h"
#include "shardstream/source.h"

namespace shardstream::internal {

class SHARDSTREAM_EXPORT KeptMappings {
 public:
  static constexpr size_t kMaxFiles = 256;
  explicit KeptMappings(uint64_t budget_bytes) : budget_(budget_bytes) {}
  // The file at `url` through `source`: the kept one if it is still the
  // same file, else a new one, kept if it maps (RandomAccessFile::MapView)
  // and the budget has room for it. A file that no longer stats is let go
  // and opened as without keeping (a deleted one: the source's error).
  Result<std::unique_ptr<RandomAccessFile>> Open(Source& source, const std::string& url);
  // Lets `url`'s kept file go: its range could not use it (a compressed
  // shard, a stale index), so it would hold budget and a descriptor for
  // nothing. Ranges still on it keep it open.
  void Forget(const std::string& url);
  uint64_t kept_bytes();

 private:
  struct Kept {
    std::shared_ptr<RandomAccessFile> file;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
  };
  const uint64_t budget_;
  Mutex mu_;
  uint64_t kept_bytes_ GUARDED_BY(mu_) = 0;
  std::map<std::string, Kept> kept_ GUARDED_BY(mu_);
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_KEPT_MAPPINGS_H_
