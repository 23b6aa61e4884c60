// The fields a Loader batches when the caller names none: every field of the
// data set's first sample (first shard in manifest order, first sample), each
// decoded by its extension, as WebDataset's .decode() does; optional where
// one of the shard's first 64 samples lacks it (a field only later samples
// have is left out, with a warning). Reading one
// sample through the loader's Source (or its cache) makes the choice the same
// on every rank, worker and epoch.
#ifndef SHARDSTREAM_PIPELINE_FIRST_SAMPLE_H_
#define SHARDSTREAM_PIPELINE_FIRST_SAMPLE_H_

#include <memory>
#include <vector>

#include "manifest/shard_table.h"
#include "shardstream/decode.h"
#include "shardstream/manifest.h"
#include "shardstream/options.h"
#include "shardstream/result.h"

namespace shardstream::internal {

// On success returns one FieldSpec (kAuto) per field of the first sample, in
// the order of its members; for an MDS data set, one per column
// (MdsDefaultFields). On failure returns the error of opening or reading the
// first shard, or kConfig when it holds no sample.
Result<std::vector<FieldSpec>> FieldsOfFirstSample(const LoaderOptions& options,
                                                   const ShardTable& manifest);

// The bytes of a shard, from the options' cache or source, for a look at
// its first samples.
Result<std::unique_ptr<InputStream>> OpenForFields(const LoaderOptions& options, const ShardEntry& e);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_FIRST_SAMPLE_H_
