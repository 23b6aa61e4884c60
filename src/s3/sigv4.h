// AWS Signature Version 4 for S3 requests, byte-identical to botocore's
// S3SigV4Auth (tests/sigv4_test.cc replays golden cases it produced). We sign
// ourselves rather than use CURLOPT_AWS_SIGV4: libcurl 7.88 sends no
// x-amz-content-sha256 and does not canonicalise query strings.
//
// Thread-safety: pure functions.
#ifndef SHARDSTREAM_S3_SIGV4_H_
#define SHARDSTREAM_S3_SIGV4_H_

#include <chrono>
#include <string>
#include <string_view>

#include "http/http_request.h"
#include "shardstream/aws_credentials.h"
#include "shardstream/export.h"

namespace shardstream::internal {

using AwsCredentials = ::shardstream::AwsCredentials;

struct SigV4Trace {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;
};

inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";
inline constexpr std::string_view kEmptySha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// Signs `request` in place as botocore does: sets X-Amz-Date (amz_date,
// "YYYYMMDDTHHMMSSZ"), X-Amz-Security-Token (with a session token),
// X-Amz-Content-SHA256 (payload_hash: hex SHA-256 of the body, or
// UNSIGNED-PAYLOAD) and Authorization, replacing earlier values. Every other
// header is signed, except hop-by-hop ones and User-Agent. The url must
// already be percent-encoded (see S3UriEncode). Returns the intermediate
// strings for tests.
SHARDSTREAM_EXPORT SigV4Trace SignV4(HttpRequest& request, const AwsCredentials& credentials,
                                     std::string_view region, std::string_view service,
                                     std::string_view amz_date, std::string_view payload_hash);

// "YYYYMMDDTHHMMSSZ" for a UTC time.
SHARDSTREAM_EXPORT std::string AmzDate(std::chrono::system_clock::time_point t);

SHARDSTREAM_EXPORT std::string Sha256Hex(std::string_view data);
// SHA-256 of `size` bytes of a file from `offset`, hex; empty on error.
SHARDSTREAM_EXPORT std::string Sha256HexOfFile(const std::string& path, uint64_t offset,
                                               uint64_t size);

// Percent-encodes every byte but A-Z a-z 0-9 - _ . ~ (and '/' unless
// encode_slash), as botocore quotes S3 keys and query values.
SHARDSTREAM_EXPORT std::string S3UriEncode(std::string_view s, bool encode_slash);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_S3_SIGV4_H_
