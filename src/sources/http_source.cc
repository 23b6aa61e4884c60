// HttpSource: http(s) urls as a Source, over internal::HttpClient.
#include "shardstream/http_source.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "http/http_client.h"
#include "shardstream/url.h"
#include "sources/spool_file.h"

namespace shardstream {

using internal::HttpClient;
using internal::HttpRequest;
using internal::HttpResponse;
using internal::HttpStatusError;

struct HttpSource::Impl {
  explicit Impl(HttpOptions options) : client(std::make_shared<HttpClient>(std::move(options))) {}
  // Shared with the files and streams, which may outlive the source.
  std::shared_ptr<HttpClient> client;
};

namespace {

std::optional<uint64_t> ParseLength(const std::string& v) {
  if (v.empty()) return std::nullopt;
  char* end = nullptr;
  unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0') return std::nullopt;
  return x;
}

Result<FileInfo> Head(HttpClient& client, const std::string& url) {
  HttpRequest req;
  req.method = "HEAD";
  req.url = url;
  SHARDSTREAM_ASSIGN_OR_RETURN(HttpResponse resp, client.Send(req));
  if (resp.status >= 400) return HttpStatusError(resp.status, "HEAD", url);
  FileInfo info;
  info.url = url;
  info.size = ParseLength(resp.Header("content-length")).value_or(0);
  info.etag = resp.Header("etag");
  int64_t mtime = internal::ParseHttpDate(resp.Header("last-modified"));
  if (mtime >= 0) info.mtime_ns = mtime * 1000000000;
  return info;
}

class HttpRandomAccessFile final : public RandomAccessFile {
 public:
  HttpRandomAccessFile(std::shared_ptr<HttpClient> client, std::string url)
      : client_(std::move(client)), url_(std::move(url)), redacted_(RedactUrl(url_)) {}
  const std::string& url() const override { return redacted_; }
  Result<uint64_t> Size() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!size_) {
      SHARDSTREAM_ASSIGN_OR_RETURN(FileInfo info, Head(*client_, url_));
      size_ = info.size;
    }
    return *size_;
  }
  Result<size_t> ReadAt(uint64_t offset, size_t n, void* out) override {
    if (n == 0) return size_t{0};
    HttpRequest req;
    req.url = url_;
    req.SetHeader("Range",
                  "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + n - 1));
    SHARDSTREAM_ASSIGN_OR_RETURN(HttpResponse resp,
                                 client_->Send(req, {}, (uint64_t{256} << 20) + n));
    if (resp.status == 416) return size_t{0};
    if (resp.status >= 400)
      return HttpStatusError(resp.status, "GET", url_, "", static_cast<int64_t>(offset));
    std::string_view body = resp.body;
    if (resp.status == 200) {  // Range ignored: the whole object came.
      body = offset >= body.size() ? std::string_view() : body.substr(offset);
    } else if (resp.Header("content-range").rfind("bytes " + std::to_string(offset) + "-", 0) !=
               0) {
      return Status(StatusCode::kCorrupt,
                    "GET " + redacted_ + ": server sent Content-Range '" +
                        resp.Header("content-range") + "' for a read at " +
                        std::to_string(offset),
                    redacted_, static_cast<int64_t>(offset));
    }
    size_t k = std::min(n, body.size());
    std::memcpy(out, body.data(), k);
    return k;
  }

 private:
  std::shared_ptr<HttpClient> client_;
  std::string url_;
  std::string redacted_;
  std::mutex mu_;
  std::optional<uint64_t> size_;
};

// Collects the bytes (in memory, then in an unlinked-on-close temporary
// file past put_memory_bytes) and PUTs them on Close.
class HttpWritableFile final : public WritableFile {
 public:
  HttpWritableFile(std::shared_ptr<HttpClient> client, std::string url)
      : client_(std::move(client)), url_(std::move(url)), redacted_(RedactUrl(url_)) {}
  ~HttpWritableFile() override { (void)Abort(); }
  const std::string& url() const override { return redacted_; }

