// Resolving S3Options from the environment and the shared AWS files, and
// parsing s3:// urls. Internal to the s3 module.
#ifndef SHARDSTREAM_S3_S3_CONFIG_H_
#define SHARDSTREAM_S3_S3_CONFIG_H_

#include <string>

#include "shardstream/result.h"
#include "shardstream/s3.h"

namespace shardstream::internal {

// Fills the empty fields of `options` (see S3Options); `credentials` is set
// afterwards (fixed keys, or the chain), not yet asked for credentials.
Result<S3Options> ResolveS3Options(S3Options options);

struct S3Url {
  std::string bucket;
  std::string key;  // may be empty (bucket root) or end in '/'
};
// "s3://bucket/key" -> {bucket, key}; kConfig for anything else.
Result<S3Url> ParseS3Url(const std::string& url);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_S3_S3_CONFIG_H_
