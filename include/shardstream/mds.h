// MDS: MosaicML Streaming's shard format, read directly (no conversion).
//
// An MDS data set is a directory (local, http(s) or s3) holding index.json
// and shards "shard.NNNNN.mds", or "shard.NNNNN.mds.zstd" when written with
// zstd compression. index.json (version 2) lists every shard with its sample
// count and its columns: name, encoding, fixed size. A shard is
//   [n: u32] [offsets: u32 x (n+1), absolute] [config JSON] [sample 0] ...
// and a sample is the u32 sizes of its variable-size columns, then each
// column's bytes, in column order.
//
// ReadMdsIndex turns index.json into a Manifest whose entries keep each
// shard's layout (FormatMdsLayout) in ShardEntry::extra[kMdsLayoutKey], so
// the plan, cache, shuffle, mixing and resume treat MDS shards as they treat
// tar shards. OpenMdsReader reads a shard's samples through the usual
// TarReader interface: the sample's fields are its columns, by name.
//
// Columns are handed out as (MdsFieldSpec, the decoding a FieldSpec with
// FieldDecode::kAuto gets for that column):
//   int, int8..int64, uint8..uint64, float16..float64   a scalar of that dtype
//   str, str_float, str_decimal    string      str_int   int64 label
//   bytes                          bytes       json      JSON text
//   jpeg, png                      the encoded bytes (decode=kImage decodes)
//   ndarray:DTYPE:SHAPE            tensor of that dtype and shape, zero-copy
//   ndarray, ndarray:DTYPE         tensor (.npy, made from the MDS header)
//   pil                            uint8 [H, W, C] (.npy; modes L, RGB, RGBA)
//   pkl                            refused: pickles run code when read; the
//                                  raw bytes only with decode=kBytes
//
// Bad input is kCorrupt (shard bytes) or kConfig (index.json) naming the
// index or shard url, the sample, the column and the byte offset.
//
// Thread-safety: plain functions on values; a reader as TarReader.
#ifndef SHARDSTREAM_MDS_H_
#define SHARDSTREAM_MDS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardstream/decode.h"
#include "shardstream/export.h"
#include "shardstream/manifest.h"
#include "shardstream/result.h"
#include "shardstream/source.h"
#include "shardstream/tar_reader.h"

namespace shardstream {

struct MdsColumn {
  std::string name;
  std::string encoding;  // "int32", "str", "ndarray:int32", "jpeg", ...
  int64_t size = -1;     // fixed size in bytes; -1 variable
};

struct MdsLayout {
  std::vector<MdsColumn> columns;
  std::string compression;  // "" or "zstd" (a level suffix is dropped)
  int64_t samples = -1;     // what index.json says
  int64_t raw_bytes = -1;   // the uncompressed shard's size; -1 unknown
  std::string name;         // its path relative to index.json (keys are made of it)
};

// The ShardEntry::extra key of an MDS shard's layout.
inline constexpr const char* kMdsLayoutKey = "mds";

// True for a url whose last component is "index.json" (a query ignored).
SHARDSTREAM_EXPORT bool IsMdsIndexUrl(std::string_view url);

// Reads an MDS index.json through `source` (DefaultSource() by default).
// On failure returns the source's error, or kConfig naming the index, the
// shard and the field: not JSON, a version other than 2, a format other than
// "mds", a compression other than zstd, an unknown column encoding, a
// shard's columns that differ from the first shard's.
SHARDSTREAM_EXPORT Result<Manifest> ReadMdsIndex(const std::string& index_url,
                                                 Source* source = nullptr);

// The layout kept in a manifest entry, and back.
SHARDSTREAM_EXPORT std::string FormatMdsLayout(const MdsLayout& layout);
SHARDSTREAM_EXPORT Result<MdsLayout> ParseMdsLayout(std::string_view json, const std::string& url);

// The FieldSpec (decode, dtype, shape) the column gets under kAuto, with
// `name` kept. kConfig for a pkl column.
SHARDSTREAM_EXPORT Result<FieldSpec> MdsFieldSpec(const MdsColumn& column, const std::string& url);

// Reads an MDS shard from `in` (compressed or not: the bytes say), starting
// at sample `first` (the samples before it are passed over unparsed).
// Samples are keyed "<shard name>/<index, 9 digits>" (the name without its
// .mds/.mds.zstd, as index.json gives it). The reader's index() stays empty
// (the offsets table is the index). Errors and policies as TarReader's; kCorrupt for a header that disagrees with `layout`, offsets
// out of order, a shard shorter than its offsets say, sizes that overrun a
// sample.
SHARDSTREAM_EXPORT Result<std::unique_ptr<TarReader>> OpenMdsReader(
    std::unique_ptr<InputStream> in, const MdsLayout& layout,
    const TarReaderOptions& options = {}, int64_t first = 0);

}  // namespace shardstream

#endif  // SHARDSTREAM_MDS_H_
