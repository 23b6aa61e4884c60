// Document groups: many short documents in one sample, so that a token
// shard is mostly tokens rather than tar headers and padding (a 200-token
// document alone in a member pays 512 bytes of header and, on average, 256
// of padding). A group is a sample with exactly these fields:
//   "<name>.npy"       a 1-D array of L values: the documents, one after the other
//   "doc_offsets.npy"  a 1-D integer array of n + 1 values: 0, the end of each
//                      document, ..., L (non-decreasing)
//   "doc_keys.txt"     optional: the n documents' keys, one per line
// It is still a plain WebDataset tar (tar -t, webdataset and tarfile list
// it). The tar reader hands out each document as a sample of its own with
// the one field "<name>.npy", key "<group key>#<i>" (or its line of
// doc_keys.txt); sample numbers, the sample index, resume and the plan count
// documents. Format: docs/shards.md.
#ifndef SHARDSTREAM_TAR_DOC_GROUP_H_
#define SHARDSTREAM_TAR_DOC_GROUP_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardstream/decode.h"
#include "shardstream/sample.h"
#include "shardstream/shard_index.h"
#include "shardstream/status.h"

namespace shardstream::internal {

inline constexpr std::string_view kDocOffsetsField = "doc_offsets.npy";
inline constexpr std::string_view kDocKeysField = "doc_keys.txt";

// Whether `s` is meant as a group (it has a doc_offsets.npy field).
bool IsDocGroup(const Sample& s);

// A group checked whole; views into the sample's field bytes.
struct DocGroup {
  const Field* array = nullptr;     // the documents' field
  DecodedField values;              // its values (1-D)
  uint64_t header_bytes = 0;        // its .npy header
  uint64_t header_hash = 0;         // XXH3-64 of that header
  std::vector<uint64_t> bounds;     // n + 1 value offsets
  std::vector<std::string_view> keys;  // n keys, or empty (then "<key>#<i>")
  size_t docs() const { return bounds.empty() ? 0 : bounds.size() - 1; }
};

// Checks the group `s` of shard `url`. On failure returns kCorrupt naming
// the shard, the group's key, the field and the byte offset (from the
// fields' offsets): another field, an array that is not 1-D, offsets that
// are not integers, do not start at 0, decrease or do not end at the
// array's length, keys that are not n non-empty UTF-8 lines.
Status ParseDocGroup(const Sample& s, const std::string& url, DocGroup* g);

// Document i's key.
std::string DocKey(const DocGroup& g, std::string_view group_key, size_t i);

// Appends the group's documents to `index`: one sample each, tiling the
// group's bytes [sample_offset, end_offset) (the first from the group's
// first header, each next one from its values on, the last to the group's
// end), each with one field record flagged kIndexFieldGrouped: the first
// document's from the array's .npy header on (also kIndexFieldGroupStart),
// the others' their values alone. The array's data lies at `array_offset`
// in the tar.
void IndexDocGroup(const DocGroup& g, std::string_view group_key, uint64_t sample_offset,
                   uint64_t end_offset, uint64_t array_offset, SampleIndex* index);

// The group's documents as samples, each field a complete .npy of its
// values (one buffer for the group: one allocation and one copy per group),
// with `offset` the tar offset of its values. Their `index` is left to the
// caller. `docs` is resized to the group's documents.
void ExplodeDocGroup(const DocGroup& g, const Sample& group, std::vector<Sample>* docs);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_TAR_DOC_GROUP_H_
