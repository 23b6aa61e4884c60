// RAII owners for libcurl handles and the one-time global initialisation.
// The only place (with the other files in src/http/) that includes curl.
// Thread-safety: the handles are not thread-safe; EnsureCurlInitialized is.
#ifndef SHARDSTREAM_HTTP_CURL_UTIL_H_
#define SHARDSTREAM_HTTP_CURL_UTIL_H_

#include <curl/curl.h>

#include <memory>

namespace shardstream::internal {

struct CurlEasyDeleter {
  void operator()(CURL* h) const { curl_easy_cleanup(h); }
};
struct CurlMultiDeleter {
  void operator()(CURLM* h) const { curl_multi_cleanup(h); }
};
struct CurlSlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
struct CurlShareDeleter {
  void operator()(CURLSH* h) const { curl_share_cleanup(h); }
};
using CurlEasyPtr = std::unique_ptr<CURL, CurlEasyDeleter>;
using CurlMultiPtr = std::unique_ptr<CURLM, CurlMultiDeleter>;
using CurlSlistPtr = std::unique_ptr<curl_slist, CurlSlistDeleter>;
using CurlSharePtr = std::unique_ptr<CURLSH, CurlShareDeleter>;

// curl_global_init, once per process, on first use (not at load time, so a
// process that never touches the network pays nothing).
void EnsureCurlInitialized();

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_HTTP_CURL_UTIL_H_
