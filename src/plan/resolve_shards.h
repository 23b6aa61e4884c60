// ResolveShards: ResolveDataset's shards as the loader keeps them, in a
// ShardTable (columns), so a manifest of a million shards is never a vector
// of ShardEntry. ResolveDataset is this, copied out into a Manifest.
#ifndef SHARDSTREAM_SRC_PLAN_RESOLVE_SHARDS_H_
#define SHARDSTREAM_SRC_PLAN_RESOLVE_SHARDS_H_

#include <string>
#include <vector>

#include "manifest/shard_table.h"
#include "shardstream/dataset_inputs.h"

namespace shardstream::internal {

SHARDSTREAM_EXPORT Result<ShardTable> ResolveShards(const std::vector<std::string>& inputs,
                                 const ResolveOptions& options);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_SRC_PLAN_RESOLVE_SHARDS_H_
