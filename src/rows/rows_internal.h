// A JSON Lines reader opened at a row's byte (from the file's row index),
// for the lanes: an uncompressed file needs none of the bytes before it.
#ifndef SHARDSTREAM_ROWS_ROWS_INTERNAL_H_
#define SHARDSTREAM_ROWS_ROWS_INTERNAL_H_

#include <memory>

#include "shardstream/rows.h"

namespace shardstream::internal {

// `in` starts at byte `byte` of an uncompressed file, where row `row` begins.
Result<std::unique_ptr<TarReader>> OpenJsonlReaderAt(std::unique_ptr<InputStream> in,
                                                     const TarReaderOptions& options, int64_t row,
                                                     uint64_t byte);

// The TarReader a JSON Lines file is read by: also says the kinds of the
// last row's values (a row's types are known only while it is parsed).
class JsonlRows : public TarReader {
 public:
  virtual const std::vector<RowColumn>& last_columns() const = 0;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_ROWS_ROWS_INTERNAL_H_
