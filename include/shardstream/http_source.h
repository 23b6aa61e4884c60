// HttpSource: reads (and writes, by PUT) http:// and https:// urls through
// libcurl. Streams are fetched with one GET each, are bounded in memory (at
// most stream_buffer_bytes buffered, whatever the object size), and survive
// interruptions: a transfer that breaks resumes with a Range request from the
// last byte received, pinned to the same object by If-Match on its ETag, so
// the bytes handed to the reader are never repeated or lost. Connection errors,
// 5xx and 429 are retried with exponential backoff and full jitter
// (Retry-After honoured); 401/403 give kAuth, 404 kNotFound, exhausted
// retries kUnavailable. Every url in a message or log line is redacted.
//
// DefaultSource() routes "http" and "https" to an HttpSource with default
// options; build your own with NewHttpSource() to change them.
//
// Thread-safety: an HttpSource may be used from many threads; connections
// are shared and reused between them. Streams and files it returns are used
// by one thread at a time.
#ifndef SHARDSTREAM_HTTP_SOURCE_H_
#define SHARDSTREAM_HTTP_SOURCE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shardstream/export.h"
#include "shardstream/source.h"

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
  // A PEM file of trusted CA certificates; empty uses the system store.
  // Default: "" (also settable with SHARDSTREAM_CA_BUNDLE).
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

// Per-stream settings for HttpSource::OpenStream.
struct HttpStreamOptions {
  // First byte to read. Default: 0.
  uint64_t offset = 0;
  // The object's size when the caller knows it (from a manifest): a body
  // that ends early or runs longer is an error naming the offset.
  // Default: unknown.
  std::optional<uint64_t> expected_size;
  // Set to true (from any thread) to stop the stream: a Read blocked on the
  // network or in a retry backoff returns kCancelled within about 100 ms.
  // For download pools that must stop promptly. Default: none.
  std::shared_ptr<const std::atomic<bool>> cancel;
};

class SHARDSTREAM_EXPORT HttpSource : public Source {
 public:
  explicit HttpSource(HttpOptions options = {});
  ~HttpSource() override;
  HttpSource(const HttpSource&) = delete;
  HttpSource& operator=(const HttpSource&) = delete;

  const HttpOptions& options() const;

  Result<std::unique_ptr<InputStream>> OpenStream(const std::string& url,
                                                  const HttpStreamOptions& options);

  // Ranged GETs; Size() issues a HEAD on first use.
  Result<std::unique_ptr<RandomAccessFile>> OpenRandomAccess(const std::string& url) override;
  Result<std::unique_ptr<InputStream>> OpenInputStream(const std::string& url,
                                                       uint64_t offset) override;
  // OpenStream with the same offset, expected_size and cancel.
  Result<std::unique_ptr<InputStream>> OpenInputStreamWith(const std::string& url,
                                                           const StreamOptions& options) override;
  // Starts reading url in parts in the background (transfer.h), at a lower
  // priority than every reader's parts; OpenInputStream(url, 0) without a
  // cancel flag then continues that read.
  void Prefetch(const std::string& url) override;
  // HEAD: size from Content-Length, etag, mtime from Last-Modified.
  Result<FileInfo> Stat(const std::string& url) override;
  // Buffers the bytes (spooling large ones to a temporary file) and sends one
  // PUT on Close; nothing is visible at url before Close succeeds.
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& url) override;
  // DELETE; a missing object is OK.
  Status Remove(const std::string& url) override;
  // Directories are implicit on HTTP servers: OK, nothing sent.
  Status CreateDir(const std::string& url) override;
  Status SyncDir(const std::string& url) override;

  struct Impl;
  Impl* impl() const { return impl_.get(); }

 private:
  std::unique_ptr<Impl> impl_;
};

SHARDSTREAM_EXPORT std::shared_ptr<HttpSource> NewHttpSource(HttpOptions options = {});

}  // namespace shardstream

#endif  // SHARDSTREAM_HTTP_SOURCE_H_
