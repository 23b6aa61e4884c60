// Data set inputs as WebDataset and Streaming users write them, resolved into
// one Manifest:
//
//   "s3://b/data/manifest.jsonl"      a manifest (.jsonl, .csv, .json)
//   "data/shard-{000000..000099}.tar" a brace pattern
//   "data/shard-000000.tar.zst"       one shard (.tar, .tar.zst, .tar.gz, .tgz)
//   "data/" or "s3://b/data/"         a directory (prefix) of shards: its .tar,
//                                     .tar.zst, .tar.gz files in name order
//   "s3://b/mds-set/"                  an MDS set: a folder holding index.json (mds.h)
//   "data/train.parquet"              Parquet rows, read by ResolveOptions::parquet (a
//                                     folder of them too, when it holds no shards)
//   "data/train.jsonl.zst"            JSON Lines rows (.jsonl, .jsonl.gz, .jsonl.zst; a .jsonl
//                                     whose first line names a shard is a manifest): a
//                                     folder of them too, when it holds no shards (rows.h)
//   a list of any of these            their shards, in order
//
// Without a manifest the shards' sample counts are unknown; ResolveDataset
// learns them (when asked) from each shard's sidecar index "<shard>.idx", and
// for local shards without one builds the index by reading the shard once
// and writes the sidecar, so the next run starts at once and the plan can
// split samples exactly once across ranks and workers. Remote shards without
// a sidecar keep unknown counts (the plan then balances shards).
//
// Thread-safety: reentrant; ResolveDataset may run threads of its own while
// it learns counts, all joined before it returns.
#ifndef SHARDSTREAM_DATASET_INPUTS_H_
#define SHARDSTREAM_DATASET_INPUTS_H_

#include <string>
#include <string_view>
#include <vector>

#include "shardstream/export.h"
#include "shardstream/url.h"
#include "shardstream/manifest.h"
#include "shardstream/result.h"
#include "shardstream/rows.h"
#include "shardstream/source.h"

namespace shardstream {

struct ResolveOptions {
  // Where urls are opened. Default: null (DefaultSource()).
  Source* source = nullptr;
  // Learn unknown sample counts from sidecar indexes (building and writing
  // them for local shards). Default: true.
  bool learn_counts = true;
  // With learn_counts: build (and write) the index of a local shard that has
  // none, reading the shard once; false only reads existing indexes.
  // Default: true.
  bool build_indexes = true;
  // Threads that build missing indexes (joined before returning). Default: 4.
  int threads = 4;
  // Where built indexes are written and looked for after the sidecars
  // (LoaderOptions::index_dir). Default: "" (beside the shards).
  std::string index_dir;
  // Counts the rows of Parquet files (LoaderOptions::parquet). Default: null
  // (a Parquet input's count stays unknown).
  const ParquetReaders* parquet = nullptr;
};

// IsManifestUrl and IsShardUrl (which input is which) are in url.h.

// On success returns the shards of `inputs`, in order. On failure returns
// kConfig for no inputs, an empty input or a shard named twice; NotFound for
// an input that does not exist or a directory without shards; a manifest's
// parse errors; or the error of reading a local shard whose index it builds.
SHARDSTREAM_EXPORT Result<Manifest> ResolveDataset(const std::vector<std::string>& inputs,
                                                   const ResolveOptions& options = {});

}  // namespace shardstream

#endif  // SHARDSTREAM_DATASET_INPUTS_H_
