// What the loader's fields mean on JSON Lines rows: a field named after a
// column and left to FieldDecode::kAuto decodes as the column's value in
// the data set's first row says (RowFieldSpec); a token field that is a
// text column needs a tokenizer.
#ifndef SHARDSTREAM_PIPELINE_ROW_FIELDS_H_
#define SHARDSTREAM_PIPELINE_ROW_FIELDS_H_

#include <vector>

#include "manifest/shard_table.h"
#include "shardstream/loader.h"
#include "shardstream/rows.h"

namespace shardstream::internal {

// The columns of the first row of the first JSON Lines file among the
// shards that holds one (none when there is no such file), read through
// the options' cache or source.
Result<std::vector<RowColumn>> RowColumnsOf(const LoaderOptions& options, const ShardTable& manifest);

// Rewrites opt->fields (kAuto entries naming a column). kConfig for a token
// field that is a column of anything but text, or of text without
// tokens.tokenize.
Status ResolveRowFields(const std::vector<RowColumn>& columns, LoaderOptions* opt);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_ROW_FIELDS_H_
