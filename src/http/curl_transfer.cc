#include "http/curl_transfer.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "common/log.h"
#include "shardstream/url.h"
#include "shardstream/version.h"

namespace shardstream::internal {

void EnsureCurlInitialized() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

int64_t ParseHttpDate(const std::string& date) {
  if (date.empty()) return -1;
  return static_cast<int64_t>(curl_getdate(date.c_str(), nullptr));
}

struct CurlConnectionPool::Locks {
  std::mutex mu[CURL_LOCK_DATA_LAST];
};

CurlConnectionPool::CurlConnectionPool() : locks_(new Locks) {
  EnsureCurlInitialized();
  share_.reset(curl_share_init());
  auto lock = [](CURL*, curl_lock_data data, curl_lock_access, void* p) {
    static_cast<Locks*>(p)->mu[data].lock();
  };
  auto unlock = [](CURL*, curl_lock_data data, void* p) {
    static_cast<Locks*>(p)->mu[data].unlock();
  };
  curl_share_setopt(share_.get(), CURLSHOPT_LOCKFUNC,
                    static_cast<curl_lock_function>(lock));
  curl_share_setopt(share_.get(), CURLSHOPT_UNLOCKFUNC,
                    static_cast<curl_unlock_function>(unlock));
  curl_share_setopt(share_.get(), CURLSHOPT_USERDATA, locks_.get());
  curl_share_setopt(share_.get(), CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
  curl_share_setopt(share_.get(), CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
}

// The multis (whose handles used the share) go first, then the share, then
// the locks it calls.
CurlConnectionPool::~CurlConnectionPool() {
  idle_.clear();
  share_.reset();
}

CurlConnectionPool::Handles CurlConnectionPool::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      Handles h = std::move(idle_.back());
      idle_.pop_back();
      curl_easy_reset(h.easy.get());
      return h;
    }
  }
  return Handles{CurlMultiPtr(curl_multi_init()), CurlEasyPtr(curl_easy_init())};
}

void CurlConnectionPool::Release(Handles handles) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < 64) idle_.push_back(std::move(handles));
}

CurlTransfer::CurlTransfer(const HttpOptions& options, CurlConnectionPool* pool,
                           size_t buffer_limit)
    : options_(options), pool_(pool), buffer_limit_(std::max<size_t>(buffer_limit, 1)) {}

CurlTransfer::~CurlTransfer() {
  if (multi_ && easy_) {
    curl_multi_remove_handle(multi_.get(), easy_.get());
    pool_->Release({std::move(multi_), std::move(easy_)});
  }
  if (body_file_) std::fclose(body_file_);
}

size_t CurlTransfer::OnHeader(char* data, size_t size, size_t nmemb, void* p) {
  auto* self = static_cast<CurlTransfer*>(p);
  size_t n = size * nmemb;
  std::string_view line(data, n);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  if (line.rfind("HTTP/", 0) == 0) {
    // A new response (after a redirect or 100 Continue): start over.
    self->response_.headers.clear();
    size_t sp = line.find(' ');
    self->response_.status = sp == std::string_view::npos ? 0 : std::atol(line.data() + sp + 1);
    return n;
  }
  if (line.empty()) {
    // The end of a final response's headers: not 1xx, and not a redirect
    // that curl is about to follow.
    long code = self->response_.status;
    bool redirect = code >= 300 && code < 400 && code != 304 &&
                    self->options_.max_redirects > 0 && !self->response_.Header("location").empty();
    if (code >= 200 && !redirect) self->headers_done_ = true;
    return n;
  }
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return n;
  std::string name(line.substr(0, colon));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  self->response_.headers.emplace_back(std::move(name), std::string(value));
  return n;
}

size_t CurlTransfer::OnWrite(char* data, size_t size, size_t nmemb, void* p) {
  auto* self = static_cast<CurlTransfer*>(p);
  const size_t total = size * nmemb;
  self->last_data_ = std::chrono::steady_clock::now();
  size_t consumed = 0;
  size_t buffered = self->spill_.size() - self->spill_pos_;
  // Straight into the reader's buffer when nothing is queued before it.
  if (buffered == 0 && self->target_len_ < self->target_cap_) {
    consumed = std::min(self->target_cap_ - self->target_len_, total);
    std::memcpy(self->target_ + self->target_len_, data, consumed);
    self->target_len_ += consumed;
    if (consumed == total) {
      self->received_ += total;
      return total;
    }
  }
  if (consumed == 0 && buffered >= self->buffer_limit_) {
    // curl keeps this chunk and delivers it again after CURLPAUSE_CONT.
    self->paused_ = true;
    return CURL_WRITEFUNC_PAUSE;
  }
  if (self->spill_pos_ > 0 && buffered == 0) {
    self->spill_.clear();
    self->spill_pos_ = 0;
  }
  // At most one chunk (CURLOPT_BUFFERSIZE) beyond the limit.
  self->spill_.append(data + consumed, total - consumed);
  self->received_ += total;
  return total;
}

