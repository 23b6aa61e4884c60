// SampleIndex: where each sample of a shard starts and ends in the
// (uncompressed) tar, so a reader can open an uncompressed shard at sample k
// without reading what precedes it. Built by TarReader while it reads, or
// loaded from the sidecar "<shard>.idx" that `shardstream index` writes
// (format: docs/index_format.md).
//
// Thread-safety: a value; the functions are reentrant.
#ifndef SHARDSTREAM_SHARD_INDEX_H_
#define SHARDSTREAM_SHARD_INDEX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "shardstream/export.h"
#include "shardstream/result.h"
#include "shardstream/source.h"

namespace shardstream {

struct SampleIndexEntry {
  uint64_t offset = 0;   // first header block of the sample's first member
  uint64_t length = 0;   // bytes up to the end of its last member's padded data
  uint32_t nfields = 0;  // members that became fields
  std::string key;
};

struct SampleIndex {
  uint64_t shard_size = 0;  // bytes of the shard file the index describes
  bool compressed = false;  // offsets are then into the decompressed stream
  std::vector<SampleIndexEntry> samples;
};

// The sidecar's url: "<shard url>.idx".
SHARDSTREAM_EXPORT std::string IndexUrlFor(const std::string& shard_url);

// Serializes / parses the binary sidecar format. Parse fails with kCorrupt
// (naming `url`) on a bad magic, a truncated file, a bad checksum or entries
// that are not increasing.
SHARDSTREAM_EXPORT std::string SerializeSampleIndex(const SampleIndex& index);
SHARDSTREAM_EXPORT Result<SampleIndex> ParseSampleIndex(std::string_view data,
                                                        const std::string& url);

// Reads "<shard_url>.idx". On failure returns NotFound when there is no
// sidecar, kCorrupt when it is damaged or describes a shard of another size
// (a stale index).
SHARDSTREAM_EXPORT Result<SampleIndex> ReadSampleIndex(const std::string& shard_url,
                                                       Source* source = nullptr);
// Writes "<shard_url>.idx" atomically.
SHARDSTREAM_EXPORT Status WriteSampleIndex(const SampleIndex& index, const std::string& shard_url,
                                           Source* source = nullptr);

}  // namespace shardstream

#endif  // SHARDSTREAM_SHARD_INDEX_H_
