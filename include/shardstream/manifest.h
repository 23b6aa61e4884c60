// Manifest: the list of a data set's shards with their size, sample count and
// checksum. Read from JSON Lines (what ShardWriter writes), CSV with a header,
// or a JSON document {"shards": [...]}; relative urls resolve against the
// manifest's own location.
//
// Thread-safety: Manifest is a value; the functions are reentrant.
#ifndef SHARDSTREAM_MANIFEST_H_
#define SHARDSTREAM_MANIFEST_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardstream/export.h"
#include "shardstream/result.h"
#include "shardstream/source.h"

namespace shardstream {

struct ShardEntry {
  std::string url;        // as written in the manifest (may be relative)
  std::string resolved;   // url resolved against the manifest's directory
  int64_t size = -1;      // bytes; -1 when unknown
  int64_t nsamples = -1;  // samples; -1 when unknown
  std::string checksum;   // "algorithm:hex" or empty
  // Any other fields, kept verbatim as JSON text, written back unchanged.
  std::map<std::string, std::string> extra;
};

struct Manifest {
  std::string url;  // where it was read from; empty when built in memory
  std::vector<ShardEntry> shards;

  // Sum of nsamples; -1 if any shard's count is unknown.
  int64_t TotalSamples() const;
  // A stable fingerprint of (url, size, nsamples, checksum) of every shard,
  // used to refuse a resume state from another data set.
  std::string Fingerprint() const;
};

// Parses manifest text. `url` names it in errors and is the base for relative
// urls. Format from the name's extension (.jsonl, .csv, .json) or content.
// On failure returns kConfig with the line number and what is wrong.
SHARDSTREAM_EXPORT Result<Manifest> ParseManifest(std::string_view text, const std::string& url);

// Reads and parses a manifest through `source` (DefaultSource() by default).
SHARDSTREAM_EXPORT Result<Manifest> ReadManifest(const std::string& url,
                                                 Source* source = nullptr);

// JSON Lines, one shard per line, keys in a fixed order: url, size, nsamples,
// checksum, then extras sorted. Deterministic bytes.
SHARDSTREAM_EXPORT std::string FormatManifestJsonl(const Manifest& manifest);

// Writes FormatManifestJsonl atomically (temporary, fsync, rename).
SHARDSTREAM_EXPORT Status WriteManifest(const Manifest& manifest, const std::string& url,
                                        Source* source = nullptr);

}  // namespace shardstream

#endif  // SHARDSTREAM_MANIFEST_H_