  Status Append(std::string_view data) override {
    if (closed_) return Status::Config("Append after Close/Abort: " + redacted_);
    size_ += data.size();
    if (!spool_.open() && memory_.size() + data.size() <= client_->options().put_memory_bytes) {
      memory_.append(data);
      return Status::OK();
    }
    if (!spool_.open()) {
      SHARDSTREAM_RETURN_IF_ERROR(spool_.Create("shardstream-put"));
      SHARDSTREAM_RETURN_IF_ERROR(spool_.Append(memory_));
      memory_.clear();
      memory_.shrink_to_fit();
    }
    return spool_.Append(data);
  }
  Status Sync() override { return Status::OK(); }
  Status Close() override {
    if (closed_) return Status::OK();
    closed_ = true;
    HttpRequest req;
    req.method = "PUT";
    req.url = url_;
    if (spool_.open()) {
      req.body_file = spool_.path();
      req.body_size = size_;
    } else {
      req.body = std::move(memory_);
    }
    auto resp = client_->Send(req);
    Cleanup();
    if (!resp.ok()) return resp.status();
    if (resp->status >= 300) return HttpStatusError(resp->status, "PUT", url_);
    return Status::OK();
  }
  Status Abort() override {
    closed_ = true;
    Cleanup();
    return Status::OK();
  }

 private:
  void Cleanup() {
    spool_.Discard();
    memory_.clear();
  }

  std::shared_ptr<HttpClient> client_;
  std::string url_;
  std::string redacted_;
  std::string memory_;
  internal::SpoolFile spool_;  // past put_memory_bytes
  uint64_t size_ = 0;
  bool closed_ = false;
};

}  // namespace

HttpSource::HttpSource(HttpOptions options) : impl_(new Impl(std::move(options))) {}
HttpSource::~HttpSource() = default;

const HttpOptions& HttpSource::options() const { return impl_->client->options(); }

Result<std::unique_ptr<InputStream>> HttpSource::OpenStream(const std::string& url,
                                                            const HttpStreamOptions& options) {
  internal::StreamRequest req;
  req.urls = impl_->client->WithMirrors(url);
  req.offset = options.offset;
  req.expected_size = options.expected_size;
  req.cancel = options.cancel;
  return impl_->client->OpenStream(std::move(req));
}

Result<std::unique_ptr<RandomAccessFile>> HttpSource::OpenRandomAccess(const std::string& url) {
  return std::unique_ptr<RandomAccessFile>(new HttpRandomAccessFile(impl_->client, url));
}

Result<std::unique_ptr<InputStream>> HttpSource::OpenInputStream(const std::string& url,
                                                                 uint64_t offset) {
  HttpStreamOptions options;
  options.offset = offset;
  return OpenStream(url, options);
}

Result<std::unique_ptr<InputStream>> HttpSource::OpenInputStreamWith(
    const std::string& url, const StreamOptions& options) {
  HttpStreamOptions o;
  o.offset = options.offset;
  o.expected_size = options.expected_size;
  o.cancel = options.cancel;
  return OpenStream(url, o);
}

void HttpSource::Prefetch(const std::string& url) {
  internal::StreamRequest req;
  req.urls = impl_->client->WithMirrors(url);
  impl_->client->Prefetch(std::move(req));
}

Result<FileInfo> HttpSource::Stat(const std::string& url) { return Head(*impl_->client, url); }

Result<std::unique_ptr<WritableFile>> HttpSource::NewWritableFile(const std::string& url) {
  return std::unique_ptr<WritableFile>(new HttpWritableFile(impl_->client, url));
}

Status HttpSource::Remove(const std::string& url) {
  HttpRequest req;
  req.method = "DELETE";
  req.url = url;
  SHARDSTREAM_ASSIGN_OR_RETURN(HttpResponse resp, impl_->client->Send(req));
  if (resp.status >= 300 && resp.status != 404) return HttpStatusError(resp.status, "DELETE", url);
  return Status::OK();
}

Status HttpSource::CreateDir(const std::string&) { return Status::OK(); }
Status HttpSource::SyncDir(const std::string&) { return Status::OK(); }

std::shared_ptr<HttpSource> NewHttpSource(HttpOptions options) {
  return std::make_shared<HttpSource>(std::move(options));
}

}  // namespace shardstream
