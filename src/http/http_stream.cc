// HttpStream: the resumable GET behind HttpClient::OpenStream.
#include "http/http_stream.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "common/log.h"
#include "http/curl_transfer.h"
#include "shardstream/url.h"
#include "transfer/transfer_engine.h"

namespace shardstream::internal {
namespace {

// "bytes a-b/total" -> (a, b, total or nullopt); "bytes */total" -> (npos, npos, total).
struct ContentRange {
  uint64_t first = UINT64_MAX;
  uint64_t last = UINT64_MAX;
  std::optional<uint64_t> total;
};
std::optional<ContentRange> ParseContentRange(std::string_view v) {
  if (v.rfind("bytes ", 0) != 0) return std::nullopt;
  v.remove_prefix(6);
  size_t slash = v.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  ContentRange cr;
  cr.total = ParseUint(v.substr(slash + 1));
  std::string_view range = v.substr(0, slash);
  if (range != "*") {
    size_t dash = range.find('-');
    auto first = ParseUint(range.substr(0, dash));
    if (!first) return std::nullopt;
    cr.first = *first;
    if (dash != std::string_view::npos) {
      auto last = ParseUint(range.substr(dash + 1));
      if (!last || *last < *first) return std::nullopt;
      cr.last = *last;
    }
  }
  return cr;
}

// A GET that resumes where it broke. `pos_` counts bytes handed to the
// reader; whatever a broken transfer had buffered beyond that is fetched again.
class HttpStream final : public InputStream {
 public:
  HttpStream(std::shared_ptr<HttpClient::Shared> client, StreamRequest req)
      : client_(std::move(client)),
        req_(std::move(req)),
        url_(RedactUrl(req_.urls.front())),
        pos_(req_.offset),
        start_(req_.offset),
        etag_(req_.if_match),
        pinned_(!req_.if_match.empty() || !req_.if_unmodified_since.empty()),
        engine_(TransferEngine::Get()),
        host_(UrlHost(req_.urls.front())),
        activity_(engine_.Activity(host_)) {}

  ~HttpStream() override { Down(); }

  Status Open(StreamInfo* info) {
    SHARDSTREAM_RETURN_IF_ERROR(Connect());
    if (!eof_) {
      engine_.ConnectionUp();
      up_ = true;
    }
    if (info != nullptr) {
      info->total = total_;
      info->etag = etag_;
      if (transfer_) {
        const HttpResponse& resp = transfer_->response();
        info->last_modified = resp.Header("last-modified");
        // A 200 to a Range we sent says the server ignores Range, whatever
        // Accept-Ranges claims.
        info->ranges = resp.status == 206 ||
                       (resp.status == 200 && start_ == 0 &&
                        resp.Header("accept-ranges").find("bytes") != std::string::npos);
      }
    }
    return Status::OK();
  }

  const std::string& url() const override { return url_; }
  uint64_t position() const override { return pos_; }
  std::optional<uint64_t> size() const override {
    return total_ ? total_ : req_.expected_size;
  }

  Result<size_t> Read(size_t n, void* out) override {
    while (true) {
      if (req_.cancel && req_.cancel->load()) return Cancelled();
      if (eof_ || n == 0) return size_t{0};
      if (!transfer_) SHARDSTREAM_RETURN_IF_ERROR(Connect());
      if (eof_) return size_t{0};
      Status failure = std::move(pending_);
      pending_ = Status::OK();
      if (failure.ok()) failure = SkipIgnoredRange();
      if (failure.ok()) {
        auto got = transfer_->Read(static_cast<char*>(out), n);
        if (!got.ok()) {
          failure = got.status();
        } else if (*got > 0) {
          return Delivered(*got);
        } else if (auto limit = Limit(); limit && pos_ < *limit) {
          failure = Status(StatusCode::kUnavailable,
                           "GET " + url_ + ": body ended at byte " + std::to_string(pos_) +
                               " of " + std::to_string(*limit),
                           url_, static_cast<int64_t>(pos_));
        } else {
          if (!req_.end && req_.expected_size && pos_ != *req_.expected_size) {
            return Status(StatusCode::kCorrupt,
                          "GET " + url_ + ": body ended at byte " + std::to_string(pos_) +
                              ", expected " + std::to_string(*req_.expected_size) + " bytes",
                          url_, static_cast<int64_t>(pos_));
          }
          eof_ = true;
          transfer_.reset();
          Down();
          return size_t{0};
        }
      }
      if (!failure.retryable()) return failure.WithContext("", url_, static_cast<int64_t>(pos_));
      Log().debug("http stream {} interrupted at byte {}: {}", url_, pos_, failure.ToString());
      CountRetry(transfer_ && transfer_->stalled());
      last_error_ = failure;
      transfer_.reset();
      ++failures_;
    }
  }

