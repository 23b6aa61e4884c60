// Manifest: the list of a data set's shards with their size, sample count and
// checksum (docs/manifest.md describes every format).
//
// Read from JSON Lines (what ShardWriter writes), CSV with a header, or a JSON
// document {"shards": [...]}. Relative urls resolve against the manifest's own
// location, so a data set folder can be moved or uploaded whole. Without a
// manifest, a brace pattern ("data-{000000..000999}.tar") names the shards;
// their sizes and sample counts are then unknown (SampleCountsKnown() false),
// and a plan over it can only balance shards, not samples.
//
// Thread-safety: Manifest is a value; the functions are reentrant.
#ifndef SHARDSTREAM_MANIFEST_H_
#define SHARDSTREAM_MANIFEST_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "shardstream/export.h"
#include "shardstream/result.h"
#include "shardstream/source.h"

namespace shardstream {

struct ShardEntry {
  std::string url;        // as written in the manifest (may be relative)
  std::string resolved;   // url resolved against the manifest's directory
  int64_t size = -1;      // bytes; -1 when unknown
  int64_t nsamples = -1;  // samples; -1 when unknown (brace patterns only)
  std::string checksum;   // "algorithm:hex" or empty
  // Any other fields, kept verbatim as JSON text, written back unchanged.
  // (CSV extra columns are kept as JSON strings.)
  std::map<std::string, std::string> extra;
};

struct SHARDSTREAM_EXPORT Manifest {
  std::string url;  // where it was read from (or the pattern); empty when built in memory
  std::vector<ShardEntry> shards;

  // Sum of nsamples; -1 if any shard's count is unknown.
  int64_t TotalSamples() const;
  // True when every shard's nsamples is known (always for manifest files;
  // never for brace patterns).
  bool SampleCountsKnown() const { return TotalSamples() >= 0; }
  // What identifies the data set to a resume state: every shard's name (its
  // url's last component) and sample count, in order, as
  // "<hash>;shards=N;samples=M". Not sizes, checksums or where the shards
  // live, so the same shards given as a folder, a manifest or a brace
  // pattern, or copied to another place, are the same data set.
  std::string Fingerprint() const;
  // The fingerprint of earlier releases (url, size, nsamples and checksum);
  // a state saved then is still taken when it matches.
  std::string LegacyFingerprint() const;
};

// The manifest file formats. kAuto picks by extension (.jsonl/.ndjson, .csv,
// .json) and otherwise by content.
enum class ManifestFormat { kAuto, kJsonl, kCsv, kJson };

// Parses manifest text. `url` names it in errors and is the base for relative
// urls. Every entry needs "url" and "nsamples" (non-negative integer); "size"
// (non-negative integer) and "checksum" ("xxh3_128:<hex>") are optional.
// On failure returns kConfig naming the manifest, the line number and what is
// wrong: invalid syntax, a missing or negative field, a duplicate url, bad
// checksum syntax, an unknown checksum algorithm, or no shards at all.
SHARDSTREAM_EXPORT Result<Manifest> ParseManifest(std::string_view text, const std::string& url,
                                                  ManifestFormat format = ManifestFormat::kAuto);

// Reads and parses a manifest through `source` (DefaultSource() by default).
SHARDSTREAM_EXPORT Result<Manifest> ReadManifest(const std::string& url,
                                                 Source* source = nullptr);

// True when `spec` holds a brace group that expands: {a..b} or {x,y,...}.
SHARDSTREAM_EXPORT bool IsBracePattern(std::string_view spec);

// Expands brace groups left to right (the last group varies fastest):
// "{000..010}" counts with zero padding to the wider bound when either bound
// has a leading zero, "{3..1}" counts down, "{a,b,c}" lists alternatives,
// several groups give their product. On failure returns kConfig for an
// unbalanced or malformed group, or more than 10,000,000 names.
SHARDSTREAM_EXPORT Result<std::vector<std::string>> ExpandBraces(std::string_view pattern);

// A manifest for the shards a brace pattern names, with size and nsamples
// unknown (-1). Relative names stay relative to the working directory.
SHARDSTREAM_EXPORT Result<Manifest> ManifestFromPattern(std::string_view pattern);

// A brace pattern (IsBracePattern) or the url of a manifest file.
SHARDSTREAM_EXPORT Result<Manifest> LoadManifest(const std::string& manifest_or_pattern,
                                                 Source* source = nullptr);

// JSON Lines, one shard per line, keys in a fixed order: url, size, nsamples,
// checksum, then extras sorted. Deterministic bytes.
SHARDSTREAM_EXPORT std::string FormatManifestJsonl(const Manifest& manifest);

// Writes FormatManifestJsonl atomically (temporary, fsync, rename).
SHARDSTREAM_EXPORT Status WriteManifest(const Manifest& manifest, const std::string& url,
                                        Source* source = nullptr);

}  // namespace shardstream

#endif  // SHARDSTREAM_MANIFEST_H_
