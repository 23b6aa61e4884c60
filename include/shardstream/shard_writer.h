// ShardWriter: samples in, WebDataset tar shards out, plus the data set's
// manifest. Shards roll over by size and/or sample count, are named by a
// printf-style pattern and may be zstd-compressed.
//
// The bytes are deterministic: fields are written sorted by name, with fixed
// mtime, uid/gid 0, mode 0644 and no user or group names, so the same samples
// always give the same shards and the same checksums. Each shard is written
// under a temporary name, synced and renamed into place: a reader never sees
// half a shard. Member names longer than 100 bytes and sizes past 8 GiB use
// pax records.
//
// Thread-safety: one thread at a time.
#ifndef SHARDSTREAM_SHARD_WRITER_H_
#define SHARDSTREAM_SHARD_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "shardstream/export.h"
#include "shardstream/manifest.h"
#include "shardstream/result.h"
#include "shardstream/sample.h"
#include "shardstream/source.h"
#include "shardstream/tar_reader.h"

namespace shardstream {

struct ShardWriterOptions {
  // Shard names: one integer conversion (%d, %06d, ...) for the shard's
  // number, from 0. Default: "shard-%06d.tar", or "shard-%06d.tar.zst" when
  // compressed.
  std::string pattern;
  // A shard is closed before a sample would take its tar bytes (before
  // compression) past this; a single larger sample gets a shard of its own.
  // Default: 512 MiB.
  uint64_t max_bytes = uint64_t{512} << 20;
  // Most samples per shard; 0 means no limit. Default: 0.
  uint64_t max_samples = 0;
  // kNone or kZstd. Default: kNone.
  ShardCompression compression = ShardCompression::kNone;
  // zstd level. Default: 3.
  int zstd_level = 3;
  // The mtime stored in every header (seconds). Default: 0.
  uint64_t mtime = 0;
  // The manifest's file name in the output directory; empty for none.
  // Default: "manifest.jsonl".
  std::string manifest_name = "manifest.jsonl";
  // Also write "<shard>.idx" sample indexes (uncompressed shards). Default: false.
  bool write_index = false;
  // Where files are written. Default: DefaultSource().
  Source* source = nullptr;
  // An out_dir that already holds shards of this pattern (any number), their
  // sample indexes (.idx) or a file of manifest_name is refused (kConfig): a
  // read of the folder would take the old shards beside the new ones. With
  // overwrite they are removed first (the manifest before the shards).
  // Shards of other patterns (other writers of the folder) are left alone;
  // a folder read refuses those its manifest.jsonl does not list.
  // Default: false.
  bool overwrite = false;
};

class SHARDSTREAM_EXPORT ShardWriter {
 public:
  // Creates out_dir if needed. On failure returns kConfig for a bad pattern
  // or compression, or for old data in out_dir without `overwrite`, or the
  // Source's error.
  static Result<std::unique_ptr<ShardWriter>> Create(const std::string& out_dir,
                                                     const ShardWriterOptions& options = {});
  // Aborts the shard in progress if Close was not called: no partial shard
  // and no manifest appear.
  virtual ~ShardWriter();

  // Appends a sample: member "<key>.<field name>" per field. On failure
  // returns kConfig for a key or field name that a reader would split
  // differently or reject (empty, absolute, "..", a dot in the key's
  // basename, a '/' in a field name, duplicate fields), or an I/O error;
  // after an I/O error the writer is unusable. A document group (a sample
  // with doc_offsets.npy, docs/shards.md) is checked as readers check it
  // (kConfig when broken) and counted as its documents: the manifest's
  // nsamples and the index list each document, as readers give them.
  virtual Status Write(const Sample& sample) = 0;
  // Finishes the last shard, syncs the directory and writes the manifest.
  virtual Status Close() = 0;
  // The shards finished so far (url relative to out_dir).
  virtual const Manifest& manifest() const = 0;
};

// Formats a shard name pattern. On failure returns kConfig unless the
// pattern holds exactly one %d-style conversion ("%%" for a percent sign).
SHARDSTREAM_EXPORT Result<std::string> FormatShardName(const std::string& pattern, int64_t n);

}  // namespace shardstream

#endif  // SHARDSTREAM_SHARD_WRITER_H_
