// Rows: JSON Lines read here (one line, a JSON object, is one sample, and its
// top-level keys are the sample's fields), Parquet by readers the embedding
// gives (ParquetReaders, below). Files may be gzip- or
// zstd-compressed (the bytes say). Blank lines are no rows.
//
// A rows file is a shard of the data set like any other: the plan splits its
// rows exactly across ranks and workers by the sidecar index "<file>.idx"
// (one entry per row: where its line starts and ends), built for local files
// as tar indexes are; an uncompressed file is then opened at a row's byte,
// a compressed one read from its start. Entries carry
// ShardEntry::extra[kRowsFormatKey] = "jsonl".
//
// Field bytes: a string value is its text, unescaped (a view into the read
// buffer unless it held escapes); any other value is its JSON text. Rows are
// keyed "<file name without extension>/<row, 9 digits>".
//
// The decoding a column gets (RowFieldSpec), from its value in the first
// row: string -> kString, integer -> kLabel (int64), anything else (a
// float, true/false, null, an object, an array) -> kJson.
//
// Bad input is kCorrupt naming the file, the line (or, for a reader opened
// at a row, the row) and the byte: a line that is not JSON, not an object,
// holds a key twice, or is longer than the reader's max_member_size.
// Under skip_sample a bad line is skipped and counted (lines delimit
// themselves); under skip_shard the rest of the file is.
//
// Thread-safety: plain functions on values; a reader as TarReader.
#ifndef SHARDSTREAM_ROWS_H_
#define SHARDSTREAM_ROWS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardstream/decode.h"
#include "shardstream/export.h"
#include "shardstream/result.h"
#include "shardstream/shard_index.h"
#include "shardstream/source.h"
#include "shardstream/tar_reader.h"

namespace shardstream {

// The ShardEntry::extra key (and its values) of a rows file.
inline constexpr const char* kRowsFormatKey = "rows";
inline constexpr const char* kRowsJsonl = "jsonl";
inline constexpr const char* kRowsParquet = "parquet";

// True for a ".parquet" name (a query ignored).
SHARDSTREAM_EXPORT bool IsParquetUrl(std::string_view url);

// True for ".jsonl.gz", ".jsonl.zst", ".jsonl.zstd", ".ndjson.gz", ... :
// names only data take. A plain ".jsonl" may also be a manifest
// (IsRowsFile says which).
SHARDSTREAM_EXPORT bool IsCompressedRowsUrl(std::string_view url);

// Whether a ".jsonl"/".ndjson" file whose first non-blank line is
// `first_line` holds rows rather than a manifest: a manifest's lines name a
// shard: a string "url" ending in a shard's extension (or a pipe: command),
// or a "url" beside an integer "nsamples"; "manifest.jsonl" is always one.
SHARDSTREAM_EXPORT bool IsRowsFile(std::string_view url, std::string_view first_line);

// A column's values: a JSON value's kind, or (Parquet) kBinary bytes, or
// kUnsupported: a Parquet type that is not read.
enum class JsonKind : uint8_t {
  kString, kInteger, kFloat, kBool, kNull, kObject, kArray, kBinary, kUnsupported
};

struct RowColumn {
  std::string name;
  JsonKind kind = JsonKind::kString;
  std::string type;  // kUnsupported: the file's type for it ("list<item: string>")
};

// The FieldSpec (decode) a column gets under kAuto, `name` kept.
SHARDSTREAM_EXPORT FieldSpec RowFieldSpec(const RowColumn& column);

// Parquet files are read by readers the embedding gives: the Python package
// gives pyarrow's (the C++ library links no Arrow). Their fields are as a
// JSON Lines row's: a string column's text, an integer's decimal text, a
// float's or bool's JSON text, binary bytes; a null is an absent field. All
// three are called from the loader's threads.
struct ParquetReaders {
  // The file's row count.
  std::function<Result<int64_t>(const std::string& url, Source* source)> count_rows;
  // Its columns.
  std::function<Result<std::vector<RowColumn>>(const std::string& url, Source* source)> columns;
  // A reader of its rows from row `first` on (keys "<file stem>/<row>"),
  // skipping the rest of a damaged file under a skip `policy`.
  std::function<Result<std::unique_ptr<TarReader>>(const std::string& url, Source* source,
                                                    int64_t first, ErrorPolicy policy)>
      open;
  explicit operator bool() const { return count_rows && columns && open; }
};

// Reads a JSON Lines file from `in` starting at row `first` (the rows
// before it are passed over unparsed). `line` is the 1-based line the
// stream starts at (errors name lines from it; 0: unknown, and errors name
// the row). With options.build_index the reader's index() records every
// row's line.
SHARDSTREAM_EXPORT Result<std::unique_ptr<TarReader>> OpenJsonlReader(
    std::unique_ptr<InputStream> in, const TarReaderOptions& options = {}, int64_t first = 0,
    int64_t line = 1);

// The columns of the file's first row: none for a file without rows;
// kCorrupt for a damaged first line.
SHARDSTREAM_EXPORT Result<std::vector<RowColumn>> ReadJsonlColumns(std::unique_ptr<InputStream> in,
                                                                   const TarReaderOptions& options = {});

// Reads the whole file (through options.source) and returns its row index.
SHARDSTREAM_EXPORT Result<SampleIndex> BuildJsonlIndex(const std::string& url,
                                                       const TarReaderOptions& options = {});

}  // namespace shardstream

#endif  // SHARDSTREAM_ROWS_H_