  // Only the common case of a transfer under way; anything else (connect,
  // retry, end of body) is left to Read, with a failure kept for it.
  Result<size_t> ReadWithin(size_t n, void* out, std::chrono::microseconds wait) override {
    if (req_.cancel && req_.cancel->load()) return Cancelled();
    if (eof_ || n == 0 || !transfer_ || skip_ > 0 || !pending_.ok()) return size_t{0};
    bool timed_out = false;
    auto got = transfer_->ReadUntil(static_cast<char*>(out), n,
                                    std::chrono::steady_clock::now() + wait, &timed_out);
    if (!got.ok()) {
      pending_ = got.status();
      return size_t{0};
    }
    if (*got == 0) return size_t{0};
    return Delivered(*got);
  }

 private:
  // Bytes handed to the caller: the transfer is healthy again.
  Result<size_t> Delivered(size_t got) {
    pos_ += got;
    failures_ = 0;
    engine_.CountBytes(got);
    activity_->last_byte_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::steady_clock::now().time_since_epoch())
                                      .count(),
                                  std::memory_order_relaxed);
    SHARDSTREAM_RETURN_IF_ERROR(CheckLength());
    return got;
  }

  // A failed attempt about to be retried. A stall is this connection's
  // trouble; a reset or refused connection may be the host's load.
  void CountRetry(bool stalled) {
    last_stalled_ = stalled;
    if (stalled) host_silent_s_ = engine_.NoteStall(activity_, StallSeconds());
    engine_.CountRetry(stalled);
    if (!stalled) engine_.Signal(host_, HostSignal::kConnectionError);
  }

  double StallSeconds() const {
    const double low_speed = static_cast<double>(client_->options.low_speed_time_s);
    if (req_.stall_s > 0 && (low_speed <= 0 || req_.stall_s < low_speed)) return req_.stall_s;
    return low_speed;
  }

  void Down() {
    if (up_) engine_.ConnectionDown();
    up_ = false;
  }

  // Where the body must end: the range's end, else the object's size.
  std::optional<uint64_t> Limit() const {
    if (req_.end) return total_ ? std::min(*req_.end, *total_) : *req_.end;
    return total_;
  }

  Status CheckLength() const {
    uint64_t cap = client_->options.max_transfer_bytes;
    std::optional<uint64_t> limit = req_.expected_size;
    if (total_ && (!limit || *total_ < *limit)) limit = total_;
    if (req_.end && (!limit || *req_.end < *limit)) limit = req_.end;
    if ((limit && pos_ > *limit) || (cap > 0 && pos_ - start_ > cap)) {
      return Status(StatusCode::kCorrupt,
                    "GET " + url_ + ": body longer than expected (" +
                        std::to_string(pos_ - start_) + " bytes received from offset " +
                        std::to_string(start_) + ")",
                    url_, static_cast<int64_t>(pos_));
    }
    return Status::OK();
  }

  // After a server ignored our Range, drops the bytes the reader already has.
  Status SkipIgnoredRange() {
    char buf[64 * 1024];
    while (skip_ > 0) {
      SHARDSTREAM_ASSIGN_OR_RETURN(
          size_t got, transfer_->Read(buf, static_cast<size_t>(std::min<uint64_t>(skip_, sizeof(buf)))));
      if (got == 0) {
        return Status(StatusCode::kUnavailable,
                      "GET " + url_ + ": body ended before byte " + std::to_string(pos_), url_,
                      static_cast<int64_t>(pos_));
      }
      skip_ -= got;
    }
    return Status::OK();
  }

  Status Cancelled() const {
    return Status(StatusCode::kCancelled, "GET " + url_ + ": cancelled", url_,
                  static_cast<int64_t>(pos_));
  }

  // kChecksum: the bytes are not those of the object the read began with
  // (the shard's fault, skipped under skip_shard; a cache fill starts again).
  Status Changed(const std::string& why) const {
    const std::string where = pinned_ ? "at byte " + std::to_string(pos_)
                                      : "after " + std::to_string(pos_ - start_) + " bytes";
    return Status(StatusCode::kChecksum,
                  "GET " + url_ + ": the object changed while it was read (" + why + ") " +
                      where + "; read it again from the start",
                  url_, static_cast<int64_t>(pos_));
  }

  // Checks a size the server reports against what we know.
  Status AcceptTotal(std::optional<uint64_t> total) {
    if (!total) return Status::OK();
    if (total_ && *total_ != *total) {
      if (pos_ != start_)
        return Changed("size " + std::to_string(*total_) + " -> " + std::to_string(*total));
    }
    total_ = total;
    if (req_.expected_size && *total != *req_.expected_size) {
      return Status(StatusCode::kCorrupt,
                    "GET " + url_ + ": object has " + std::to_string(*total) +
                        " bytes, expected " + std::to_string(*req_.expected_size),
                    url_, static_cast<int64_t>(pos_));
    }
    uint64_t cap = client_->options.max_transfer_bytes;
    if (cap > 0 && *total > start_ && *total - start_ > cap) {
      return Status(StatusCode::kCorrupt,
                    "GET " + url_ + ": body of " + std::to_string(*total - start_) +
                        " bytes exceeds the transfer cap of " + std::to_string(cap),
                    url_, static_cast<int64_t>(pos_));
    }
    return Status::OK();
  }

