// s3:// urls as a Source over an S3Client, and the environment-configured
// one DefaultSource() uses.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "s3/aws_config_file.h"
#include "s3/s3_config.h"
#include "sources/spool_file.h"
#include "shardstream/s3.h"
#include "sources/builtin_sources.h"

namespace shardstream {
namespace {

class S3RandomAccessFile final : public RandomAccessFile {
 public:
  S3RandomAccessFile(std::shared_ptr<S3Client> client, std::string url)
      : client_(std::move(client)), url_(std::move(url)) {}
  const std::string& url() const override { return url_; }
  Result<uint64_t> Size() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!size_) {
      SHARDSTREAM_ASSIGN_OR_RETURN(FileInfo info, client_->Head(url_));
      size_ = info.size;
    }
    return *size_;
  }
  Result<size_t> ReadAt(uint64_t offset, size_t n, void* out) override {
    SHARDSTREAM_ASSIGN_OR_RETURN(std::string data, client_->GetRange(url_, offset, n));
    size_t k = std::min(n, data.size());
    std::memcpy(out, data.data(), k);
    return k;
  }

 private:
  std::shared_ptr<S3Client> client_;
  std::string url_;
  std::mutex mu_;
  std::optional<uint64_t> size_;
};

// Spools to a temporary file; Close uploads it (multipart when large).
class S3WritableFile final : public WritableFile {
 public:
  S3WritableFile(std::shared_ptr<S3Client> client, std::string url)
      : client_(std::move(client)), url_(std::move(url)) {}
  ~S3WritableFile() override { (void)Abort(); }
  Status Open() { return spool_.Create("shardstream-s3put"); }
  const std::string& url() const override { return url_; }
  Status Append(std::string_view data) override {
    if (!spool_.open()) return Status::Config("Append after Close/Abort: " + url_);
    return spool_.Append(data);
  }
  Status Sync() override { return Status::OK(); }
  Status Close() override {
    if (!spool_.open()) return Status::OK();
    Status s = client_->PutFile(url_, spool_.path());
    spool_.Discard();
    return s;
  }
  Status Abort() override {
    spool_.Discard();
    return Status::OK();
  }

 private:
  std::shared_ptr<S3Client> client_;
  std::string url_;
  internal::SpoolFile spool_;
};

class S3Source final : public Source {
 public:
  explicit S3Source(std::shared_ptr<S3Client> client) : client_(std::move(client)) {}

  Result<std::unique_ptr<RandomAccessFile>> OpenRandomAccess(const std::string& url) override {
    SHARDSTREAM_RETURN_IF_ERROR(internal::ParseS3Url(url).status());
    return std::unique_ptr<RandomAccessFile>(new S3RandomAccessFile(client_, url));
  }
  Result<std::unique_ptr<InputStream>> OpenInputStream(const std::string& url,
                                                       uint64_t offset) override {
    return client_->Get(url, offset);
  }
  Result<std::unique_ptr<InputStream>> OpenInputStreamWith(const std::string& url,
                                                           const StreamOptions& options) override {
    return client_->Get(url, options.offset, options.expected_size, options.cancel);
  }
  void Prefetch(const std::string& url) override { client_->Prefetch(url); }
  Result<FileInfo> Stat(const std::string& url) override { return client_->Head(url); }
  Result<std::vector<FileInfo>> List(const std::string& url) override {
    std::string prefix = url;
    auto loc = internal::ParseS3Url(url);
    if (loc.ok() && !loc->key.empty() && prefix.back() != '/') prefix += '/';
    return client_->List(prefix, false);
  }
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& url) override {
    SHARDSTREAM_RETURN_IF_ERROR(internal::ParseS3Url(url).status());
    auto file = std::make_unique<S3WritableFile>(client_, url);
    SHARDSTREAM_RETURN_IF_ERROR(file->Open());
    return std::unique_ptr<WritableFile>(std::move(file));
  }
  Status Remove(const std::string& url) override { return client_->Delete(url); }
  Status CreateDir(const std::string&) override { return Status::OK(); }
  Status SyncDir(const std::string&) override { return Status::OK(); }

 private:
  std::shared_ptr<S3Client> client_;
};

