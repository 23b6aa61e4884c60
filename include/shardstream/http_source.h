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
#include "shardstream/http_options.h"
#include "shardstream/source.h"

namespace shardstream {

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
