// LoadOrBuildSampleIndex: the one rule for getting a shard's sample index
// (learning sample counts, equal batches' token counts): read it from
// beside the shard or from the index folder; where there is none, or it is
// stale, damaged or (when field records are needed) of version 1, and the
// shard is local, build it by reading the shard and keep it for next time.
// A JSON Lines file's (`rows`) index has a row per line (rows.h).
#ifndef SHARDSTREAM_TAR_INDEX_LOOKUP_H_
#define SHARDSTREAM_TAR_INDEX_LOOKUP_H_

#include <string>

#include "shardstream/result.h"
#include "shardstream/shard_index.h"
#include "shardstream/source.h"

namespace shardstream::internal {

struct IndexLookup {
  SampleIndex index;
  bool found = false;  // `index` holds the shard's index, read or built
  bool built = false;  // read from the shard, not found ready
  // !found: why (the read's kNotFound or kCorrupt when nothing may be
  // built, or, with build_failed, the build's error: a damaged shard).
  Status missing;
  bool build_failed = false;
  Status kept;  // when built: writing it back (a failure is no error)
};

// Reads (through `source`, DefaultSource() when null) the index of `url`,
// or builds it when `build` and `url` is local and the index is missing,
// stale, damaged or, with `need_fields`, without field records; then writes
// it back beside the shard, or into `index_dir` when set. A version 1 index
// that may not be rebuilt is returned as found. On failure returns the
// read's error when it is not kNotFound or kCorrupt (I/O, permission: not
// the shard's, and a rank must not plan without an index the others read).
// `shard_size` (>= 0): the shard's size as known (a listing), not asked.
Result<IndexLookup> LoadOrBuildSampleIndex(const std::string& url, Source* source,
                                           const std::string& index_dir, bool build,
                                           bool need_fields, bool rows = false,
                                           int64_t shard_size = -1);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_TAR_INDEX_LOOKUP_H_
