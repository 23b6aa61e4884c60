// MultipartSink over S3Client: the checkpoint uploader's multipart path for
// s3:// remotes. Each part is signed with its SHA-256 (x-amz-content-sha256),
// which S3 checks before accepting it; the part's ETag is additionally
// compared with the MD5 of the bytes sent where the server reports a plain
// MD5 ETag (not with SSE-KMS), so a part damaged in between is retried.
#include <openssl/evp.h>

#include <cctype>
#include <cstdio>

#include "s3/s3_config.h"
#include "shardstream/s3.h"
#include "shardstream/uploader.h"
#include "shardstream/url.h"

namespace shardstream {
namespace {

std::string Md5Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_md5(), nullptr);
  std::string hex;
  char b[3];
  for (unsigned int i = 0; i < len; ++i) {
    std::snprintf(b, sizeof(b), "%02x", md[i]);
    hex += b;
  }
  return hex;
}

// "\"abc...\"" -> "abc..." (lower case); empty unless 32 hex digits.
std::string PlainMd5Etag(std::string etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"')
    etag = etag.substr(1, etag.size() - 2);
  if (etag.size() != 32) return "";
  for (auto& c : etag) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!std::isxdigit(static_cast<unsigned char>(c))) return "";
  }
  return etag;
}

class S3MultipartSink final : public MultipartSink {
 public:
  explicit S3MultipartSink(std::shared_ptr<S3Client> client) : client_(std::move(client)) {}

  Result<std::string> Create(const std::string& url) override {
    return client_->CreateMultipartUpload(url);
  }

  Result<std::string> UploadPart(const std::string& url, const std::string& upload_id, int number,
                                 std::string_view data) override {
    SHARDSTREAM_ASSIGN_OR_RETURN(std::string etag,
                                 client_->UploadPart(url, upload_id, number, data));
    if (etag.empty())
      return Status::Corrupt("UploadPart " + RedactUrl(url) + " part " + std::to_string(number) +
                             ": no ETag in reply");
    std::string md5 = PlainMd5Etag(etag);
    if (!md5.empty() && md5 != Md5Hex(data)) {
      return Status(StatusCode::kChecksum,
                    "UploadPart " + RedactUrl(url) + " part " + std::to_string(number) +
                        ": the server's ETag " + etag + " is not the MD5 of the bytes sent",
                    RedactUrl(url));
    }
    return etag;
  }

  Status Complete(const std::string& url, const std::string& upload_id,
                  const std::vector<std::string>& etags) override {
    std::vector<S3Part> parts;
    for (size_t i = 0; i < etags.size(); ++i) parts.push_back({static_cast<int>(i + 1), etags[i]});
    return client_->CompleteMultipartUpload(url, upload_id, parts);
  }

  Status Abort(const std::string& url, const std::string& upload_id) override {
    Status s = client_->AbortMultipartUpload(url, upload_id);
    // Already completed or aborted (a retried abort): nothing left to do.
    return s.code() == StatusCode::kNotFound ? Status::OK() : s;
  }

  Result<std::vector<Pending>> ListPending(const std::string& prefix) override {
    std::string p = prefix;
    if (!p.empty() && p.back() != '/') p += '/';
    SHARDSTREAM_ASSIGN_OR_RETURN(auto loc, internal::ParseS3Url(p));
    const std::string bucket_url = "s3://" + loc.bucket + "/";
    // The whole bucket's uploads, filtered here: a prefix in the query is
    // not signed the way some S3 implementations (moto) check it.
    SHARDSTREAM_ASSIGN_OR_RETURN(auto uploads, client_->ListMultipartUploads(bucket_url));
    std::vector<Pending> out;
    for (auto& u : uploads)
      if (u.key.rfind(loc.key, 0) == 0)
        out.push_back({bucket_url + u.key, u.upload_id, u.initiated_unix_ms});
    return out;
  }

 private:
  std::shared_ptr<S3Client> client_;
};

}  // namespace

std::shared_ptr<MultipartSink> NewS3MultipartSink(std::shared_ptr<S3Client> client) {
  return std::make_shared<S3MultipartSink>(std::move(client));
}

}  // namespace shardstream
