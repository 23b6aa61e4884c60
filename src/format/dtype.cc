#include "shardstream/dtype.h"

#include <string>

namespace shardstream {
namespace {

struct DTypeInfo {
  DType type;
  size_t size;
  const char* name;
  const char* code;
};

constexpr DTypeInfo kInfo[] = {
    {DType::kBool, 1, "bool", "|b1"},         {DType::kUint8, 1, "uint8", "|u1"},
    {DType::kInt8, 1, "int8", "|i1"},         {DType::kUint16, 2, "uint16", "<u2"},
    {DType::kInt16, 2, "int16", "<i2"},       {DType::kUint32, 4, "uint32", "<u4"},
    {DType::kInt32, 4, "int32", "<i4"},       {DType::kUint64, 8, "uint64", "<u8"},
    {DType::kInt64, 8, "int64", "<i8"},       {DType::kFloat16, 2, "float16", "<f2"},
    {DType::kBFloat16, 2, "bfloat16", "<V2"}, {DType::kFloat32, 4, "float32", "<f4"},
    {DType::kFloat64, 8, "float64", "<f8"},
};

const DTypeInfo& Info(DType t) { return kInfo[static_cast<int>(t)]; }

}  // namespace

std::string_view DTypeName(DType t) { return Info(t).name; }
std::string_view DTypeCode(DType t) { return Info(t).code; }

Result<DType> ParseDType(std::string_view text) {
  // The .npy form ('<i4'), once per token document: matched first, without
  // the string compares of the name tables below.
  if (text.size() == 3 && (text[0] == '<' || text[0] == '|' || text[0] == '=')) {
    for (const DTypeInfo& i : kInfo) {
      if (i.code[1] == text[1] && i.code[2] == text[2] && i.type != DType::kBFloat16) return i.type;
    }
  }
  for (const DTypeInfo& i : kInfo) {
    if (text == i.name) return i.type;
  }
  struct Alias { const char* text; DType type; };
  static constexpr Alias kAliases[] = {
      {"float", DType::kFloat32}, {"double", DType::kFloat64}, {"half", DType::kFloat16},
      {"bf16", DType::kBFloat16}, {"int", DType::kInt64},      {"long", DType::kInt64},
      {"byte", DType::kUint8},    {"f2", DType::kFloat16},     {"f4", DType::kFloat32},
      {"f8", DType::kFloat64},
  };
  for (const Alias& a : kAliases) {
    if (text == a.text) return a.type;
  }
  // Array-protocol codes: an optional little-endian/native/none marker, a
  // kind letter and a size. ('>' only for one-byte types, where order is moot.)
  std::string_view code = text;
  char order = 0;
  if (!code.empty() && (code[0] == '<' || code[0] == '|' || code[0] == '=' || code[0] == '>')) {
    order = code[0];
    code.remove_prefix(1);
  }
  if (code.size() == 2) {
    for (const DTypeInfo& i : kInfo) {
      std::string_view c = std::string_view(i.code).substr(1);
      if (code == c && i.type != DType::kBFloat16 && (order != '>' || i.size == 1)) return i.type;
    }
  }
  return Status::Config("unknown or unsupported dtype '" + std::string(text) +
                        "' (little-endian bool, [u]int8..64, float16/32/64, bfloat16)");
}

}  // namespace shardstream
