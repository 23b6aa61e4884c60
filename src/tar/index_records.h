// Walking a sample index's records without building a SampleIndex. The
// loader's direct reads keep a few numbers of one field per sample; a whole
// SampleIndex (a vector entry and a string per field) cost them more per
// document than the rest of opening the shard.
#ifndef SHARDSTREAM_TAR_INDEX_RECORDS_H_
#define SHARDSTREAM_TAR_INDEX_RECORDS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "shardstream/dtype.h"
#include "shardstream/export.h"
#include "shardstream/status.h"

namespace shardstream::internal {

struct IndexHeader {
  uint32_t version = 0;
  bool compressed = false;
  uint64_t shard_size = 0;
  uint64_t samples = 0;
};

// Views into the walked data: valid during the call only.
struct IndexSampleRecord {
  uint64_t offset = 0, length = 0;
  uint32_t nfields = 0;
  std::string_view key;
};

struct IndexFieldRecord {
  std::string_view name;
  uint64_t offset = 0, size = 0;
  int32_t ndim = -1;
  DType dtype = DType::kUint8;
  uint64_t payload = 0, count = 0, header_hash = 0;
};

class IndexSink {
 public:
  virtual ~IndexSink() = default;
  // Before any record; an error ends the walk with it.
  virtual Status Header(const IndexHeader& h) = 0;
  // Sample i, then its fields (version 2). Returning false ends the walk
  // there, successfully (the file's checksum was already verified).
  virtual bool Sample(uint64_t i, const IndexSampleRecord& s) = 0;
  virtual void Field(uint64_t i, uint32_t j, const IndexFieldRecord& f) = 0;
};

// Verifies the checksum of `data` (the index file at `url`), then hands
// each record to `sink` once it has passed the checks on its place (kCorrupt
// naming the redacted url and byte offset otherwise).
SHARDSTREAM_EXPORT Status WalkSampleIndex(std::string_view data, const std::string& url,
                                          IndexSink* sink);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_TAR_INDEX_RECORDS_H_
