// CurlTransfer: one HTTP attempt driven by a private curl multi handle from
// the calling thread, so the body is pulled as the reader asks for it: the
// write callback fills the reader's buffer directly, keeps at most
// `buffer_limit` bytes more, and pauses receiving beyond that. Memory is thus
// bounded whatever the object size, and destroying a transfer mid-download
// just drops the connection (no thread to join).
//
// Thread-safety: one thread at a time.
#ifndef SHARDSTREAM_HTTP_CURL_TRANSFER_H_
#define SHARDSTREAM_HTTP_CURL_TRANSFER_H_

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>
#include <string>

#include "http/curl_util.h"
#include "http/http_request.h"
#include "shardstream/http_options.h"
#include "shardstream/result.h"

namespace shardstream::internal {

// Connection reuse for the transfers of one client: idle (multi, easy)
// pairs keep their connection caches, so a transfer that takes one reuses
// the connections of earlier ones. (curl's shared connection cache is not
// used: it is fragile with multi handles in curl 7.88.) DNS and TLS sessions
// are shared through a CURLSH.
class CurlConnectionPool {
 public:
  CurlConnectionPool();
  ~CurlConnectionPool();
  CURLSH* share() const { return share_.get(); }
  // A multi handle with one easy handle (reset, but keeping the connection
  // cache of its earlier transfers).
  struct Handles {
    CurlMultiPtr multi;
    CurlEasyPtr easy;
  };
  Handles Acquire();
  void Release(Handles handles);

 private:
  struct Locks;
  std::unique_ptr<Locks> locks_;
  CurlSharePtr share_;
  std::mutex mu_;
  std::vector<Handles> idle_;
};

class CurlTransfer {
 public:
  CurlTransfer(const HttpOptions& options, CurlConnectionPool* pool, size_t buffer_limit);
  ~CurlTransfer();
  CurlTransfer(const CurlTransfer&) = delete;
  CurlTransfer& operator=(const CurlTransfer&) = delete;

  // Sends the request and waits for the final response's headers (after any
  // redirects). On failure returns kUnavailable for connection errors and
  // timeouts (retryable), kConfig for bad urls, protocols or TLS failures.
  Status Start(const HttpRequest& request);
  long status() const { return response_.status; }
  const HttpResponse& response() const { return response_; }
  // Reads up to n body bytes; 0 means the body ended cleanly. An
  // interruption (reset, truncated body, stall) returns kUnavailable.
  Result<size_t> Read(char* out, size_t n);
  // Read that gives up at `deadline` if nothing arrived: returns 0 and sets
  // *timed_out (the transfer goes on; call again).
  Result<size_t> ReadUntil(char* out, size_t n, std::chrono::steady_clock::time_point deadline,
                           bool* timed_out);
  // Stop with kCancelled when *cancel turns true (checked every 100 ms).
  void set_cancel(const std::atomic<bool>* cancel) { cancel_ = cancel; }
  // A shorter stall limit than options.low_speed_time_s (GET streams use
  // TransferOptions::stall_s). Call before Start. 0: the options' limit.
  void set_stall_seconds(double s) { stall_override_s_ = s; }
  // Body bytes received so far (handed out or buffered).
  uint64_t received() const { return received_; }
  // True once the transfer failed for having received nothing for the
  // stall limit (ours, or curl's low-speed limit).
  bool stalled() const { return stalled_; }

 private:
  static size_t OnWrite(char* data, size_t size, size_t nmemb, void* self);
  static size_t OnHeader(char* data, size_t size, size_t nmemb, void* self);
  static size_t OnRead(char* out, size_t size, size_t nmemb, void* self);
  // Runs curl until `ready()`, the transfer finished or, with a deadline,
  // the deadline passed (*timed_out).
  template <typename Pred>
  Status Drive(Pred ready, const std::chrono::steady_clock::time_point* deadline = nullptr,
               bool* timed_out = nullptr);
  Result<size_t> ReadImpl(char* out, size_t n,
                          const std::chrono::steady_clock::time_point* deadline, bool* timed_out);
  Status DoneStatus() const;

  // The stall limit in force, in milliseconds (0: none).
  int64_t StallMs() const;

  const HttpOptions& options_;
  const std::atomic<bool>* cancel_ = nullptr;
  double stall_override_s_ = 0;
  bool stalled_ = false;
  CurlConnectionPool* pool_;
  size_t buffer_limit_;
  CurlEasyPtr easy_;
  CurlMultiPtr multi_;
  CurlSlistPtr header_list_;
  std::string url_;  // redacted, for messages
  std::string method_;
  const HttpRequest* request_ = nullptr;  // valid during Start (upload body)
  std::FILE* body_file_ = nullptr;
  uint64_t body_pos_ = 0;
  HttpResponse response_;
  bool headers_done_ = false;
  bool done_ = false;
  CURLcode result_ = CURLE_OK;
  char error_[CURL_ERROR_SIZE] = {};
  // Where OnWrite puts bytes: first the reader's buffer, then spill_.
  char* target_ = nullptr;
  size_t target_cap_ = 0;
  size_t target_len_ = 0;
  std::string spill_;
  size_t spill_pos_ = 0;
  bool paused_ = false;
  uint64_t received_ = 0;
  // Last time bytes arrived; a transfer silent for low_speed_time_s while
  // not paused by us is a stall.
  std::chrono::steady_clock::time_point last_data_;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_HTTP_CURL_TRANSFER_H_
