// Which PEM file of trusted CAs a transfer uses when the options name none.
// The wheels bundle a libcurl built on Debian, whose compiled-in bundle path
// (/etc/ssl/certs/ca-certificates.crt) does not exist on RHEL, Rocky, Amazon
// Linux or SUSE: there the system's own bundle is found where the
// distribution keeps it: the first of the places Go's crypto/x509 also
// searches that exists.
#ifndef SHARDSTREAM_HTTP_CA_BUNDLE_H_
#define SHARDSTREAM_HTTP_CA_BUNDLE_H_

#include <string>
#include <vector>

#include "shardstream/export.h"

namespace shardstream::internal {

// Where distributions keep their CA bundle, most common first.
SHARDSTREAM_EXPORT const std::vector<std::string>& KnownCaBundles();

// "" when the library's compiled-in bundle (curl_default; null or "" when it
// has none) exists, since libcurl then finds it itself; otherwise the first of
// `known` that exists; "" when none does (libcurl's CA path, if any, decides).
SHARDSTREAM_EXPORT std::string FallbackCaBundle(const char* curl_default,
                                                const std::vector<std::string>& known);

// FallbackCaBundle for this process's libcurl and KnownCaBundles(), found once.
const std::string& SystemCaBundle();

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_HTTP_CA_BUNDLE_H_
