// HttpOptions: the settings of http(s) transfers (timeouts, retries and
// backoff, TLS, redirects, mirrors, buffering), as a value header: the
// HTTP client below the sources (src/http/) takes them without knowing
// HttpSource (http_source.h).
#ifndef SHARDSTREAM_HTTP_OPTIONS_H_
#define SHARDSTREAM_HTTP_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace shardstream {

struct HttpOptions {
  // Time allowed to open a TCP (and TLS) connection, in seconds. Default: 10.
  double connect_timeout_s = 10;
  // A transfer that receives fewer than low_speed_bytes per second for
  // low_speed_time_s seconds is aborted and retried (a stalled server).
  // Default: 1 byte/s over 30 s.
  long low_speed_bytes = 1;
  long low_speed_time_s = 30;
  // Retries after a failed attempt (connection error, reset, timeout, 5xx,
  // 429). A transfer that made progress since its last failure starts
  // counting again. Default: 8.
  int max_retries = 8;
  // Retry n (0-based) sleeps a uniformly random time in
  // [0, min(max_backoff_s, initial_backoff_s * 2^n)] ("full jitter"), or the
  // server's Retry-After when it sends one (capped by max_retry_after_s).
  // Default: 0.1 s, 10 s, 60 s.
  double initial_backoff_s = 0.1;
  double max_backoff_s = 10;
  double max_retry_after_s = 60;
  // Verify the server's TLS certificate and host name. Default: true.
  bool verify_tls = true;
  // A PEM file of trusted CA certificates; empty uses the system store (the
  // distribution's bundle where libcurl's compiled-in one is missing, as for
  // the wheels on RHEL). Default: "" (also settable with SHARDSTREAM_CA_BUNDLE).
  std::string ca_bundle;
  // Redirects followed (only to http and https urls). Default: 5.
  int max_redirects = 5;
  // Largest body accepted in one transfer; a longer body is an error
  // (kCorrupt). 0 means no cap. Default: 0.
  uint64_t max_transfer_bytes = 0;
  // Mirrors: {prefix, {alternative prefixes...}}. A url starting with prefix
  // that stays unavailable after the retries is tried with the prefix
  // replaced by each alternative in turn. Default: none.
  std::vector<std::pair<std::string, std::vector<std::string>>> mirrors;
  // Bytes a stream buffers ahead of its reader before receiving pauses.
  // Default: 1 MiB.
  size_t stream_buffer_bytes = size_t{1} << 20;
  // Body size above which NewWritableFile spools to a temporary file rather
  // than memory before the PUT. Default: 8 MiB.
  size_t put_memory_bytes = size_t{8} << 20;
  // Sent as User-Agent. Default: "shardstream/<version>".
  std::string user_agent;
};

}  // namespace shardstream

#endif  // SHARDSTREAM_HTTP_OPTIONS_H_
