// The resumable streaming GET of HttpClient::OpenStream. `pos` counts the
// bytes handed to the reader; after an interruption the stream reconnects with
// Range from pos and If-Match on the first response's ETag, drops the prefix
// a server that ignores Range sends again, and fails (never splices) when the
// object changed after bytes were handed out. See docs/sources.md.
// Thread-safety: one thread at a time, except the cancel flag.
#ifndef SHARDSTREAM_HTTP_HTTP_STREAM_H_
#define SHARDSTREAM_HTTP_HTTP_STREAM_H_

#include <memory>

#include "http/http_client.h"

namespace shardstream::internal {

// Sends the first GET before returning (so 404/403 fail here). Fills *info,
// when given, from the first answer.
Result<std::unique_ptr<InputStream>> OpenHttpStream(std::shared_ptr<HttpClient::Shared> client,
                                                    StreamRequest request,
                                                    StreamInfo* info = nullptr);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_HTTP_HTTP_STREAM_H_
