// Field decoding: turns the bytes of one sample field into a typed value
// without copying them. What a field becomes is chosen by its FieldSpec, or,
// with FieldDecode::kAuto, by the last extension of the field name, as
// WebDataset does:
//   .npy            tensor; dtype and shape from the header (versions 1, 2, 3;
//                   little-endian types; fortran_order arrays are refused)
//   .cls .cls2 .index  int64 label parsed from decimal text
//   .txt .text      string (UTF-8 checked) -- kBytes keeps raw bytes
//   .json           JSON text (UTF-8, checked to parse); Python gives the
//                   parsed object, as WebDataset's .decode() -- kString keeps
//                   the text
//   anything else   bytes
// kRaw reads headerless little-endian elements of a declared dtype and shape
// (one dimension may be -1: inferred from the byte count). kImage decodes
// JPEG/PNG/WebP to uint8 RGB per FieldSpec::image (image.h); the loader does
// that in its reader threads.
//
// Bad input gives kCorrupt naming the sample key, the field, the shard url
// and the byte offset in the shard.
//
// Thread-safety: plain functions on values.
#ifndef SHARDSTREAM_DECODE_H_
#define SHARDSTREAM_DECODE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardstream/dtype.h"
#include "shardstream/export.h"
#include "shardstream/image_spec.h"
#include "shardstream/result.h"

namespace shardstream {

enum class FieldDecode {
  kAuto,    // by extension (see above)
  kNpy,     // NumPy .npy
  kRaw,     // headerless elements of FieldSpec::dtype, FieldSpec::shape
  kBytes,   // the bytes as they are
  kString,  // the bytes, checked to be UTF-8
  kJson,    // UTF-8 JSON text, checked to parse (Python gives the parsed object)
  kLabel,   // decimal integer text -> int64 scalar
  kImage,   // JPEG, PNG or WebP -> uint8 RGB per FieldSpec::image (image.h)
};

// A field whose shape varies from sample to sample.
enum class Ragged {
  kError,  // stacked: a sample of another shape is an error
  // Each row's elements as bytes (TensorView::bytes), with its shape in a
  // companion int64 tensor "<output>.shape" [B, ndim]; Python gives a list
  // of tensors.
  kList,
  // As kList in C++; Python pads the rows to the batch's largest shape with
  // zeros and adds "<output>.lengths" (the shape column).
  kPad,
};

// One field a batch takes from each sample.
struct FieldSpec {
  // Field name in the sample: "tokens.npy", "cls", "jpg". Matched exactly
  // (case-sensitive). Alternatives separated by ';' take the first the
  // sample has, as in WebDataset: "jpg;png;webp" for images stored in
  // several formats (under kAuto they must decode alike). Required.
  std::string name;
  // Name of the batch tensor. Default: empty, meaning `name` (its first
  // alternative).
  std::string output;
  // How to decode. Default: kAuto.
  FieldDecode decode = FieldDecode::kAuto;
  // kRaw: element type. Default: uint8.
  DType dtype = DType::kUint8;
  // kRaw: per-sample shape; one entry may be -1 (inferred). kNpy: the
  // expected shape (checked), or empty to take it from the data. Default: {-1}
  // for kRaw (a 1-D array), empty for kNpy.
  std::vector<int64_t> shape;
  // kRaw: one element per sample, batched as [B] (a 0-d value); `shape` is
  // then ignored. Default: false.
  bool scalar = false;
  // A sample without this field: an error (false), or an empty/zero value
  // (true). Default: false.
  bool optional = false;
  // kImage: size, crop, flip, layout, pixel limit. An image without a size
  // is ragged (kList unless `ragged` says kPad).
  ImageSpec image;
  // Variable shapes. Default: kError (kList for images without a size).
  Ragged ragged = Ragged::kError;

  // `output`, or the name (the first of alternatives).
  std::string output_name() const {
    return output.empty() ? name.substr(0, name.find(';')) : output;
  }
};

// Where a field came from, for error messages.
struct FieldContext {
  std::string_view key;    // sample key
  std::string_view field;  // field name
  std::string_view url;    // shard url, credentials redacted
  uint64_t offset = 0;     // offset of the field's bytes in the shard
};

// A decoded field. For tensors, `data` holds the elements (little-endian,
// C order) and is a view into the input bytes, except for labels, whose
// value is in `label` (use bytes()).
struct DecodedField {
  bool is_tensor = false;  // false: a byte string (bytes or string)
  bool is_string = false;  // bytes that were checked to be UTF-8
  bool is_json = false;    // ... and to be one JSON value
  DType dtype = DType::kUint8;
  int ndim = 0;            // per-sample dimensions (0: scalar)
  int64_t shape[kMaxDims] = {};
  std::string_view data;
  int64_t label = 0;
  bool is_label = false;

  // The element (or string) bytes.
  std::string_view bytes() const {
    return is_label ? std::string_view(reinterpret_cast<const char*>(&label), sizeof(label))
                    : data;
  }
  int64_t elements() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
};

// The decoding FieldDecode::kAuto picks for a field name.
SHARDSTREAM_EXPORT FieldDecode DecodeForName(std::string_view field_name);

// A raw spec's shape as decoding reads it: at most kMaxDims dimensions, none
// negative but one -1 (the length the bytes give), and a product that fits
// 64 bits; kConfig naming the field otherwise. (A scalar has no shape.) The
// loader checks every field its options decode raw with it when created.
SHARDSTREAM_EXPORT Status CheckRawShape(const FieldSpec& spec);

// Decodes `bytes` per `spec`. The result views `bytes` (keep them alive).
// On failure returns kCorrupt (or kConfig for an unusable spec) with `ctx`.
SHARDSTREAM_EXPORT Result<DecodedField> DecodeField(std::string_view bytes, const FieldSpec& spec,
                                                    const FieldContext& ctx);

// Parses a .npy file. On failure returns kCorrupt naming ctx and the offset
// of the bad byte.
SHARDSTREAM_EXPORT Result<DecodedField> DecodeNpy(std::string_view bytes, const FieldContext& ctx);

// Parses only the header of a .npy field of `field_bytes` bytes, given its
// first bytes `head` (the header must lie within them): dtype and shape,
// checked against field_bytes, with empty data; *payload is where the
// values start. Errors as DecodeNpy.
SHARDSTREAM_EXPORT Result<DecodedField> DecodeNpyHeader(std::string_view head, uint64_t field_bytes,
                                                        const FieldContext& ctx, size_t* payload);

// Writes a version-1 .npy file (for tests, tools and examples).
SHARDSTREAM_EXPORT std::string EncodeNpy(DType dtype, const std::vector<int64_t>& shape,
                                         std::string_view data);

}  // namespace shardstream

#endif  // SHARDSTREAM_DECODE_H_