size_t CurlTransfer::OnRead(char* out, size_t size, size_t nmemb, void* p) {
  auto* self = static_cast<CurlTransfer*>(p);
  const HttpRequest& req = *self->request_;
  size_t want = size * nmemb;
  uint64_t left = req.BodySize() - self->body_pos_;
  size_t k = static_cast<size_t>(std::min<uint64_t>(left, want));
  if (k == 0) return 0;
  if (self->body_file_) {
    size_t got = std::fread(out, 1, k, self->body_file_);
    if (got != k) return CURL_READFUNC_ABORT;
  } else {
    std::memcpy(out, req.body.data() + self->body_pos_, k);
  }
  self->body_pos_ += k;
  return k;
}

namespace {

Status CurlError(CURLcode code, const char* detail, const std::string& method,
                 const std::string& url) {
  std::string msg = method + " " + url + ": " + curl_easy_strerror(code);
  if (detail && *detail) {
    // curl's detail text may quote the url it failed on: redact it too.
    msg += " (" + RedactUrl(detail) + ")";
  }
  switch (code) {
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_TOO_MANY_REDIRECTS:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
      return Status(StatusCode::kConfig, msg, url);
    case CURLE_ABORTED_BY_CALLBACK:
      return Status(StatusCode::kCancelled, msg, url);
    default:
      return Status(StatusCode::kUnavailable, msg, url);
  }
}

}  // namespace

Status CurlTransfer::DoneStatus() const {
  if (result_ == CURLE_OK) return Status::OK();
  return CurlError(result_, error_, method_, url_);
}

template <typename Pred>
Status CurlTransfer::Drive(Pred ready, const std::chrono::steady_clock::time_point* deadline,
                           bool* timed_out) {
  while (!ready() && !done_) {
    int running = 0;
    CURLMcode mc = curl_multi_perform(multi_.get(), &running);
    if (mc != CURLM_OK) {
      return Status(StatusCode::kUnavailable,
                    method_ + " " + url_ + ": " + curl_multi_strerror(mc), url_);
    }
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi_.get(), &left)) {
      if (msg->msg == CURLMSG_DONE) {
        done_ = true;
        result_ = msg->data.result;
        // After the headers, curl's only timeout is the low-speed limit.
        if (result_ == CURLE_OPERATION_TIMEDOUT && headers_done_) stalled_ = true;
      }
    }
    if (ready() || done_) break;
    if (paused_) break;  // the reader must drain first
    if (cancel_ && cancel_->load())
      return Status(StatusCode::kCancelled, method_ + " " + url_ + ": cancelled", url_);
    auto silent = std::chrono::steady_clock::now() - last_data_;
    const int64_t stall_ms = StallMs();
    if (stall_ms > 0 && silent > std::chrono::milliseconds(stall_ms)) {
      stalled_ = true;
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", static_cast<double>(stall_ms) / 1000);
      return Status(StatusCode::kUnavailable,
                    method_ + " " + url_ + ": no data for " + secs + " s (stalled) after " +
                        std::to_string(received_) + " bytes",
                    url_);
    }
    int wait_ms = 100;
    if (deadline != nullptr) {
      auto left = *deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero()) {
        *timed_out = true;
        break;
      }
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
      wait_ms = static_cast<int>(std::min<int64_t>(ms, wait_ms));
    }
    mc = curl_multi_poll(multi_.get(), nullptr, 0, wait_ms, nullptr);
    if (mc != CURLM_OK) {
      return Status(StatusCode::kUnavailable,
                    method_ + " " + url_ + ": " + curl_multi_strerror(mc), url_);
    }
  }
  return Status::OK();
}

int64_t CurlTransfer::StallMs() const {
  int64_t base = options_.low_speed_time_s > 0 ? int64_t{options_.low_speed_time_s} * 1000 : 0;
  int64_t over = static_cast<int64_t>(stall_override_s_ * 1000);
  if (over > 0 && (base == 0 || over < base)) return over;
  return base;
}

