#include "s3/s3_config.h"

#include "s3/aws_config_file.h"

namespace shardstream::internal {

Result<S3Options> ResolveS3Options(S3Options o) {
  const bool explicit_profile = !o.profile.empty();
  const std::string profile = explicit_profile ? o.profile : DefaultProfileName();
  AwsSharedFiles files = AwsSharedFiles::Load();
  if (o.endpoint.empty()) o.endpoint = ConfiguredEndpoint(files, profile, "s3");
  while (!o.endpoint.empty() && o.endpoint.back() == '/') o.endpoint.pop_back();
  if (o.region.empty()) o.region = ConfiguredRegion(files, profile);
  if (!o.path_style) {
    std::string style = files.ConfigValue(profile, "s3.addressing_style");
    if (style == "path") o.path_style = true;
    if (style == "virtual") o.path_style = false;
  }
  if (!o.path_style) o.path_style = !o.endpoint.empty();
  if (!o.access_key.empty() || !o.secret_key.empty()) {
    if (o.access_key.empty() || o.secret_key.empty()) {
      return Status::Config("S3Options: access_key and secret_key must be given together");
    }
    o.credentials = StaticAwsCredentials(
        AwsCredentials{o.access_key, o.secret_key, o.session_token, std::nullopt, "S3Options"});
  }
  if (!o.credentials) {
    AwsCredentialOptions c = o.credential_options;
    if (explicit_profile) c.profile = o.profile;
    c.region = o.region;
    c.http = o.http;
    o.credentials = DefaultAwsCredentialChain(std::move(c));
  }
  o.profile = profile;
  return o;
}

Result<S3Url> ParseS3Url(const std::string& url) {
  if (url.rfind("s3://", 0) != 0) return Status::Config("not an s3:// url: " + url);
  std::string rest = url.substr(5);
  size_t slash = rest.find('/');
  S3Url out;
  out.bucket = rest.substr(0, slash);
  if (slash != std::string::npos) out.key = rest.substr(slash + 1);
  if (out.bucket.empty()) return Status::Config("s3 url without a bucket: " + url);
  return out;
}

}  // namespace shardstream::internal
