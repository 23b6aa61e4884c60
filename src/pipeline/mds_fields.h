// What the loader's fields mean on MDS shards: a field named after a column
// and left to FieldDecode::kAuto decodes as the column's encoding says
// (MdsFieldSpec); with no fields named, the columns are the fields.
#ifndef SHARDSTREAM_PIPELINE_MDS_FIELDS_H_
#define SHARDSTREAM_PIPELINE_MDS_FIELDS_H_

#include <vector>

#include "manifest/shard_table.h"
#include "shardstream/loader.h"
#include "shardstream/mds.h"

namespace shardstream::internal {

// The columns of the MDS shards among `shards` (none for tar). kConfig for a
// column name with two encodings (two MDS sets mixed or listed together).
Result<std::vector<MdsColumn>> MdsColumnsOf(const ShardTable& shards);

// Rewrites opt->fields (kAuto entries naming a column) and, for a token
// field that is a column, opt->tokens.input_dtype and *token_decode (kRaw or
// kNpy; kAuto when the token field is no column). kConfig for a pickled
// column, or a token column that holds no integer array.
Status ResolveMdsFields(const std::vector<MdsColumn>& columns, LoaderOptions* opt,
                        FieldDecode* token_decode);

// The fields of a data set with none named: every column but pickled ones
// (a warning names them).
std::vector<FieldSpec> MdsDefaultFields(const std::vector<MdsColumn>& columns);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_MDS_FIELDS_H_
