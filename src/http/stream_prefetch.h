// StreamPrefetcher: streams started before anyone opens them (Source::
// Prefetch), so that a reader moving to its next shard finds the shard's
// parts already arriving instead of waiting at the boundary. A prefetch is a
// background parted stream (parted_stream.h): its parts rank after every
// reader's and take the in-flight budget like read-ahead. OpenStream of the
// same url from byte 0, without a cancel flag, takes it over.
//
// At most kMaxEntries prefetches are kept per client; the oldest gives way
// to a new one, and one not taken within kTtl is dropped (its connections
// closed, its bytes freed).
//
// Thread-safety: all methods may be called concurrently.
#ifndef SHARDSTREAM_HTTP_STREAM_PREFETCH_H_
#define SHARDSTREAM_HTTP_STREAM_PREFETCH_H_

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>

#include "http/http_client.h"

namespace shardstream::internal {

class StreamPrefetcher {
 public:
  static constexpr size_t kMaxEntries = 8;
  static constexpr std::chrono::seconds kTtl{60};

  // Starts a background stream of request.urls.front() from byte 0, unless
  // one is kept already.
  void Start(std::shared_ptr<HttpClient::Shared> client, StreamRequest request);
  // The prefetched stream for `request`, in the foreground now; null when
  // there is none, or it failed to open (the caller opens anew, and meets
  // the error itself). Waits for a prefetch still opening.
  Result<std::unique_ptr<InputStream>> Take(const StreamRequest& request);
  // Drops every prefetch.
  void Clear();

  struct Entry;

 private:
  // Removes entries past kTtl, and a parent's after fork(); returns them, to
  // be destroyed unlocked (a parent's are leaked: their streams belong to
  // threads that do not exist here).
  std::deque<std::shared_ptr<Entry>> ExpireLocked();

  std::mutex mu_;
  std::deque<std::shared_ptr<Entry>> entries_;  // oldest first
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_HTTP_STREAM_PREFETCH_H_
