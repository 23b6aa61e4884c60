// DefaultSource(): the scheme router, with the sources it routes to
// registered when it is first built (no static initializers; nothing
// connects until a url is opened), and RegisterSource().
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shardstream/http_source.h"
#include "shardstream/source.h"
#include "shardstream/url.h"
#include "sources/builtin_sources.h"

namespace shardstream {

namespace {

class Router final : public Source {
 public:
  void Register(const std::string& scheme, std::shared_ptr<Source> source) {
    std::lock_guard<std::mutex> lock(mu_);
    by_scheme_[scheme] = std::move(source);
  }

  Result<std::unique_ptr<RandomAccessFile>> OpenRandomAccess(const std::string& url) override {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto s, For(url));
    return s->OpenRandomAccess(url);
  }
  Result<std::unique_ptr<InputStream>> OpenInputStream(const std::string& url,
                                                       uint64_t offset) override {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto s, For(url));
    return s->OpenInputStream(url, offset);
  }
  Result<std::unique_ptr<InputStream>> OpenInputStreamWith(const std::string& url,
                                                           const StreamOptions& options) override {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto s, For(url));
    return s->OpenInputStreamWith(url, options);
  }
  void Prefetch(const std::string& url) override {
    if (auto s = For(url); s.ok()) (*s)->Prefetch(url);
  }
  Result<FileInfo> Stat(const std::string& url) override {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto s, For(url));
    return s->Stat(url);
  }
  Result<std::vector<FileInfo>> List(const std::string& url) override {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto s, For(url));
    return s->List(url);
  }
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& url) override {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto s, For(url));
    return s->NewWritableFile(url);
  }
  Status Rename(const std::string& from, const std::string& to) override {
    if (UrlScheme(from) != UrlScheme(to))
      return Status::Config("cannot rename across schemes: " + RedactUrl(from) + " -> " +
                            RedactUrl(to));
    auto s = For(from);
    if (!s.ok()) return s.status();
    return (*s)->Rename(from, to);
  }
  Status Remove(const std::string& url) override { return Call(url, &Source::Remove); }
  Status CreateDir(const std::string& url) override { return Call(url, &Source::CreateDir); }
  Status RemoveDir(const std::string& url) override { return Call(url, &Source::RemoveDir); }
  Status SyncDir(const std::string& url) override { return Call(url, &Source::SyncDir); }

 private:
  Result<std::shared_ptr<Source>> For(const std::string& url) {
    std::string scheme = UrlScheme(url);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_scheme_.find(scheme);
    if (it == by_scheme_.end()) {
      return Status(StatusCode::kConfig,
                    "no source for scheme '" + scheme + "' in " + RedactUrl(url),
                    RedactUrl(url));
    }
    return it->second;
  }
  Status Call(const std::string& url, Status (Source::*fn)(const std::string&)) {
    auto s = For(url);
    if (!s.ok()) return s.status();
    return ((**s).*fn)(url);
  }

  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Source>> by_scheme_;
};

Router& GlobalRouter() {
  // Leaked on purpose: sources may be used from threads during static
  // destruction at interpreter exit.
  static Router* router = [] {
    auto* r = new Router();
    r->Register("file", LocalSource());
    r->Register("mem", NewMemorySource());
    // One client (one connection pool) for both schemes.
    std::shared_ptr<Source> http = NewHttpSource();
    r->Register("http", http);
    r->Register("https", http);
    r->Register("s3", internal::NewEnvironmentS3Source());
    r->Register("pipe", internal::NewPipeSource());
    return r;
  }();
  return *router;
}

}  // namespace

std::shared_ptr<Source> DefaultSource() {
  static std::shared_ptr<Source> shared(&GlobalRouter(), [](Source*) {});
  return shared;
}

void RegisterSource(const std::string& scheme, std::shared_ptr<Source> source) {
  GlobalRouter().Register(scheme, std::move(source));
}

}  // namespace shardstream
