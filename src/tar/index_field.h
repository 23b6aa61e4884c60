// The sample index's record of one field, made alike by the tar reader and
// the shard writer.
#ifndef SHARDSTREAM_TAR_INDEX_FIELD_H_
#define SHARDSTREAM_TAR_INDEX_FIELD_H_

#include <cstdint>
#include <string_view>

#include "shardstream/shard_index.h"

namespace shardstream::internal {

// `data` is the whole field, its first byte at `offset` in the tar. An .npy
// field whose header parses gets its values' place, dtype and count; any
// other field (or a broken .npy, left to whoever decodes it) gets ndim -1.
void MakeIndexField(std::string_view name, uint64_t offset, std::string_view data,
                    SampleIndexField* out);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_TAR_INDEX_FIELD_H_
