// SampleIndex: where each sample of a shard starts and ends in the
// (uncompressed) tar, so a reader can open an uncompressed shard at sample k
// without reading what precedes it. Built by TarReader while it reads, or
// loaded from the sidecar "<shard>.idx" that `shardstream index` writes
// (format: docs/sample_index_format.md).
//
// Thread-safety: a value; the functions are reentrant.
#ifndef SHARDSTREAM_SHARD_INDEX_H_
#define SHARDSTREAM_SHARD_INDEX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "shardstream/dtype.h"
#include "shardstream/export.h"
#include "shardstream/result.h"
#include "shardstream/source.h"

namespace shardstream {

struct SampleIndexEntry {
  uint64_t offset = 0;   // first header block of the sample's first member
  uint64_t length = 0;   // bytes up to the end of its last member's padded data
  uint32_t nfields = 0;  // members that became fields
  std::string key;
  uint64_t first_field = 0;  // its fields: SampleIndex::fields[first_field, +nfields)
};

// Where one field's bytes lie (version 2 indexes), so a reader can read a
// field straight into place. For an .npy field also where its values start
// and what they are, so token documents can be placed before they are read.
struct SampleIndexField {
  std::string name;       // "tokens.npy"
  uint64_t offset = 0;    // of the member's data in the (uncompressed) tar
  uint64_t size = 0;      // the member's data bytes
  int32_t ndim = -1;      // -1: not an .npy array (or not one it could parse)
  DType dtype = DType::kUint8;
  uint64_t payload = 0;   // .npy: offset of the values (after the header)
  uint64_t count = 0;     // .npy: number of values
  uint64_t header_hash = 0;  // .npy: XXH3-64 of its header, [offset, payload)
  uint16_t flags = 0;        // kIndexField* bits
};

// SampleIndexField::flags. A document of a group (several documents in one
// array, docs/shards.md): its values lie in the group's array member, and
// header_hash is that array's .npy header's. The field is its values alone
// (offset == payload) ...
inline constexpr uint16_t kIndexFieldGrouped = 1;
// ... but for the group's first document, whose field starts at the
// array's .npy header (payload - offset: the header's length) and whose
// sample starts at the group's first header, where a reader opened at a
// later document of the group begins.
inline constexpr uint16_t kIndexFieldGroupStart = 2;

struct SampleIndex {
  uint64_t shard_size = 0;  // bytes of the shard file the index describes
  bool compressed = false;  // offsets are then into the decompressed stream
  std::vector<SampleIndexEntry> samples;
  // Every sample's fields, in order (empty when read from a version 1 file).
  std::vector<SampleIndexField> fields;
  bool has_fields() const { return !samples.empty() && !fields.empty(); }
};

// The sidecar's url: "<shard url>.idx".
SHARDSTREAM_EXPORT std::string IndexUrlFor(const std::string& shard_url);

// Serializes / parses the binary sidecar format: version 2 with the field
// records, version 1 (read as well) when `fields` is empty or does not
// cover every sample. Parse fails with kCorrupt
// (naming `url`) on a bad magic, a truncated file, a bad checksum or entries
// that are not increasing.
SHARDSTREAM_EXPORT std::string SerializeSampleIndex(const SampleIndex& index);
SHARDSTREAM_EXPORT Result<SampleIndex> ParseSampleIndex(std::string_view data,
                                                        const std::string& url);

// Where the index of `shard_url` is kept in a local folder of indexes
// (LoaderOptions::index_dir) instead of beside the shard:
// "<index_dir>/<shard name>.<xxh3-64 of the url>.idx".
SHARDSTREAM_EXPORT std::string IndexCacheUrl(const std::string& index_dir,
                                             const std::string& shard_url);
// Reads "<shard_url>.idx", or with `index_dir` the copy kept there when there
// is no sidecar. On failure returns NotFound when there is none, kCorrupt
// when it is damaged or describes a shard of another size (a stale index).
// The shard's size is asked of the source (a HEAD for remote shards) unless
// `shard_size` (>= 0) gives it, as an object store's listing does.
SHARDSTREAM_EXPORT Result<SampleIndex> ReadSampleIndex(const std::string& shard_url,
                                                       Source* source = nullptr,
                                                       const std::string& index_dir = "",
                                                       int64_t shard_size = -1);
// Writes "<shard_url>.idx" atomically; with `index_dir`, IndexCacheUrl
// there instead (the folder is made), leaving the shard's folder alone.
// Both read and write through `source` (DefaultSource() when null), the
// copy in `index_dir` too.
SHARDSTREAM_EXPORT Status WriteSampleIndex(const SampleIndex& index, const std::string& shard_url,
                                           Source* source = nullptr,
                                           const std::string& index_dir = "");

}  // namespace shardstream

#endif  // SHARDSTREAM_SHARD_INDEX_H_