// DefaultSource's "s3": a client from the environment, made on first use and
// remade when the environment or the shared files change (tests, long-lived
// processes whose configuration changes). The client's credential chain
// refreshes temporary credentials itself.
class EnvironmentS3Source final : public Source {
 public:
  Result<std::unique_ptr<RandomAccessFile>> OpenRandomAccess(const std::string& url) override {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto s, Current());
    return s->OpenRandomAccess(url);
  }
  Result<std::unique_ptr<InputStream>> OpenInputStream(const std::string& url,
                                                       uint64_t offset) override {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto s, Current());
    return s->OpenInputStream(url, offset);
  }
  Result<std::unique_ptr<InputStream>> OpenInputStreamWith(const std::string& url,
                                                           const StreamOptions& options) override {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto s, Current());
    return s->OpenInputStreamWith(url, options);
  }
  void Prefetch(const std::string& url) override {
    if (auto s = Current(); s.ok()) (*s)->Prefetch(url);
  }
  Result<FileInfo> Stat(const std::string& url) override {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto s, Current());
    return s->Stat(url);
  }
  Result<std::vector<FileInfo>> List(const std::string& url) override {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto s, Current());
    return s->List(url);
  }
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& url) override {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto s, Current());
    return s->NewWritableFile(url);
  }
  Status Rename(const std::string& from, const std::string& to) override {
    return Status::Config("Rename is not supported for s3:// urls (" + from + " -> " + to +
                          "); write to the final key");
  }
  Status Remove(const std::string& url) override {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto s, Current());
    return s->Remove(url);
  }
  Status CreateDir(const std::string&) override { return Status::OK(); }
  Status RemoveDir(const std::string&) override { return Status::OK(); }
  Status SyncDir(const std::string&) override { return Status::OK(); }

 private:
  Result<std::shared_ptr<Source>> Current() {
    std::string key = Fingerprint();
    std::lock_guard<std::mutex> lock(mu_);
    if (!source_ || key != key_) {
      SHARDSTREAM_ASSIGN_OR_RETURN(auto client, S3Client::Make());
      source_ = NewS3Source(std::move(client));
      key_ = std::move(key);
    }
    return source_;
  }
  // Every variable and file the chain and the options read; cheap, so it is
  // taken on every call.
  static std::string Fingerprint() {
    static const char* const kVars[] = {
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
        "AWS_CREDENTIAL_EXPIRATION", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION",
        "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_STS",
        "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
        "AWS_EC2_METADATA_DISABLED", "AWS_EC2_METADATA_SERVICE_ENDPOINT",
        "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "AWS_EC2_METADATA_V1_DISABLED",
        "AWS_METADATA_SERVICE_TIMEOUT", "AWS_METADATA_SERVICE_NUM_ATTEMPTS", "HOME"};
    std::string key;
    for (const char* v : kVars) {
      const char* value = std::getenv(v);
      key += value ? std::string(value) + '\x1f' : std::string("\x1e");
    }
    for (const std::string& path :
         {internal::AwsSharedFiles::ConfigPath(), internal::AwsSharedFiles::CredentialsPath()}) {
      struct stat st {};
      if (::stat(path.c_str(), &st) == 0) {
        key += std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) +
               "/" + std::to_string(st.st_size) + "/" + std::to_string(st.st_ino);
      }
      key += '\x1d';
    }
    return key;
  }

  std::mutex mu_;
  std::string key_;
  std::shared_ptr<Source> source_;
};

}  // namespace

std::shared_ptr<Source> NewS3Source(std::shared_ptr<S3Client> client) {
  return std::make_shared<S3Source>(std::move(client));
}

namespace internal {
std::shared_ptr<Source> NewEnvironmentS3Source() { return std::make_shared<EnvironmentS3Source>(); }
}  // namespace internal

}  // namespace shardstream
