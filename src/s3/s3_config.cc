#include "s3/s3_config.h"

#include <cstdlib>
#include <fstream>
#include <map>

namespace shardstream::internal {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// The key=value pairs of section [name] of an AWS ini file.
std::map<std::string, std::string> IniSection(const std::string& path, const std::string& name) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      inside = Trim(line.substr(1, line.size() - 2)) == name;
      continue;
    }
    size_t eq = line.find('=');
    if (inside && eq != std::string::npos) out[Trim(line.substr(0, eq))] = Trim(line.substr(eq + 1));
  }
  return out;
}

std::string HomeFile(const char* env, const char* rel) {
  std::string p = Env(env);
  if (!p.empty()) return p;
  std::string home = Env("HOME");
  return home.empty() ? std::string() : home + "/" + rel;
}

}  // namespace

Result<S3Options> ResolveS3Options(S3Options o) {
  if (o.profile.empty()) o.profile = Env("AWS_PROFILE");
  if (o.profile.empty()) o.profile = "default";
  if (o.endpoint.empty()) o.endpoint = Env("AWS_ENDPOINT_URL_S3");
  if (o.endpoint.empty()) o.endpoint = Env("AWS_ENDPOINT_URL");
  while (!o.endpoint.empty() && o.endpoint.back() == '/') o.endpoint.pop_back();
  if (o.region.empty()) o.region = Env("AWS_REGION");
  if (o.region.empty()) o.region = Env("AWS_DEFAULT_REGION");
  if (o.region.empty()) {
    std::string config = HomeFile("AWS_CONFIG_FILE", ".aws/config");
    auto section = IniSection(config, o.profile == "default" ? "default" : "profile " + o.profile);
    o.region = section["region"];
  }
  if (o.region.empty()) o.region = "us-east-1";
  if (o.access_key.empty() && o.secret_key.empty()) {
    o.access_key = Env("AWS_ACCESS_KEY_ID");
    o.secret_key = Env("AWS_SECRET_ACCESS_KEY");
    if (o.session_token.empty()) o.session_token = Env("AWS_SESSION_TOKEN");
  }
  if (o.access_key.empty() || o.secret_key.empty()) {
    std::string creds = HomeFile("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
    auto section = IniSection(creds, o.profile);
    o.access_key = section["aws_access_key_id"];
    o.secret_key = section["aws_secret_access_key"];
    o.session_token = section["aws_session_token"];
  }
  if (o.access_key.empty() || o.secret_key.empty()) {
    return Status::Auth(
        "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or add profile '" +
        o.profile + "' to the shared credentials file");
  }
  if (!o.path_style) o.path_style = !o.endpoint.empty();
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
