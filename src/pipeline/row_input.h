// RowInput: one input sample as the batchers see it (its id, key, shard and
// the fields the caller found), by view: valid for the call it is passed to.
#ifndef SHARDSTREAM_PIPELINE_ROW_INPUT_H_
#define SHARDSTREAM_PIPELINE_ROW_INPUT_H_

#include <cstdint>
#include <string_view>

#include "shardstream/batch.h"
#include "shardstream/decode.h"

namespace shardstream::internal {

// One field of an input sample, found by the caller; data.data() == nullptr
// when the sample lacks it.
struct FieldRef {
  std::string_view data;
  uint64_t offset = 0;
  bool present = false;
  const DecodedField* decoded = nullptr;  // decoded ahead (images), or null
};

struct RowInput {
  SampleId id;
  std::string_view key;
  std::string_view url;
  uint64_t offset = 0;               // of the sample in the shard
  const FieldRef* fields = nullptr;  // one per FieldSpec, in order
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_ROW_INPUT_H_
