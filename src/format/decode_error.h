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

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_FORMAT_DECODE_ERROR_H_
