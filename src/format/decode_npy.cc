// NumPy .npy: "\x93NUMPY", version (1|2|3).minor, a little-endian header
// length (u16 for v1, u32 for v2/v3), then a Python dict literal
//   {'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and a newline, then the raw C-order elements.
// The dict is parsed by hand (it is a tiny, fixed grammar); anything else is
// reported with the offset of the offending byte.
#include <cctype>
#include <cstring>
#include <limits>
#include <string>

#include "format/decode_error.h"
#include "shardstream/decode.h"

namespace shardstream {
namespace {

using internal::FieldError;

class HeaderParser {
 public:
  HeaderParser(std::string_view text, uint64_t base) : s_(text), base_(base) {}
  size_t pos() const { return base_ + i_; }
  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n')) ++i_;
  }
  bool Eat(char c) {
    SkipSpace();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool Peek(char c) {
    SkipSpace();
    return i_ < s_.size() && s_[i_] == c;
  }
  bool String(std::string_view* out) {
    SkipSpace();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) return false;
    char q = s_[i_++];
    size_t start = i_;
    while (i_ < s_.size() && s_[i_] != q) ++i_;
    if (i_ >= s_.size()) return false;
    *out = s_.substr(start, i_ - start);
    ++i_;
    return true;
  }
  bool Word(std::string_view* out) {
    SkipSpace();
    size_t start = i_;
    while (i_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[i_]))) ++i_;
    *out = s_.substr(start, i_ - start);
    return i_ > start;
  }
  bool Int(int64_t* out) {
    SkipSpace();
    size_t start = i_;
    int64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) return false;
      v = v * 10 + (s_[i_++] - '0');
    }
    if (i_ < s_.size() && s_[i_] == 'L') ++i_;  // Python 2 longs
    *out = v;
    return i_ > start;
  }

 private:
  std::string_view s_;
  uint64_t base_;
  size_t i_ = 0;
};

// The header numpy itself writes (np.save, np.lib.format), e.g.
//   {'descr': '<i4', 'fortran_order': False, 'shape': (1234,), }
// matched without the general parser: a token document's header costs as
// much to parse as its tokens cost to copy. Anything else, including every
// malformed header, is left to the general parser (false): this one accepts
// only what that one accepts, with the same result.
bool ParseNumpyHeader(std::string_view h, std::string_view* descr, DecodedField* out) {
  static constexpr char kHead[] = "{'descr': '";
  static constexpr char kMid[] = "', 'fortran_order': False, 'shape': (";
  constexpr size_t kHeadLen = sizeof(kHead) - 1, kMidLen = sizeof(kMid) - 1;
  if (h.size() < kHeadLen + kMidLen + 2 || std::memcmp(h.data(), kHead, kHeadLen) != 0)
    return false;
  size_t q = kHeadLen;
  while (q < h.size() && q < kHeadLen + 8 && h[q] != '\'') ++q;
  if (q + kMidLen >= h.size() || std::memcmp(h.data() + q, kMid, kMidLen) != 0) return false;
  *descr = h.substr(kHeadLen, q - kHeadLen);
  size_t i = q + kMidLen;
  int ndim = 0;
  while (i < h.size() && h[i] != ')') {
    const size_t start = i;
    int64_t v = 0;
    while (i < h.size() && h[i] >= '0' && h[i] <= '9') {
      if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) return false;
      v = v * 10 + (h[i++] - '0');
    }
    if (i == start || ndim == kMaxDims || i >= h.size()) return false;
    out->shape[ndim++] = v;
    if (h[i] == ',') {
      ++i;
      if (i < h.size() && h[i] == ' ') ++i;
    } else if (h[i] != ')') {
      return false;
    }
  }
  if (i >= h.size()) return false;
  ++i;  // ')'
  const std::string_view tail = h.substr(i);
  if (tail.substr(0, 3) != ", }" && tail.substr(0, 1) != "}") return false;
  out->ndim = ndim;
  return true;
}

// The general parser: any dict of the three keys, in any order and spacing.
Status ParseHeader(std::string_view b, size_t header_start, size_t header_len,
                   const FieldContext& ctx, std::string_view* descr_out, DecodedField* out_p) {
  DecodedField& out = *out_p;
  std::string_view& descr = *descr_out;
  HeaderParser p(b.substr(header_start, header_len), header_start);
  bool have_descr = false, have_order = false, have_shape = false;
  if (!p.Eat('{')) return FieldError(ctx, p.pos(), "header is not a dict");
  while (!p.Eat('}')) {
    std::string_view key;
    if (!p.String(&key) || !p.Eat(':')) return FieldError(ctx, p.pos(), "bad header dict key");
    if (key == "descr") {
      if (!p.String(&descr)) return FieldError(ctx, p.pos(), "'descr' is not a string");
      have_descr = true;
    } else if (key == "fortran_order") {
      std::string_view w;
      if (!p.Word(&w) || (w != "False" && w != "True"))
        return FieldError(ctx, p.pos(), "'fortran_order' is not True/False");
      if (w == "True")
        return FieldError(ctx, p.pos(),
                          "fortran_order arrays are not supported; save with "
                          "numpy.ascontiguousarray");
      have_order = true;
    } else if (key == "shape") {
      if (!p.Eat('(')) return FieldError(ctx, p.pos(), "'shape' is not a tuple");
      while (!p.Eat(')')) {
        int64_t d;
        if (!p.Int(&d)) return FieldError(ctx, p.pos(), "bad dimension in 'shape'");
        if (out.ndim == kMaxDims)
          return FieldError(ctx, p.pos(), "more than " + std::to_string(kMaxDims) + " dimensions");
        out.shape[out.ndim++] = d;
        if (!p.Eat(',') && !p.Peek(')')) return FieldError(ctx, p.pos(), "bad 'shape' tuple");
      }
      have_shape = true;
    } else {
      return FieldError(ctx, p.pos(), "unknown header key '" + std::string(key) + "'");
    }
    if (!p.Eat(',') && !p.Peek('}')) return FieldError(ctx, p.pos(), "bad header dict");
  }
  if (!have_descr || !have_order || !have_shape)
    return FieldError(ctx, header_start, "header lacks descr, fortran_order or shape");
  return Status::OK();
}

