// TarReader: reads one tar shard (.tar, .tar.gz, .tar.zst; the compression is
// detected from the bytes, not the name) as a sequence of WebDataset samples
// (see sample.h). ustar, pax (long names, large sizes) and GNU long names are
// understood. Directories, symlinks, hard links and devices are never
// followed: they are only counted in TarStats.
//
// Two engines give the same samples (the tests check it on every test
// shard):
//   kFast       our own header parser over large reads (>= 4 MiB chunks);
//               field bytes are views into those chunks. Compressed shards
//               are decompressed by libarchive's gzip/zstd filters first.
//   kLibarchive libarchive's tar reader (only tar formats and the gzip and
//               zstd filters enabled), fed through archive_read_open from our
//               InputStream in large blocks. Field bytes are copied out.
//
// Hostile shards: limits (ReaderLimits) and the checks listed in
// docs/shards.md give Status kCorrupt naming the shard (redacted url), the
// member and the byte offset. What then happens is the caller's ErrorPolicy;
// skips are counted in TarStats and logged, never silent.
//
// Thread-safety: a TarReader is used by one thread at a time. Samples it
// returns may be handed to other threads.
#ifndef SHARDSTREAM_TAR_READER_H_
#define SHARDSTREAM_TAR_READER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "shardstream/export.h"
#include "shardstream/result.h"
#include "shardstream/sample.h"
#include "shardstream/shard_index.h"
#include "shardstream/source.h"

namespace shardstream {

enum class ErrorPolicy {
  kRaise,       // Next() returns the error (default)
  kSkipShard,   // the rest of the shard is dropped; Next() returns false
  kSkipSample,  // the bad sample is dropped and reading goes on where the
                // stream is still in step (a bad name, a duplicate field, an
                // oversized member); otherwise as kSkipShard
};

enum class TarEngine { kFast, kLibarchive };

enum class ShardCompression { kNone, kGzip, kZstd };

struct ReaderLimits {
  // Largest member data accepted. Default: 1 GiB.
  uint64_t max_member_size = uint64_t{1} << 30;
  // Largest pax extended header or GNU long name/link record. Default: 1 MiB.
  uint64_t max_header_size = uint64_t{1} << 20;
  // Longest member path. Default: 4096.
  uint64_t max_path_length = 4096;
  // Most tar entries (of any type) in one shard. Default: 10,000,000.
  uint64_t max_entries = 10'000'000;
};

struct TarReaderOptions {
  ReaderLimits limits;
  ErrorPolicy policy = ErrorPolicy::kRaise;
  TarEngine engine = TarEngine::kFast;
  // Size of each read and of the buffers fields point into; at least 64 KiB.
  // A member larger than half of it gets a buffer of its own. Default:
  // 512 KiB, small enough to stay in the CPU cache between the read and the
  // parse (measured 10-20% faster than 4 MiB on 1 and 8 KiB samples, the
  // same on 1 MiB samples).
  size_t chunk_size = size_t{512} << 10;
  // Source used by the url-taking factories. Default: DefaultSource().
  Source* source = nullptr;
  // OpenAt: where to look for the index after the sidecar (see
  // ReadSampleIndex). Default: "".
  std::string index_dir;
  // Hand out each document of a document group (a sample with a
  // doc_offsets.npy field, docs/shards.md) as a sample of its own; false
  // returns groups as they are stored. Default: true.
  bool document_groups = true;
  // Record each sample in index() as it is read. A caller that never asks
  // for the index (the Loader) turns it off: no allocation per sample.
  bool build_index = true;
};

// What a reader has seen. Skips are counted here and logged.
struct TarStats {
  uint64_t samples = 0;          // samples returned
  uint64_t fields = 0;           // regular members returned as fields
  uint64_t field_bytes = 0;
  uint64_t entries = 0;          // tar entries of every type
  uint64_t directories = 0;
  uint64_t symlinks = 0;
  uint64_t hardlinks = 0;
  uint64_t devices = 0;          // char, block devices and fifos
  uint64_t other_entries = 0;    // other type flags, e.g. sparse or volume labels
  uint64_t unkeyed_members = 0;  // regular files whose name has no key.field form
  uint64_t skipped_samples = 0;
  uint64_t skipped_shards = 0;
  Status last_error;             // the error behind the latest skip
};

class SHARDSTREAM_EXPORT TarReader {
 public:
  // Opens a shard. On failure returns the Source's error (NotFound, Io, ...)
  // or kCorrupt for bytes that are no tar shard (also an empty file).
  static Result<std::unique_ptr<TarReader>> Open(const std::string& url,
                                                 const TarReaderOptions& options = {});
  // Reads from a stream the caller opened; `url` names it in samples and errors.
  static Result<std::unique_ptr<TarReader>> Open(std::unique_ptr<InputStream> stream,
                                                 const TarReaderOptions& options = {});
  // Opens an uncompressed shard at sample `first` (0 <= first <= samples),
  // seeking straight to it. `index` may be null: then the sidecar
  // "<url>.idx" is read. A compressed shard is read from the start and the
  // samples before `first` are skipped. On failure returns kConfig for
  // `first` out of range, the sidecar's error when there is none.
  static Result<std::unique_ptr<TarReader>> OpenAt(const std::string& url, int64_t first,
                                                   const SampleIndex* index = nullptr,
                                                   const TarReaderOptions& options = {});

  virtual ~TarReader();

  // Fills *sample with the next sample (reusing its storage). Returns true on
  // success, false at the end of the shard (or after a skipped shard), and an
  // error under ErrorPolicy::kRaise; after an error every call returns it.
  virtual Result<bool> Next(Sample* sample) = 0;

  virtual const TarStats& stats() const = 0;
  // Samples read so far with their offsets; complete once Next returned false
  // without a skip. Entries start at the sample the reader was opened at.
  // Sample lengths are exact with the fast engine only.
  virtual const SampleIndex& index() const = 0;
  virtual ShardCompression compression() const = 0;
  // The shard's url, credentials redacted.
  virtual const std::string& url() const = 0;
};

// Reads a whole shard (always with the fast engine) and returns its index
// (what `shardstream index` writes). On failure returns the reader's error,
// also under a skip-shard policy.
SHARDSTREAM_EXPORT Result<SampleIndex> BuildSampleIndex(const std::string& url,
                                                        const TarReaderOptions& options = {});

}  // namespace shardstream

#endif  // SHARDSTREAM_TAR_READER_H_
