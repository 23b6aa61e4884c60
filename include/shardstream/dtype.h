// DType: the element types of decoded fields and batch tensors, with NumPy's
// names ("int32") and array-protocol codes ("<i4"). Every multi-byte type is
// little-endian in memory, as on every machine shardstream supports.
//
// Thread-safety: plain functions on values.
#ifndef SHARDSTREAM_DTYPE_H_
#define SHARDSTREAM_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "shardstream/export.h"
#include "shardstream/result.h"

namespace shardstream {

enum class DType : uint8_t {
  kBool, kUint8, kInt8, kUint16, kInt16, kUint32, kInt32, kUint64, kInt64,
  kFloat16, kBFloat16, kFloat32, kFloat64,
};

// Bytes per element. Inline: batching asks it per sample and per field.
constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kBool: case DType::kUint8: case DType::kInt8: return 1;
    case DType::kUint16: case DType::kInt16: case DType::kFloat16: case DType::kBFloat16: return 2;
    case DType::kUint32: case DType::kInt32: case DType::kFloat32: return 4;
    default: return 8;
  }
}
// NumPy name: "int32", "float16", "bfloat16", "bool", ...
SHARDSTREAM_EXPORT std::string_view DTypeName(DType t);
// Array-protocol code: "<i4", "|u1", "|b1", ... (bfloat16: "<V2"; callers
// that export to NumPy must special-case it).
SHARDSTREAM_EXPORT std::string_view DTypeCode(DType t);
// Accepts a NumPy name ("int32", "uint8", "float", "bf16" ...) or a code
// ("<i4", "|u1", "i4"). On failure returns kConfig naming the text.
SHARDSTREAM_EXPORT Result<DType> ParseDType(std::string_view text);
// True for the signed and unsigned integer types.
constexpr bool IsInteger(DType t) {
  return t != DType::kBool && t != DType::kFloat16 && t != DType::kBFloat16 &&
         t != DType::kFloat32 && t != DType::kFloat64;
}

// The largest number of dimensions of a field or tensor (batch dimension
// included).
inline constexpr int kMaxDims = 8;

}  // namespace shardstream

#endif  // SHARDSTREAM_DTYPE_H_