// Checks the dtype and the data's size against the shape.
Result<DecodedField> Finish(uint64_t field_bytes, size_t header_start, size_t header_len,
                            std::string_view descr, const FieldContext& ctx, DecodedField out) {
  if (descr.size() >= 1 && descr[0] == '>' && descr.size() == 3 && descr[2] != '1')
    return FieldError(ctx, header_start,
                      "big-endian dtype '" + std::string(descr) + "' is not supported");
  auto dt = ParseDType(descr);
  if (!dt.ok())
    return FieldError(ctx, header_start, "unsupported dtype '" + std::string(descr) + "'");
  out.dtype = *dt;
  // Overflow-safe element count.
  uint64_t n = 1;
  for (int i = 0; i < out.ndim; ++i) {
    uint64_t d = static_cast<uint64_t>(out.shape[i]);
    if (d != 0 && n > (uint64_t{1} << 62) / d)
      return FieldError(ctx, header_start, "shape too large");
    n *= d;
  }
  const size_t data_start = header_start + header_len;
  const uint64_t want = n * DTypeSize(out.dtype);
  if (want != field_bytes - data_start)
    return FieldError(ctx, data_start,
                      "shape and dtype " + std::string(DTypeName(out.dtype)) + " need " +
                          std::to_string(want) + " data bytes, field has " +
                          std::to_string(field_bytes - data_start));
  return out;
}

}  // namespace

Result<DecodedField> DecodeNpyHeader(std::string_view b, uint64_t field_bytes,
                                     const FieldContext& ctx, size_t* payload) {
  static const char kMagic[] = "\x93NUMPY";
  if (b.size() < 10 || std::memcmp(b.data(), kMagic, 6) != 0)
    return FieldError(ctx, 0, "not a .npy file (bad magic)");
  const int major = static_cast<unsigned char>(b[6]);
  if (major < 1 || major > 3)
    return FieldError(ctx, 6, "unsupported .npy version " + std::to_string(major));
  size_t header_len, header_start;
  auto u8 = [&](size_t i) { return static_cast<size_t>(static_cast<unsigned char>(b[i])); };
  if (major == 1) {
    header_len = u8(8) | (u8(9) << 8);
    header_start = 10;
  } else {
    if (b.size() < 12) return FieldError(ctx, 8, "truncated .npy header length");
    header_len = u8(8) | (u8(9) << 8) | (u8(10) << 16) | (u8(11) << 24);
    header_start = 12;
  }
  if (header_len > field_bytes - header_start)
    return FieldError(ctx, 8, "header length " + std::to_string(header_len) +
                                  " runs past the field's " + std::to_string(field_bytes) + " bytes");
  if (header_len > b.size() - header_start)
    return FieldError(ctx, 8, "header length " + std::to_string(header_len) + " runs past the " +
                                  std::to_string(b.size()) + " header bytes expected");
  std::string_view descr;
  DecodedField out;
  out.is_tensor = true;
  if (!ParseNumpyHeader(b.substr(header_start, header_len), &descr, &out)) {
    out = DecodedField();
    out.is_tensor = true;
    SHARDSTREAM_RETURN_IF_ERROR(ParseHeader(b, header_start, header_len, ctx, &descr, &out));
  }
  *payload = header_start + header_len;
  return Finish(field_bytes, header_start, header_len, descr, ctx, std::move(out));
}

Result<DecodedField> DecodeNpy(std::string_view b, const FieldContext& ctx) {
  size_t payload = 0;
  SHARDSTREAM_ASSIGN_OR_RETURN(DecodedField out, DecodeNpyHeader(b, b.size(), ctx, &payload));
  out.data = b.substr(payload);
  return out;
}

std::string EncodeNpy(DType dtype, const std::vector<int64_t>& shape, std::string_view data) {
  std::string dict = "{'descr': '" + std::string(DTypeCode(dtype)) +
                     "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) dict += ", ";
  }
  if (shape.size() == 1) dict.pop_back();
  dict += "), }";
  size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  out += dict;
  out.append(data.data(), data.size());
  return out;
}

}  // namespace shardstream
