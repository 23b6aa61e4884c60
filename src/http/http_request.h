// Plain request/response values shared by the HTTP client, the S3 client and
// the signer. No curl types here.
#ifndef SHARDSTREAM_HTTP_HTTP_REQUEST_H_
#define SHARDSTREAM_HTTP_HTTP_REQUEST_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardstream/export.h"
#include "shardstream/status.h"

namespace shardstream::internal {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct SHARDSTREAM_EXPORT HttpRequest {
  std::string method = "GET";  // GET, HEAD, PUT, POST, DELETE
  std::string url;
  HeaderList headers;
  // The body: `body`, or when body_file is set, body_size bytes of that file
  // from body_file_offset (large uploads never sit in memory).
  std::string body;
  std::string body_file;
  uint64_t body_file_offset = 0;
  uint64_t body_size = 0;

  uint64_t BodySize() const { return body_file.empty() ? body.size() : body_size; }
  // Replaces (case-insensitively) or adds a header.
  void SetHeader(std::string_view name, std::string value);
  void RemoveHeader(std::string_view name);
};

struct SHARDSTREAM_EXPORT HttpResponse {
  long status = 0;
  HeaderList headers;  // names lower-cased, in arrival order
  std::string body;
  // The value of the last header with that (lower-case) name, or "".
  std::string Header(std::string_view lower_name) const;
};

// Called before every attempt (so a retry gets a fresh date and signature).
using RequestSigner = std::function<Status(HttpRequest&)>;

// The Status for a final HTTP status >= 400 of `method url` (redacted inside):
// 401/403 -> kAuth, 404 -> kNotFound, 408/429/5xx -> kUnavailable,
// other -> kIo. `detail` (e.g. an S3 error code) is appended when non-empty.
SHARDSTREAM_EXPORT Status HttpStatusError(long status, std::string_view method, std::string_view url,
                       std::string_view detail = {}, int64_t offset = -1);
// True for statuses worth retrying: 408, 429, 5xx.
bool RetryableHttpStatus(long status);

// Seconds since the epoch of an HTTP date (Last-Modified), or -1.
int64_t ParseHttpDate(const std::string& date);

// A header's decimal number (Content-Length, Retry-After, Content-Range
// parts): digits only, else nullopt.
inline std::optional<uint64_t> ParseUint(std::string_view s) {
  if (s.empty()) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_HTTP_HTTP_REQUEST_H_