  Status Connect() {
    if (req_.end && pos_ >= *req_.end) {
      eof_ = true;
      return Status::OK();
    }
    while (true) {
      const double host_stall_s = GetTransferOptions().host_stall_s;
      if (last_stalled_ && host_stall_s > 0 && host_silent_s_ >= host_stall_s) {
        char secs[32];
        std::snprintf(secs, sizeof(secs), "%.3g", host_silent_s_);
        return Status(StatusCode::kUnavailable,
                      last_error_.message() + "; " + host_ + " has sent no byte on any connection for " +
                          secs + " s (every request stalls): gave up after " +
                          std::to_string(failures_) + " attempts",
                      url_, static_cast<int64_t>(pos_));
      }
      if (failures_ > client_->options.max_retries) {
        if (mirror_ + 1 < req_.urls.size()) {
          ++mirror_;
          failures_ = 0;
          // ETags differ between servers; the size check still pins the object.
          etag_.clear();
          Log().info("http {}: trying mirror {}", url_, RedactUrl(req_.urls[mirror_]));
        } else {
          return Status(StatusCode::kUnavailable,
                        last_error_.message() + "; gave up after " +
                            std::to_string(failures_) + " attempts",
                        url_, static_cast<int64_t>(pos_));
        }
      }
      // A stalled attempt has waited stall_s already: no backoff on top, so a
      // store that stalls everything fails after (max_retries + 1) * stall_s
      // (45 s by default).
      if (failures_ > 0 && !last_stalled_ && !BackoffSleep(client_->options, failures_ - 1,
                                         last_response_ ? &*last_response_ : nullptr,
                                         req_.cancel.get())) {
        return Cancelled();
      }
      last_response_.reset();
      current_ = HttpRequest();
      current_.url = req_.urls[mirror_];
      current_.headers = req_.headers;
      if (req_.end) {
        current_.SetHeader("Range", "bytes=" + std::to_string(pos_) + "-" +
                                        std::to_string(*req_.end - 1));
      } else if (pos_ > 0) {
        current_.SetHeader("Range", "bytes=" + std::to_string(pos_) + "-");
      }
      if (!etag_.empty()) {
        current_.SetHeader("If-Match", etag_);
      } else if (!req_.if_unmodified_since.empty()) {
        current_.SetHeader("If-Unmodified-Since", req_.if_unmodified_since);
      }
      if (req_.sign) SHARDSTREAM_RETURN_IF_ERROR(req_.sign(current_));
      transfer_ = std::make_unique<CurlTransfer>(client_->options, client_->pool.get(),
                                                 client_->options.stream_buffer_bytes);
      transfer_->set_cancel(req_.cancel.get());
      transfer_->set_stall_seconds(req_.stall_s);
      Status s = transfer_->Start(current_);
      if (!s.ok()) {
        const bool stalled = transfer_->stalled();
        transfer_.reset();
        if (!s.retryable()) return s.WithContext("", url_, static_cast<int64_t>(pos_));
        CountRetry(stalled);
        last_error_ = s;
        ++failures_;
        continue;
      }
      const HttpResponse& resp = transfer_->response();
      const long code = resp.status;
      const std::string etag = resp.Header("etag");
      skip_ = 0;
      if (code == 206) {
        auto cr = ParseContentRange(resp.Header("content-range"));
        std::optional<uint64_t> want_last;
        if (cr && req_.end) {
          uint64_t end = cr->total ? std::min(*req_.end, *cr->total) : *req_.end;
          want_last = end - 1;
        }
        if (!cr || cr->first != pos_ || (want_last && cr->last != *want_last)) {
          transfer_.reset();
          return Status(StatusCode::kCorrupt,
                        "GET " + url_ + ": asked for bytes from " + std::to_string(pos_) +
                            ", server sent Content-Range '" +
                            (cr ? resp.Header("content-range") : std::string("?")) + "'",
                        url_, static_cast<int64_t>(pos_));
        }
        if (!etag_.empty() && !etag.empty() && etag != etag_) {
          if (pos_ != start_ || pinned_) {
            transfer_.reset();
            return Changed("ETag " + etag_ + " -> " + etag);
          }
          etag_ = etag;  // nothing handed out yet: just follow the new version
          total_.reset();
        }
        SHARDSTREAM_RETURN_IF_ERROR(AcceptTotal(cr->total));
        if (etag_.empty()) etag_ = etag;
        return Status::OK();
      }
      if (code == 200 && req_.end) {
        transfer_.reset();
        return Status(StatusCode::kCorrupt,
                      "GET " + url_ + ": asked for bytes " + std::to_string(pos_) + "-" +
                          std::to_string(*req_.end - 1) +
                          ", server answered 200 with the whole object (Range ignored)",
                      url_, static_cast<int64_t>(pos_));
      }
      if (code == 200) {
        if (!etag_.empty() && etag != etag_ && pos_ != start_) {
          transfer_.reset();
          return Changed("ETag " + etag_ + " -> " + etag);
        }
        auto length = ParseUint(resp.Header("content-length"));
        SHARDSTREAM_RETURN_IF_ERROR(AcceptTotal(length));
        etag_ = etag;
        if (pos_ > 0) {
          Log().debug("http {}: server ignored Range; skipping {} bytes", url_, pos_);
          skip_ = pos_;
        }
        return Status::OK();
      }
      if (code == 412) {
        transfer_.reset();
        if (pos_ != start_ || pinned_) {
          return Changed(etag_.empty() ? "If-Unmodified-Since " + req_.if_unmodified_since + " failed"
                                       : "If-Match " + etag_ + " failed");
        }
        etag_.clear();
        total_.reset();
        ++failures_;
        last_error_ = HttpStatusError(code, "GET", current_.url, "", static_cast<int64_t>(pos_));
        continue;
      }
      if (code == 416) {
        auto cr = ParseContentRange(resp.Header("content-range"));
        std::optional<uint64_t> total = cr ? cr->total : total_;
        transfer_.reset();
        if (total && pos_ >= *total) {
          SHARDSTREAM_RETURN_IF_ERROR(AcceptTotal(total));
          if (req_.expected_size && pos_ != *req_.expected_size) {
            return Status(StatusCode::kCorrupt,
                          "GET " + url_ + ": object ends at byte " + std::to_string(*total) +
                              ", expected " + std::to_string(*req_.expected_size) + " bytes",
                          url_, static_cast<int64_t>(pos_));
          }
          eof_ = true;
          return Status::OK();
        }
        return Status(StatusCode::kCorrupt,
                      "GET " + url_ + ": range from byte " + std::to_string(pos_) +
                          " not satisfiable" +
                          (total ? " (object has " + std::to_string(*total) + " bytes)" : ""),
                      url_, static_cast<int64_t>(pos_));
      }
      HttpResponse response = resp;
      // Keep the error body (S3's XML error) for the message.
      char buf[16 * 1024];
      for (int i = 0; i < 4; ++i) {
        auto got = transfer_->Read(buf, sizeof(buf));
        if (!got.ok() || *got == 0) break;
        response.body.append(buf, *got);
      }
      transfer_.reset();
      Status err = req_.error ? req_.error(response, current_.url, static_cast<int64_t>(pos_))
                              : HttpStatusError(code, "GET", current_.url, "",
                                                static_cast<int64_t>(pos_));
      if (RetryableHttpStatus(code)) {
        if (code == 503 || code == 429) {
          engine_.CountThrottle();
          engine_.Signal(host_, HostSignal::kThrottled);
        }
        engine_.CountRetry(false);
        last_error_ = err;
        last_response_ = std::move(response);
        ++failures_;
        continue;
      }
      return err;
    }
  }

