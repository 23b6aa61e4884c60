#include "shardstream/url.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace shardstream {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Position of "://" when the text before it is a valid scheme, else npos.
size_t SchemeEnd(std::string_view url) {
  size_t p = url.find("://");
  if (p == std::string_view::npos || p == 0) return std::string_view::npos;
  for (size_t i = 0; i < p; ++i) {
    char c = url[i];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.'))
      return std::string_view::npos;
  }
  return p;
}

bool SecretParam(std::string_view name) {
  static constexpr std::array<std::string_view, 12> kNames = {
      "x-amz-signature", "x-amz-credential", "x-amz-security-token", "signature",
      "sig", "token", "access_token", "awsaccesskeyid", "x-goog-signature",
      "x-goog-credential", "password", "secret"};
  std::string n = Lower(name);
  return std::find(kNames.begin(), kNames.end(), n) != kNames.end();
}

}  // namespace

std::string UrlScheme(std::string_view url) {
  if (url.rfind("pipe:", 0) == 0) return "pipe";
  size_t p = SchemeEnd(url);
  if (p == std::string_view::npos) return "file";
  return Lower(url.substr(0, p));
}

std::string LocalPath(std::string_view url) {
  if (UrlScheme(url) != "file") return {};
  if (url.rfind("file://", 0) == 0) {
    std::string_view rest = url.substr(7);
    // file://localhost/path and file:///path
    if (rest.rfind("localhost/", 0) == 0) rest.remove_prefix(9);
    return std::string(rest);
  }
  return std::string(url);
}

std::string UrlDirname(std::string_view url) {
  std::string_view path = url.substr(0, url.find_first_of("?#"));
  size_t se = SchemeEnd(path);
  size_t min_slash = se == std::string_view::npos ? 0 : se + 3;
  size_t p = path.rfind('/');
  if (p == std::string_view::npos || p < min_slash) {
    return se == std::string_view::npos ? "." : std::string(path);
  }
  if (p == 0) return "/";
  return std::string(path.substr(0, p));
}

std::string UrlBasename(std::string_view url) {
  std::string_view path = url.substr(0, url.find_first_of("?#"));
  size_t p = path.rfind('/');
  return std::string(p == std::string_view::npos ? path : path.substr(p + 1));
}

std::string JoinUrl(std::string_view base_dir, std::string_view ref) {
  if (ref.empty()) return std::string(base_dir);
  if (SchemeEnd(ref) != std::string_view::npos || ref.rfind("pipe:", 0) == 0 || ref[0] == '/')
    return std::string(ref);
  std::string out(base_dir);
  if (out.empty() || out == ".") return std::string(ref);
  while (ref.rfind("./", 0) == 0) ref.remove_prefix(2);
  if (out.back() != '/') out += '/';
  out += ref;
  return out;
}

std::string RedactUrl(std::string_view url) {
  std::string out;
  out.reserve(url.size());
  size_t se = SchemeEnd(url);
  size_t i = 0;
  if (se != std::string_view::npos) {
    size_t auth_start = se + 3;
    size_t auth_end = url.find_first_of("/?#", auth_start);
    if (auth_end == std::string_view::npos) auth_end = url.size();
    std::string_view authority = url.substr(auth_start, auth_end - auth_start);
    size_t at = authority.rfind('@');
    out.append(url.substr(0, auth_start));
    if (at != std::string_view::npos) {
      std::string_view user = authority.substr(0, at);
      size_t colon = user.find(':');
      if (colon != std::string_view::npos) {
        out.append(user.substr(0, colon));
        out.append(":REDACTED");
      } else {
        out.append("REDACTED");
      }
      out.push_back('@');
      out.append(authority.substr(at + 1));
    } else {
      out.append(authority);
    }
    i = auth_end;
  }
  size_t q = url.find('?', i);
  if (q == std::string_view::npos) {
    out.append(url.substr(i));
    return out;
  }
  out.append(url.substr(i, q + 1 - i));
  size_t frag = url.find('#', q);
  std::string_view query = url.substr(q + 1, (frag == std::string_view::npos ? url.size() : frag) - q - 1);
  size_t start = 0;
  bool first = true;
  while (start <= query.size()) {
    size_t amp = query.find('&', start);
    if (amp == std::string_view::npos) amp = query.size();
    std::string_view kv = query.substr(start, amp - start);
    size_t eq = kv.find('=');
    std::string_view name = kv.substr(0, eq);
    if (!first) out.push_back('&');
    first = false;
    if (eq != std::string_view::npos && SecretParam(name)) {
      out.append(name);
      out.append("=REDACTED");
    } else {
      out.append(kv);
    }
    start = amp + 1;
  }
  if (frag != std::string_view::npos) out.append(url.substr(frag));
  return out;
}

namespace {
// The path of a url, lower case, without its query or trailing '/'.
std::string LowerPath(std::string_view url) {
  std::string path(url.substr(0, url.find('?')));
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  for (char& c : path) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return path;
}
bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

bool IsManifestUrl(std::string_view url) {
  const std::string p = LowerPath(url);
  return EndsWith(p, ".jsonl") || EndsWith(p, ".ndjson") || EndsWith(p, ".csv") ||
         EndsWith(p, ".json");
}

bool IsShardUrl(std::string_view url) {
  const std::string p = LowerPath(url);
  return EndsWith(p, ".tar") || EndsWith(p, ".tar.zst") || EndsWith(p, ".tar.zstd") ||
         EndsWith(p, ".tar.gz") || EndsWith(p, ".tgz");
}

bool WritesWholeObjects(std::string_view url) {
  const std::string scheme = UrlScheme(url);
  return scheme == "s3" || scheme == "http" || scheme == "https";
}

}  // namespace shardstream
