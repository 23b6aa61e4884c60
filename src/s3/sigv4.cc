#include "s3/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <memory>
#include <vector>

namespace shardstream::internal {
namespace {

std::string Hex(const unsigned char* p, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

std::string Hmac(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Python's ' '.join(value.split()): trims and collapses whitespace runs.
std::string TrimAll(std::string_view v) {
  std::string out;
  bool pending_space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(c);
  }
  return out;
}

bool Unsigned(const std::string& lname) {
  static const char* kSkip[] = {"authorization", "baggage", "connection", "expect",
                                "keep-alive", "proxy-authenticate", "proxy-authorization",
                                "te", "traceparent", "tracestate", "trailer",
                                "transfer-encoding", "upgrade", "user-agent",
                                "x-amzn-trace-id"};
  return std::find(std::begin(kSkip), std::end(kSkip), lname) != std::end(kSkip);
}

struct UrlParts {
  std::string scheme, host, path, query;
};

UrlParts SplitUrl(const std::string& url) {
  UrlParts p;
  size_t se = url.find("://");
  p.scheme = Lower(url.substr(0, se));
  size_t auth_start = se + 3;
  size_t path_start = url.find_first_of("/?#", auth_start);
  std::string authority = url.substr(auth_start, path_start == std::string::npos
                                                     ? std::string::npos
                                                     : path_start - auth_start);
  size_t at = authority.rfind('@');
  if (at != std::string::npos) authority = authority.substr(at + 1);
  // botocore: lower-case host; drop the port when it is the scheme's default.
  size_t colon = authority.rfind(':');
  std::string host = authority, port;
  if (colon != std::string::npos && authority.find(']') == std::string::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  host = Lower(host);
  if (!port.empty() && !((p.scheme == "http" && port == "80") ||
                         (p.scheme == "https" && port == "443")))
    host += ":" + port;
  p.host = host;
  if (path_start == std::string::npos) return p;
  std::string rest = url.substr(path_start);
  size_t hash = rest.find('#');
  if (hash != std::string::npos) rest.resize(hash);
  size_t q = rest.find('?');
  p.path = rest.substr(0, q);
  if (q != std::string::npos) p.query = rest.substr(q + 1);
  return p;
}

// botocore's _canonical_query_string_url: split on '&', partition on '=',
// sort the (key, value) pairs as given (already encoded).
std::string CanonicalQuery(const std::string& query) {
  if (query.empty()) return {};
  std::vector<std::pair<std::string, std::string>> pairs;
  size_t start = 0;
  while (true) {
    size_t amp = query.find('&', start);
    std::string kv = query.substr(start, amp == std::string::npos ? std::string::npos
                                                                  : amp - start);
    size_t eq = kv.find('=');
    pairs.emplace_back(kv.substr(0, eq), eq == std::string::npos ? "" : kv.substr(eq + 1));
    if (amp == std::string::npos) break;
    start = amp + 1;
  }
  std::sort(pairs.begin(), pairs.end());
  std::string out;
  for (const auto& [k, v] : pairs) {
    if (!out.empty()) out += '&';
    out += k + "=" + v;
  }
  return out;
}

}  // namespace

std::string Sha256Hex(std::string_view data) {
  unsigned char md[32];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  return Hex(md, len);
}

std::string Sha256HexOfFile(const std::string& path, uint64_t offset, uint64_t size) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f || std::fseek(f.get(), static_cast<long>(offset), SEEK_SET) != 0) return {};
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 16);
  while (size > 0) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(size, buf.size()));
    size_t got = std::fread(buf.data(), 1, want, f.get());
    if (got != want) return {};
    EVP_DigestUpdate(ctx.get(), buf.data(), got);
    size -= got;
  }
  unsigned char md[32];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  return Hex(md, len);
}

std::string S3UriEncode(std::string_view s, bool encode_slash) {
  static const char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() * 3);
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (c == '/' && !encode_slash)) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 15]);
    }
  }
  return out;
}

std::string AmzDate(std::chrono::system_clock::time_point t) {
  std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

SigV4Trace SignV4(HttpRequest& req, const AwsCredentials& creds, std::string_view region,
                  std::string_view service, std::string_view amz_date,
                  std::string_view payload_hash) {
  req.RemoveHeader("Authorization");
  req.SetHeader("X-Amz-Date", std::string(amz_date));
  if (!creds.session_token.empty()) req.SetHeader("X-Amz-Security-Token", creds.session_token);
  req.SetHeader("X-Amz-Content-SHA256", std::string(payload_hash));

  UrlParts url = SplitUrl(req.url);
  // Signed headers: lower-cased names, sorted; repeated names joined by ','.
  std::vector<std::pair<std::string, std::string>> signed_headers;
  bool has_host = false;
  for (const auto& [name, value] : req.headers) {
    std::string lname = Lower(name);
    if (Unsigned(lname)) continue;
    has_host |= lname == "host";
    auto it = std::find_if(signed_headers.begin(), signed_headers.end(),
                           [&](const auto& h) { return h.first == lname; });
    if (it == signed_headers.end()) {
      signed_headers.emplace_back(lname, TrimAll(value));
    } else {
      it->second += "," + TrimAll(value);
    }
  }
  if (!has_host) signed_headers.emplace_back("host", url.host);
  std::sort(signed_headers.begin(), signed_headers.end());
  std::string canonical_headers, signed_names;
  for (const auto& [name, value] : signed_headers) {
    canonical_headers += name + ":" + value + "\n";
    if (!signed_names.empty()) signed_names += ';';
    signed_names += name;
  }

  SigV4Trace t;
  t.canonical_request = req.method + "\n" + url.path + "\n" + CanonicalQuery(url.query) + "\n" +
                        canonical_headers + "\n" + signed_names + "\n" +
                        std::string(payload_hash);
  std::string date(amz_date.substr(0, 8));
  std::string scope = date + "/" + std::string(region) + "/" + std::string(service) +
                      "/aws4_request";
  t.string_to_sign = "AWS4-HMAC-SHA256\n" + std::string(amz_date) + "\n" + scope + "\n" +
                     Sha256Hex(t.canonical_request);
  std::string k = Hmac("AWS4" + creds.secret_key, date);
  k = Hmac(k, region);
  k = Hmac(k, service);
  k = Hmac(k, "aws4_request");
  std::string sig = Hmac(k, t.string_to_sign);
  t.signature = Hex(reinterpret_cast<const unsigned char*>(sig.data()), sig.size());
  req.SetHeader("Authorization", "AWS4-HMAC-SHA256 Credential=" + creds.access_key + "/" +
                                     scope + ", SignedHeaders=" + signed_names +
                                     ", Signature=" + t.signature);
  return t;
}

}  // namespace shardstream::internal
