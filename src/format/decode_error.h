// The one way decoders report bad bytes: kCorrupt naming the sample key,
// field, shard and byte offset.
#ifndef SHARDSTREAM_FORMAT_DECODE_ERROR_H_
#define SHARDSTREAM_FORMAT_DECODE_ERROR_H_

#include <string>
#include <string_view>

#include "shardstream/decode.h"

namespace shardstream::internal {

inline Status FieldError(const FieldContext& ctx, uint64_t at, std::string_view what) {
  std::string msg = "sample '" + std::string(ctx.key) + "' field '" + std::string(ctx.field) +
                    "' in " + std::string(ctx.url) + " at offset " +
                    std::to_string(ctx.offset + at) + ": " + std::string(what);
  return Status(StatusCode::kCorrupt, std::move(msg), std::string(ctx.url),
                static_cast<int64_t>(ctx.offset + at));
}

// Offset of the first byte of `s` that is not valid UTF-8 (overlong forms,
// surrogates and values past U+10FFFF included), or npos.
size_t FindInvalidUtf8(std::string_view s);

// For a required field named by one image extension that a sample lacks:
// how to name images stored in several formats ("" for other names).
inline std::string ImageAlternativesHint(std::string_view name) {
  if (name.find(';') != std::string_view::npos) return "";
  const size_t dot = name.rfind('.');
  const std::string_view ext = dot == std::string_view::npos ? name : name.substr(dot + 1);
  for (const char* e : {"jpg", "jpeg", "png", "webp"}) {
    if (ext != e) continue;
    const std::string base(name.substr(0, name.size() - ext.size()));
    return "; for images stored in several formats name them all, as \"" + base + "jpg;" + base +
           "jpeg;" + base + "png;" + base + "webp\" (the first the sample has is read)";
  }
  return "";
}

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_FORMAT_DECODE_ERROR_H_
