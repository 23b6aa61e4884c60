#include "http/ca_bundle.h"

#include <curl/curl.h>
#include <sys/stat.h>

namespace shardstream::internal {
namespace {

bool IsFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

const std::vector<std::string>& KnownCaBundles() {
  static const std::vector<std::string> known = {
      "/etc/ssl/certs/ca-certificates.crt",                 // Debian, Ubuntu, Arch, Gentoo
      "/etc/pki/tls/certs/ca-bundle.crt",                   // RHEL, Rocky, Fedora, Amazon Linux
      "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  // RHEL 7 and later
      "/etc/ssl/ca-bundle.pem",                             // SUSE
      "/etc/ssl/cert.pem",                                  // Alpine
  };
  return known;
}

std::string FallbackCaBundle(const char* curl_default, const std::vector<std::string>& known) {
  if (curl_default != nullptr && *curl_default != '\0' && IsFile(curl_default)) return "";
  for (const auto& path : known) {
    if (IsFile(path)) return path;
  }
  return "";
}

const std::string& SystemCaBundle() {
  static const std::string bundle =
      FallbackCaBundle(curl_version_info(CURLVERSION_NOW)->cainfo, KnownCaBundles());
  return bundle;
}

}  // namespace shardstream::internal
