#include <string>

#include <nlohmann/json.hpp>

#include "format/decode_error.h"
#include "shardstream/decode.h"

namespace shardstream {

Status CheckRawShape(const FieldSpec& spec) {
  if (spec.scalar) return Status::OK();
  if (spec.shape.size() > static_cast<size_t>(kMaxDims))
    return Status::Config("field '" + spec.name + "': too many dimensions (at most " +
                          std::to_string(kMaxDims) + ")");
  bool infer = false;
  uint64_t known = 1;
  for (int64_t n : spec.shape) {
    if (n == -1) {
      if (infer) return Status::Config("field '" + spec.name + "': more than one -1 in shape");
      infer = true;
    } else if (n < 0) {
      return Status::Config("field '" + spec.name + "': negative dimension " + std::to_string(n) +
                            " in shape (-1 alone stands for the length the bytes give)");
    } else if (__builtin_mul_overflow(known, static_cast<uint64_t>(n), &known)) {
      return Status::Config("field '" + spec.name + "': declared shape too large");
    }
  }
  return Status::OK();
}

namespace {

using internal::FieldError;
using internal::FindInvalidUtf8;

std::string_view LastExtension(std::string_view name) {
  size_t dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

Result<DecodedField> DecodeLabel(std::string_view b, const FieldContext& ctx) {
  size_t i = 0;
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (i < b.size() && space(b[i])) ++i;
  bool neg = false;
  if (i < b.size() && (b[i] == '-' || b[i] == '+')) neg = b[i++] == '-';
  size_t digits = i;
  uint64_t v = 0;
  while (i < b.size() && b[i] >= '0' && b[i] <= '9') {
    if (v > (uint64_t{1} << 62)) return FieldError(ctx, i, "label out of range");
    v = v * 10 + static_cast<uint64_t>(b[i++] - '0');
  }
  if (i == digits) return FieldError(ctx, i, "label is not a decimal integer");
  while (i < b.size() && space(b[i])) ++i;
  if (i != b.size()) return FieldError(ctx, i, "trailing bytes after the label");
  DecodedField out;
  out.is_tensor = true;
  out.is_label = true;
  out.dtype = DType::kInt64;
  out.ndim = 0;
  out.label = neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  return out;
}

Result<DecodedField> DecodeRaw(std::string_view b, const FieldSpec& spec,
                               const FieldContext& ctx) {
  DecodedField out;
  out.is_tensor = true;
  out.dtype = spec.dtype;
  const size_t elem = DTypeSize(spec.dtype);
  SHARDSTREAM_RETURN_IF_ERROR(CheckRawShape(spec));
  std::vector<int64_t> shape = spec.scalar          ? std::vector<int64_t>{1}
                               : spec.shape.empty() ? std::vector<int64_t>{-1}
                                                    : spec.shape;
  int infer = -1;
  uint64_t known = 1;  // fits: checked above
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      infer = static_cast<int>(i);
    } else {
      known *= static_cast<uint64_t>(shape[i]);
    }
  }
  if (b.size() % elem != 0)
    return FieldError(ctx, b.size() - b.size() % elem,
                      std::to_string(b.size()) + " bytes is not a whole number of " +
                          std::string(DTypeName(spec.dtype)) + " elements");
  const uint64_t n = b.size() / elem;
  if (infer >= 0) {
    if (known == 0 ? n != 0 : n % known != 0)
      return FieldError(ctx, 0, std::to_string(n) + " elements do not fit the declared shape");
    shape[infer] = known == 0 ? 0 : static_cast<int64_t>(n / known);
  } else if (n != known) {
    return FieldError(ctx, 0, "declared shape needs " + std::to_string(known) +
                                  " elements, field has " + std::to_string(n));
  }
  out.ndim = spec.scalar ? 0 : static_cast<int>(shape.size());
  for (int i = 0; i < out.ndim; ++i) out.shape[i] = shape[i];
  out.data = b;
  return out;
}

// ASCII case-insensitive: asked once per field of every sample.
bool IsExtension(std::string_view ext, std::string_view lower) {
  if (ext.size() != lower.size()) return false;
  for (size_t i = 0; i < ext.size(); ++i) {
    char c = ext[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != lower[i]) return false;
  }
  return true;
}

}  // namespace

