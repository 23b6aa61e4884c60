// S3Client: the S3 operations shardstream needs, signed with SigV4: object
// GET (streaming, resumable, ranged), HEAD, ListObjectsV2 (paginated), PUT,
// DELETE, and multipart upload (create, upload part, complete, abort, list)
// for the checkpoint uploader. Urls are "s3://bucket/key".
//
// Configuration comes from S3Options; fields left empty are filled as the
// AWS SDKs fill them: credentials from the default chain (environment,
// profiles with assume role, web identity, credential_process, container
// credentials, EC2 instance metadata; see aws_credentials.h), refreshed
// before they expire; region from AWS_REGION / AWS_DEFAULT_REGION or the
// profile; endpoint from AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL or the
// profile's endpoint_url (or its services section); addressing from the
// profile's "s3 = addressing_style = path|virtual".
// Errors: 403/SignatureDoesNotMatch/InvalidAccessKeyId -> kAuth,
// NoSuchKey/NoSuchBucket -> kNotFound, SlowDown and 5xx are retried, then
// kUnavailable. Secrets never appear in messages or logs.
//
// DefaultSource() routes "s3" to an S3 source built from the environment on
// first use (and rebuilt when the environment changes).
//
// Thread-safety: an S3Client may be used from many threads.
#ifndef SHARDSTREAM_S3_H_
#define SHARDSTREAM_S3_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardstream/aws_credentials.h"
#include "shardstream/export.h"
#include "shardstream/http_source.h"
#include "shardstream/result.h"
#include "shardstream/source.h"

namespace shardstream {

struct S3Options {
  // Endpoint url, e.g. "http://127.0.0.1:9000" (MinIO, moto, Ceph). Empty
  // means AWS: https://s3.<region>.amazonaws.com.
  // Default: AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else the profile's
  // services section (s3 = endpoint_url = ...), else its endpoint_url, else "".
  std::string endpoint;
  // Default: AWS_REGION, else AWS_DEFAULT_REGION, else the profile's region
  // in the config file, else "us-east-1".
  std::string region;
  // Fixed keys. Default: empty, so `credentials` supplies them.
  std::string access_key;
  std::string secret_key;
  std::string session_token;
  // Where credentials come from when access_key/secret_key are empty.
  // Default: DefaultAwsCredentialChain(credential_options).
  std::shared_ptr<AwsCredentialProvider> credentials;
  // Options of that chain; its profile, region and http are this struct's.
  // Default: AwsCredentialOptions defaults.
  AwsCredentialOptions credential_options;
  // Naming a profile here skips the environment's keys, as the SDKs do.
  // Default: AWS_PROFILE, else "default".
  std::string profile;
  // Path-style urls (endpoint/bucket/key) rather than virtual-hosted ones
  // (bucket.endpoint/key). Default: the profile's s3 addressing_style (path
  // or virtual), else true with a custom endpoint, else false.
  std::optional<bool> path_style;
  // Uploads larger than this use multipart upload. Default: 64 MiB.
  uint64_t multipart_threshold = uint64_t{64} << 20;
  // Part size for multipart uploads (S3 minimum 5 MiB). Default: 16 MiB.
  uint64_t part_size = uint64_t{16} << 20;
  // Keys per ListObjectsV2 page (S3 caps it at 1000). Default: 1000.
  int list_page_size = 1000;
  // Timeouts, retries, TLS. Default: HttpOptions defaults.
  HttpOptions http;
};

struct S3Upload {
  std::string key;
  std::string upload_id;
  int64_t initiated_unix_ms = 0;  // when it was created (0 if not reported)
};

struct S3Part {
  int number = 0;
  std::string etag;
};

class SHARDSTREAM_EXPORT S3Client {
 public:
  // Fills empty options from the environment and gets credentials once.
  // Fails with kAuth (naming the source tried) when none can be had.
  static Result<std::shared_ptr<S3Client>> Make(S3Options options = {});
  ~S3Client();

  const S3Options& options() const;
  // The http(s) url of an object (path-style or virtual-hosted).
  std::string HttpUrl(std::string_view bucket, std::string_view key) const;

  Result<FileInfo> Head(const std::string& url);
  // A resumable stream of the object from `offset`, pinned to its ETag;
  // expected_size and cancel as in HttpStreamOptions.
  Result<std::unique_ptr<InputStream>> Get(const std::string& url, uint64_t offset = 0,
                                           std::optional<uint64_t> expected_size = {},
                                           std::shared_ptr<const std::atomic<bool>> cancel = {});
  // Starts reading the object in the background (HttpSource::Prefetch);
  // Get(url) without a cancel flag continues that read.
  void Prefetch(const std::string& url);
  // Up to n bytes from offset (fewer at the end of the object).
  Result<std::string> GetRange(const std::string& url, uint64_t offset, size_t n);
  // Objects under a prefix url ("s3://bucket/dir/"); with recursive=false,
  // "subdirectories" (common prefixes) come back with is_dir set.
  Result<std::vector<FileInfo>> List(const std::string& prefix_url, bool recursive = false);
  Status Put(const std::string& url, std::string_view data);
  // Uploads size bytes of a local file: one PUT below multipart_threshold,
  // else a multipart upload (aborted on failure).
  Status PutFile(const std::string& url, const std::string& path);
  Status Delete(const std::string& url);
  Status CreateBucket(const std::string& bucket);

  // Multipart upload. Parts are numbered from 1; all but the last must be at
  // least 5 MiB on AWS.
  Result<std::string> CreateMultipartUpload(const std::string& url);
  // Returns the part's ETag.
  Result<std::string> UploadPart(const std::string& url, const std::string& upload_id,
                                 int part_number, std::string_view data);
  Result<std::string> UploadPartFromFile(const std::string& url, const std::string& upload_id,
                                         int part_number, const std::string& path,
                                         uint64_t offset, uint64_t size);
  Status CompleteMultipartUpload(const std::string& url, const std::string& upload_id,
                                 const std::vector<S3Part>& parts);
  Status AbortMultipartUpload(const std::string& url, const std::string& upload_id);
  // Uploads in progress under a prefix url ("s3://bucket/" or "s3://bucket/dir/").
  Result<std::vector<S3Upload>> ListMultipartUploads(const std::string& prefix_url);

  struct Impl;

 private:
  explicit S3Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// s3:// urls as a Source over a client. NewWritableFile spools to a
// temporary file and uploads on Close (multipart when large); Rename is not
// supported (write to the final key instead); directories are implicit.
SHARDSTREAM_EXPORT std::shared_ptr<Source> NewS3Source(std::shared_ptr<S3Client> client);

}  // namespace shardstream

#endif  // SHARDSTREAM_S3_H_