  std::shared_ptr<HttpClient::Shared> client_;
  StreamRequest req_;
  std::string url_;
  uint64_t pos_;
  const uint64_t start_;
  size_t mirror_ = 0;
  HttpRequest current_;  // outlives transfer_ (the transfer reads it)
  std::unique_ptr<CurlTransfer> transfer_;
  std::optional<uint64_t> total_;
  std::string etag_;
  uint64_t skip_ = 0;
  int failures_ = 0;
  bool last_stalled_ = false;  // the last failure was a stall
  double host_silent_s_ = 0;   // then: how long the host has sent nothing
  bool eof_ = false;
  Status pending_;  // a failure ReadWithin met, for Read to handle
  Status last_error_;
  std::optional<HttpResponse> last_response_;
  const bool pinned_;  // the version was fixed by the caller: never follow a new one
  TransferEngine& engine_;
  const std::string host_;
  HostActivity* const activity_;
  bool up_ = false;  // counted as a connection in use
};

}  // namespace

Result<std::unique_ptr<InputStream>> OpenHttpStream(std::shared_ptr<HttpClient::Shared> client,
                                                    StreamRequest request, StreamInfo* info) {
  auto stream = std::make_unique<HttpStream>(std::move(client), std::move(request));
  SHARDSTREAM_RETURN_IF_ERROR(stream->Open(info));
  return std::unique_ptr<InputStream>(std::move(stream));
}

}  // namespace shardstream::internal