FieldDecode DecodeForName(std::string_view field_name) {
  // Alternatives ("jpg;png") decode as the first does (Loader checks they agree).
  std::string_view ext = LastExtension(field_name.substr(0, field_name.find(';')));
  if (IsExtension(ext, "npy")) return FieldDecode::kNpy;
  if (IsExtension(ext, "cls") || IsExtension(ext, "cls2") || IsExtension(ext, "index"))
    return FieldDecode::kLabel;
  if (IsExtension(ext, "txt") || IsExtension(ext, "text")) return FieldDecode::kString;
  if (IsExtension(ext, "json")) return FieldDecode::kJson;
  return FieldDecode::kBytes;
}

Result<DecodedField> DecodeField(std::string_view bytes, const FieldSpec& spec,
                                 const FieldContext& ctx) {
  FieldDecode how = spec.decode == FieldDecode::kAuto ? DecodeForName(spec.name) : spec.decode;
  switch (how) {
    case FieldDecode::kNpy: {
      SHARDSTREAM_ASSIGN_OR_RETURN(DecodedField f, DecodeNpy(bytes, ctx));
      if (!spec.shape.empty()) {
        bool same = static_cast<size_t>(f.ndim) == spec.shape.size();
        for (int i = 0; same && i < f.ndim; ++i)
          same = spec.shape[i] == -1 || spec.shape[i] == f.shape[i];
        if (!same) return FieldError(ctx, 0, "array shape differs from the declared shape");
      }
      return f;
    }
    case FieldDecode::kRaw:
      return DecodeRaw(bytes, spec, ctx);
    case FieldDecode::kLabel:
      return DecodeLabel(bytes, ctx);
    case FieldDecode::kString: {
      size_t bad = FindInvalidUtf8(bytes);
      if (bad != std::string_view::npos) return FieldError(ctx, bad, "text is not valid UTF-8");
      DecodedField f;
      f.is_string = true;
      f.data = bytes;
      return f;
    }
    case FieldDecode::kJson: {
      size_t bad = FindInvalidUtf8(bytes);
      if (bad != std::string_view::npos) return FieldError(ctx, bad, "JSON text is not valid UTF-8");
      if (!nlohmann::json::accept(bytes.begin(), bytes.end())) {
        // Parsed again only to say where it stops.
        try {
          nlohmann::json unused = nlohmann::json::parse(bytes.begin(), bytes.end());
          static_cast<void>(unused);
        } catch (const nlohmann::json::parse_error& e) {
          const size_t at = e.byte > 0 ? std::min<size_t>(e.byte - 1, bytes.size()) : 0;
          return FieldError(ctx, at, "not valid JSON (decode \"string\" keeps the text): " +
                                         std::string(e.what()));
        } catch (const nlohmann::json::exception& e) {
          // Not a syntax error: a number beyond a double's range, say.
          return FieldError(ctx, 0, "JSON that cannot be read (decode \"string\" keeps the "
                                    "text): " + std::string(e.what()));
        }
        return FieldError(ctx, 0, "not valid JSON (decode \"string\" keeps the text)");
      }
      DecodedField f;
      f.is_string = true;
      f.is_json = true;
      f.data = bytes;
      return f;
    }
    case FieldDecode::kBytes:
    case FieldDecode::kAuto: {
      DecodedField f;
      f.data = bytes;
      return f;
    }
    case FieldDecode::kImage:
      return Status::Config("field '" + spec.name +
                            "': image fields need a pixel buffer: use DecodeImage (image.h)");
  }
  return Status::Config("unknown field decoding");
}

namespace internal {

size_t FindInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xe0) == 0xc0) { len = 2; cp = c & 0x1f; }
    else if ((c & 0xf0) == 0xe0) { len = 3; cp = c & 0x0f; }
    else if ((c & 0xf8) == 0xf0) { len = 4; cp = c & 0x07; }
    else return i;
    if (i + len > s.size()) return i;
    for (size_t k = 1; k < len; ++k) {
      unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (d & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return i;
    i += len;
  }
  return std::string_view::npos;
}

}  // namespace internal

}  // namespace shardstream
