// What the loader checks of its options before it touches any data: that
// they make sense together, and that what they make resident fits
// memory_budget (docs/pipeline.md, "Memory").
#ifndef SHARDSTREAM_PIPELINE_OPTION_CHECKS_H_
#define SHARDSTREAM_PIPELINE_OPTION_CHECKS_H_

#include "manifest/shard_table.h"
#include "shardstream/manifest.h"
#include "shardstream/options.h"
#include "shardstream/result.h"
#include "shardstream/status.h"

namespace shardstream::internal {

// kConfig naming the first option that is out of range or conflicts.
Status ValidateLoaderOptions(const LoaderOptions& o);

// kConfig with the estimate's parts when the options need more than
// memory_budget for data set `m` (0: no check). Else the bytes of shards
// the loader may keep mapped (mapped_keep_bytes): with a memory_budget, at
// most what the estimate leaves of it, since kept pages stay resident.
Result<uint64_t> CheckMemoryBudget(const LoaderOptions& o, const ShardTable& m);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_OPTION_CHECKS_H_
