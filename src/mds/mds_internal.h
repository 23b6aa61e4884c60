// What an MDS column encoding string means (the rules live in mds_index.cc).
#ifndef SHARDSTREAM_MDS_MDS_INTERNAL_H_
#define SHARDSTREAM_MDS_MDS_INTERNAL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "shardstream/dtype.h"
#include "shardstream/result.h"

namespace shardstream::internal {

struct MdsEncoding {
  enum Kind { kScalar, kArray, kStr, kStrInt, kStrFloat, kBytes, kJson, kJpeg, kPng, kPil, kPickle };
  Kind kind = kBytes;
  DType dtype = DType::kUint8;   // kScalar; kArray with fixed_dtype
  bool fixed_dtype = false;      // kArray: "ndarray:DTYPE..."
  bool fixed_shape = false;      // kArray: "ndarray:DTYPE:D1,D2,..."
  std::vector<int64_t> shape;
};

// kConfig for an encoding Streaming does not define.
Result<MdsEncoding> ParseMdsEncoding(const std::string& encoding);

// Bytes every value of the encoding takes, or -1 when they vary.
inline int64_t MdsFixedSize(const MdsEncoding& e) {
  if (e.kind == MdsEncoding::kScalar) return static_cast<int64_t>(DTypeSize(e.dtype));
  if (e.kind == MdsEncoding::kArray && e.fixed_dtype && e.fixed_shape) {
    int64_t n = static_cast<int64_t>(DTypeSize(e.dtype));
    for (int64_t d : e.shape) n *= d;  // ParseMdsEncoding bounds the product
    return n;
  }
  return -1;
}

// Streaming's NDArray dtype code (the byte a dynamic-dtype value starts with).
bool MdsArrayDType(int code, DType* out);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_MDS_MDS_INTERNAL_H_