Status CurlTransfer::Start(const HttpRequest& req) {
  url_ = RedactUrl(req.url);
  method_ = req.method;
  request_ = &req;
  auto handles = pool_->Acquire();
  easy_ = std::move(handles.easy);
  multi_ = std::move(handles.multi);
  if (!easy_ || !multi_) return Status(StatusCode::kIo, "curl init failed", url_);
  CURL* h = easy_.get();
  curl_easy_setopt(h, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(h, CURLOPT_SHARE, pool_->share());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error_);
#if LIBCURL_VERSION_NUM >= 0x075500  // 7.85 names protocols; the wheels' curl (7.74) has bits only
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
  curl_easy_setopt(h, CURLOPT_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
  curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, options_.max_redirects > 0 ? 1L : 0L);
  curl_easy_setopt(h, CURLOPT_MAXREDIRS, static_cast<long>(options_.max_redirects));
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options_.connect_timeout_s * 1000));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, options_.low_speed_bytes);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>((StallMs() + 999) / 1000));
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, options_.verify_tls ? 1L : 0L);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, options_.verify_tls ? 2L : 0L);
  if (!options_.ca_bundle.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, options_.ca_bundle.c_str());
  std::string ua = options_.user_agent.empty() ? "shardstream/" + std::string(Version())
                                               : options_.user_agent;
  curl_easy_setopt(h, CURLOPT_USERAGENT, ua.c_str());
  curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 256L * 1024);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &CurlTransfer::OnHeader);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, this);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &CurlTransfer::OnWrite);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, this);
  // We check lengths ourselves and want the raw bytes.
  curl_easy_setopt(h, CURLOPT_HTTP_CONTENT_DECODING, 0L);

  curl_slist* list = nullptr;
  for (const auto& [name, value] : req.headers) {
    std::string line = name + ": " + value;
    list = curl_slist_append(list, line.c_str());
  }
  // No "Expect: 100-continue" round trip on uploads.
  list = curl_slist_append(list, "Expect:");
  header_list_.reset(list);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, list);

  if (req.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (req.method == "PUT" || req.method == "POST") {
    if (!req.body_file.empty()) {
      body_file_ = std::fopen(req.body_file.c_str(), "rb");
      if (!body_file_) return Status::FromErrno(errno, "open " + req.body_file);
      if (std::fseek(body_file_, static_cast<long>(req.body_file_offset), SEEK_SET) != 0)
        return Status::FromErrno(errno, "seek " + req.body_file);
    }
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(req.BodySize()));
    curl_easy_setopt(h, CURLOPT_READFUNCTION, &CurlTransfer::OnRead);
    curl_easy_setopt(h, CURLOPT_READDATA, this);
    if (req.method == "POST") curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "POST");
  } else if (req.method != "GET") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }
  last_data_ = std::chrono::steady_clock::now();
  curl_multi_add_handle(multi_.get(), h);
  Log().debug("http {} {}", method_, url_);
  // Body bytes arriving with the headers go to the spill buffer.
  SHARDSTREAM_RETURN_IF_ERROR(Drive([this] { return headers_done_; }));
  if (!headers_done_) {
    Status s = DoneStatus();
    if (!s.ok()) return s;
    return Status(StatusCode::kUnavailable,
                  method_ + " " + url_ + ": connection closed before a response", url_);
  }
  return Status::OK();
}

Result<size_t> CurlTransfer::Read(char* out, size_t n) {
  return ReadImpl(out, n, nullptr, nullptr);
}

Result<size_t> CurlTransfer::ReadUntil(char* out, size_t n,
                                       std::chrono::steady_clock::time_point deadline,
                                       bool* timed_out) {
  *timed_out = false;
  return ReadImpl(out, n, &deadline, timed_out);
}

Result<size_t> CurlTransfer::ReadImpl(char* out, size_t n,
                                      const std::chrono::steady_clock::time_point* deadline,
                                      bool* timed_out) {
  if (n == 0) return size_t{0};
  size_t buffered = spill_.size() - spill_pos_;
  if (buffered > 0) {
    size_t k = std::min(buffered, n);
    std::memcpy(out, spill_.data() + spill_pos_, k);
    spill_pos_ += k;
    if (spill_pos_ == spill_.size()) {
      spill_.clear();
      spill_pos_ = 0;
    }
    return k;
  }
  if (done_) {
    SHARDSTREAM_RETURN_IF_ERROR(DoneStatus());
    return size_t{0};
  }
  target_ = out;
  target_cap_ = n;
  target_len_ = 0;
  if (paused_) {
    paused_ = false;
    last_data_ = std::chrono::steady_clock::now();
    // Unpausing delivers the held chunk right away, into target_/spill_.
    curl_easy_pause(easy_.get(), CURLPAUSE_CONT);
  }
  Status s = Drive([this] { return target_len_ > 0 || spill_.size() > spill_pos_; }, deadline,
                   timed_out);
  size_t got = target_len_;
  target_ = nullptr;
  target_cap_ = target_len_ = 0;
  SHARDSTREAM_RETURN_IF_ERROR(s);
  if (got > 0) return got;
  if (spill_.size() > spill_pos_) return ReadImpl(out, n, nullptr, nullptr);
  if (timed_out != nullptr && *timed_out) return size_t{0};
  SHARDSTREAM_RETURN_IF_ERROR(DoneStatus());
  return size_t{0};
}

}  // namespace shardstream::internal
