// HttpClient: requests with retries, and resumable streaming GETs, over the
// curl transfers of curl_transfer.h. Used by HttpSource and the S3 client.
//
// Retry policy (HttpOptions): connection errors, resets, stalls, 408, 429 and
// 5xx are retried with full-jitter exponential backoff or the server's
// Retry-After; anything else is final. Streams resume from the last byte
// handed to the reader with Range + If-Match.
//
// Thread-safety: Send and OpenStream may be called concurrently; the
// connection pool is shared. A stream is used by one thread at a time.
#ifndef SHARDSTREAM_HTTP_HTTP_CLIENT_H_
#define SHARDSTREAM_HTTP_HTTP_CLIENT_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "http/http_request.h"
#include "shardstream/export.h"
#include "shardstream/http_options.h"
#include "shardstream/result.h"
#include "shardstream/source.h"

namespace shardstream::internal {

class CurlConnectionPool;
class StreamPrefetcher;

struct StreamRequest {
  // The url followed by its mirrors, tried in turn.
  std::vector<std::string> urls;
  uint64_t offset = 0;
  std::optional<uint64_t> expected_size;
  HeaderList headers;
  RequestSigner sign;  // may be empty
  std::shared_ptr<const std::atomic<bool>> cancel;  // may be empty
  // Maps a final HTTP error to a Status (S3 parses its XML error body);
  // default HttpStatusError.
  std::function<Status(const HttpResponse&, const std::string& url, int64_t offset)> error;

  // A bounded range: the stream ends at byte `end` (exclusive) of the
  // object, and asks for bytes=offset-(end-1) even at offset 0; a server
  // answering 200 (Range ignored) is then an error. Default: to the end.
  std::optional<uint64_t> end;
  // Pins the object's version from the first request on (a part of a stream
  // whose version is known): If-Match, else If-Unmodified-Since; a changed
  // object is an error, never followed. Default: the first answer's ETag.
  std::string if_match;
  std::string if_unmodified_since;
  // Stall limit for this stream's GETs (TransferOptions::stall_s); 0: the
  // client's low_speed_time_s.
  double stall_s = 0;
};

// What the first answer of a stream said about the object.
struct StreamInfo {
  std::optional<uint64_t> total;  // the object's size
  std::string etag;
  std::string last_modified;
  bool ranges = false;  // the server honours Range (206, or Accept-Ranges: bytes)
};

class SHARDSTREAM_EXPORT HttpClient {
 public:
  explicit HttpClient(HttpOptions options);
  ~HttpClient();

  const HttpOptions& options() const { return shared_->options; }

  // Sends `request` (signing each attempt with `sign` when given), retrying
  // transient failures. Returns the final response for any status that is
  // not retried; kUnavailable once retries are exhausted (the message names
  // the last failure); kCorrupt for a body above max_body bytes.
  Result<HttpResponse> Send(const HttpRequest& request, const RequestSigner& sign = {},
                            uint64_t max_body = uint64_t{64} << 20);

  // A stream of the body from request.offset. Sends the first GET before
  // returning, so a missing object or rejected credentials fail here. A
  // request from byte 0 without a cancel flag continues a Prefetch of the
  // same url.
  Result<std::unique_ptr<InputStream>> OpenStream(StreamRequest request);
  // Starts reading request.urls.front() from byte 0 in the background (see
  // stream_prefetch.h). Never fails.
  void Prefetch(StreamRequest request);

  // The url followed by its mirror urls (HttpOptions::mirrors).
  std::vector<std::string> WithMirrors(const std::string& url) const;

  // What streams share with the client and keep alive after it is gone.
  struct Shared {
    HttpOptions options;
    std::unique_ptr<CurlConnectionPool> pool;
    std::unique_ptr<StreamPrefetcher> prefetcher;
    ~Shared();
  };

 private:
  std::shared_ptr<Shared> shared_;
};

// Sleeps before retry `attempt` (0-based): the response's Retry-After when it
// has one, else full jitter. Returns false early when *cancel turns true.
bool BackoffSleep(const HttpOptions& options, int attempt, const HttpResponse* response,
                  const std::atomic<bool>* cancel = nullptr);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_HTTP_HTTP_CLIENT_H_
