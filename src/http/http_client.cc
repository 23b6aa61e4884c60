#include "http/http_client.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>
#include <thread>

#include "common/log.h"
#include "http/ca_bundle.h"
#include "http/curl_transfer.h"
#include "http/parted_stream.h"
#include "http/stream_prefetch.h"
#include "shardstream/url.h"

namespace shardstream::internal {

namespace {

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

}  // namespace

void HttpRequest::RemoveHeader(std::string_view name) {
  headers.erase(std::remove_if(headers.begin(), headers.end(),
                               [&](const auto& h) { return IEquals(h.first, name); }),
                headers.end());
}

void HttpRequest::SetHeader(std::string_view name, std::string value) {
  RemoveHeader(name);
  headers.emplace_back(std::string(name), std::move(value));
}

std::string HttpResponse::Header(std::string_view lower_name) const {
  for (auto it = headers.rbegin(); it != headers.rend(); ++it)
    if (it->first == lower_name) return it->second;
  return {};
}

bool RetryableHttpStatus(long status) {
  return status == 408 || status == 429 || status >= 500;
}

Status HttpStatusError(long status, std::string_view method, std::string_view url,
                       std::string_view detail, int64_t offset) {
  std::string redacted = RedactUrl(url);
  std::string msg = std::string(method) + " " + redacted + ": HTTP " + std::to_string(status);
  if (!detail.empty()) msg += " (" + std::string(detail) + ")";
  StatusCode code = StatusCode::kIo;
  if (status == 401 || status == 403) {
    code = StatusCode::kAuth;
  } else if (status == 404) {
    code = StatusCode::kNotFound;
  } else if (RetryableHttpStatus(status)) {
    code = StatusCode::kUnavailable;
  }
  return Status(code, msg, redacted, offset);
}

HttpClient::HttpClient(HttpOptions options) : shared_(std::make_shared<Shared>()) {
  shared_->options = std::move(options);
  shared_->pool = std::make_unique<CurlConnectionPool>();
  shared_->prefetcher = std::make_unique<StreamPrefetcher>();
  if (shared_->options.ca_bundle.empty()) {
    if (const char* env = std::getenv("SHARDSTREAM_CA_BUNDLE"); env && *env) {
      shared_->options.ca_bundle = env;
    } else {
      shared_->options.ca_bundle = SystemCaBundle();
    }
  }
}

// Prefetched streams hold the client's state: drop them with the client.
HttpClient::~HttpClient() { shared_->prefetcher->Clear(); }
HttpClient::Shared::~Shared() = default;

std::vector<std::string> HttpClient::WithMirrors(const std::string& url) const {
  std::vector<std::string> out{url};
  for (const auto& [prefix, alternatives] : options().mirrors) {
    if (url.rfind(prefix, 0) != 0) continue;
    for (const auto& alt : alternatives) out.push_back(alt + url.substr(prefix.size()));
  }
  return out;
}

bool BackoffSleep(const HttpOptions& options_, int attempt, const HttpResponse* response,
                  const std::atomic<bool>* cancel) {
  double seconds = -1;
  if (response) {
    if (auto ra = ParseUint(response->Header("retry-after")))
      seconds = std::min<double>(static_cast<double>(*ra), options_.max_retry_after_s);
  }
  if (seconds < 0) {
    double cap = std::min(options_.max_backoff_s,
                          options_.initial_backoff_s * std::ldexp(1.0, std::min(attempt, 30)));
    thread_local std::mt19937_64 rng{std::random_device{}()};
    seconds = std::uniform_real_distribution<double>(0, std::max(cap, 0.0))(rng);
  }
  using std::chrono::steady_clock;
  auto until = steady_clock::now() +
               std::chrono::duration_cast<steady_clock::duration>(
                   std::chrono::duration<double>(std::max(seconds, 0.0)));
  while (steady_clock::now() < until) {
    if (cancel && cancel->load()) return false;
    steady_clock::duration left = until - steady_clock::now();
    std::this_thread::sleep_for(
        std::min<steady_clock::duration>(left, std::chrono::milliseconds(50)));
  }
  return !(cancel && cancel->load());
}

Result<HttpResponse> HttpClient::Send(const HttpRequest& original, const RequestSigner& sign,
                                      uint64_t max_body) {
  const HttpOptions& options_ = shared_->options;
  HttpRequest request = original;
  const std::string redacted = RedactUrl(request.url);
  Status last;
  std::optional<HttpResponse> last_response;
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0) {
      if (attempt > options_.max_retries) {
        return Status(StatusCode::kUnavailable,
                      last.message() + "; gave up after " + std::to_string(attempt) +
                          " attempts",
                      redacted);
      }
      Log().debug("http retry {} of {} {}: {}", attempt, request.method, redacted,
                  last.ToString());
      BackoffSleep(options_, attempt - 1, last_response ? &*last_response : nullptr);
    }
    last_response.reset();
    if (sign) SHARDSTREAM_RETURN_IF_ERROR(sign(request));
    CurlTransfer transfer(options_, shared_->pool.get(), size_t{1} << 20);
    Status s = transfer.Start(request);
    if (!s.ok()) {
      if (!s.retryable()) return s;
      last = s;
      continue;
    }
    HttpResponse response = transfer.response();
    char buf[64 * 1024];
    while (true) {
      auto got = transfer.Read(buf, sizeof(buf));
      if (!got.ok()) {
        s = got.status();
        break;
      }
      if (*got == 0) break;
      response.body.append(buf, *got);
      if (response.body.size() > max_body) {
        return Status(StatusCode::kCorrupt,
                      request.method + " " + redacted + ": response body exceeds " +
                          std::to_string(max_body) + " bytes",
                      redacted);
      }
    }
    if (!s.ok()) {
      if (!s.retryable()) return s;
      last = s;
      continue;
    }
    if (RetryableHttpStatus(response.status)) {
      last = HttpStatusError(response.status, request.method, request.url);
      last_response = std::move(response);
      continue;
    }
    return response;
  }
}

Result<std::unique_ptr<InputStream>> HttpClient::OpenStream(StreamRequest request) {
  if (request.urls.empty()) return Status::Config("OpenStream: no url");
  SHARDSTREAM_ASSIGN_OR_RETURN(auto prefetched, shared_->prefetcher->Take(request));
  if (prefetched) return prefetched;
  return OpenPartedStream(shared_, std::move(request));
}

void HttpClient::Prefetch(StreamRequest request) {
  if (request.urls.empty()) return;
  shared_->prefetcher->Start(shared_, std::move(request));
}

}  // namespace shardstream::internal
