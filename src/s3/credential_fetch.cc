#include "s3/credential_fetch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/spawn.h"
#include "s3/aws_config_file.h"
#include "s3/s3_xml.h"
#include "s3/sigv4.h"
#include "shardstream/url.h"


namespace shardstream::internal {
namespace {

using Clock = std::chrono::system_clock;

std::string FormEncode(std::string_view s) { return S3UriEncode(s, true); }

// The STS error of a response: kAuth for 4xx, as HttpStatusError otherwise.
Status StsError(const HttpResponse& resp, const std::string& what, const std::string& url) {
  std::string code = XmlText(resp.body, "Code");
  std::string message = XmlText(resp.body, "Message");
  std::string detail = code.empty() ? "" : code + (message.empty() ? "" : ": " + message);
  Status s = HttpStatusError(resp.status, "POST", url, detail);
  StatusCode kind = resp.status >= 400 && resp.status < 500 && resp.status != 408 &&
                            resp.status != 429
                        ? StatusCode::kAuth
                        : s.code();
  return Status(kind, what + ": " + s.message(), s.url());
}

Result<AwsCredentials> StsCall(HttpClient& http, const StsRequest& r, const std::string& action,
                               const std::string& extra_params, const AwsCredentials* signer,
                               const std::string& what) {
  HttpRequest req;
  req.method = "POST";
  req.url = r.endpoint + "/";
  req.body = "Action=" + action + "&Version=2011-06-15&RoleArn=" + FormEncode(r.role_arn) +
             "&RoleSessionName=" + FormEncode(r.session_name) + extra_params;
  if (r.duration_seconds) req.body += "&DurationSeconds=" + std::to_string(*r.duration_seconds);
  req.SetHeader("Content-Type", "application/x-www-form-urlencoded; charset=utf-8");
  RequestSigner sign;
  if (signer) {
    std::string hash = Sha256Hex(req.body);
    sign = [creds = *signer, region = r.region, hash](HttpRequest& q) {
      SignV4(q, creds, region, "sts", AmzDate(Clock::now()), hash);
      return Status::OK();
    };
  }
  // STS answers throttling (and a slow identity provider) with 400: retried
  // as botocore does, with the client's backoff.
  HttpResponse answer;
  for (int attempt = 0;; ++attempt) {
    Result<HttpResponse> sent = http.Send(req, sign, 1 << 20);
    if (!sent.ok()) return sent.status().WithContext(what);
    answer = std::move(*sent);
    const std::string code = answer.status == 400 ? XmlText(answer.body, "Code") : std::string();
    const bool throttled = code == "Throttling" || code == "ThrottlingException" ||
                           code == "IDPCommunicationError" || code == "RequestLimitExceeded";
    if (!throttled || attempt >= http.options().max_retries) break;
    Log().debug("{}: STS answered {}, retrying", what, code);
    BackoffSleep(http.options(), attempt, &answer);
  }
  const HttpResponse* resp = &answer;
  if (resp->status >= 300) return StsError(*resp, what, req.url);
  AwsCredentials c;
  c.access_key = XmlText(resp->body, "AccessKeyId");
  c.secret_key = XmlText(resp->body, "SecretAccessKey");
  c.session_token = XmlText(resp->body, "SessionToken");
  std::string exp = XmlText(resp->body, "Expiration");
  c.expiration = ParseIso8601Time(exp);
  if (c.access_key.empty() || c.secret_key.empty() || c.session_token.empty() || !c.expiration) {
    return Status(StatusCode::kAuth,
                  what + ": STS " + action + " at " + RedactUrl(req.url) +
                      " answered without AccessKeyId, SecretAccessKey, SessionToken and a "
                      "valid Expiration",
                  RedactUrl(req.url));
  }
  return c;
}

std::string ReadSmallFile(const std::string& path, Status* error, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = Status(StatusCode::kAuth, what + ": cannot read " + path + ": " +
                                           std::strerror(errno));
    return {};
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A metadata GET/PUT; errors name `what` and the url.
Result<HttpResponse> MetadataRequest(HttpClient& http, HttpRequest req, const std::string& what) {
  auto resp = http.Send(req, {}, 1 << 20);
  if (!resp.ok()) {
    return Status(resp.status().code(), what + ": " + resp.status().message(),
                  resp.status().url());
  }
  return resp;
}

}  // namespace

std::optional<Clock::time_point> ParseIso8601Time(const std::string& text) {
  std::tm tm{};
  const char* end = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end) end = strptime(text.c_str(), "%Y-%m-%d %H:%M:%S", &tm);
  if (!end) return std::nullopt;
  std::string rest(end);
  if (!rest.empty() && rest[0] == '.') {  // fractions of a second: ignored
    size_t i = 1;
    while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i]))) ++i;
    rest = rest.substr(i);
  }
  int64_t offset_s = 0;
  if (rest == "Z" || rest == "z" || rest.empty()) {
  } else if ((rest[0] == '+' || rest[0] == '-') && (rest.size() == 6 || rest.size() == 5)) {
    // +hh:mm or +hhmm
    int h = 0, m = 0;
    const bool colon = rest.size() == 6;
    if (colon && rest[3] != ':') return std::nullopt;
    for (size_t i = 1; i < rest.size(); ++i)
      if (i != 3 || !colon)
        if (!std::isdigit(static_cast<unsigned char>(rest[i]))) return std::nullopt;
    h = std::stoi(rest.substr(1, 2));
    m = std::stoi(rest.substr(colon ? 4 : 3, 2));
    offset_s = (rest[0] == '+' ? 1 : -1) * (h * 3600 + m * 60);
  } else {
    return std::nullopt;
  }
  const int64_t t = static_cast<int64_t>(timegm(&tm)) - offset_s;
  // Past what the clock can hold (year 2262 in nanoseconds): never expires.
  const int64_t max_s = std::chrono::duration_cast<std::chrono::seconds>(
                            Clock::time_point::max().time_since_epoch()).count() - 86400;
  if (t >= max_s) return Clock::time_point::max();
  return Clock::time_point(std::chrono::seconds(t));
}

std::string FormatIso8601(Clock::time_point t) {
  time_t tt = Clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Result<AwsCredentials> CredentialsFromJson(const std::string& body, const std::string& what,
                                           bool require_expiration) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
    // Never echo the body: it may hold a secret.
    return Status::Auth(what + ": the response is not JSON (error at byte " +
                        std::to_string(e.byte) + " of " + std::to_string(body.size()) + ")");
  }
  if (!j.is_object()) return Status::Auth(what + ": the response is not a JSON object");
  auto text = [&](const char* key) -> std::string {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  std::string code = text("Code");
  if (!code.empty() && code != "Success") {
    return Status::Auth(what + ": the response says Code " + code);
  }
  AwsCredentials c;
  c.access_key = text("AccessKeyId");
  c.secret_key = text("SecretAccessKey");
  c.session_token = text("Token");
  if (c.session_token.empty()) c.session_token = text("SessionToken");
  for (auto [key, value] : {std::pair<const char*, const std::string*>{"AccessKeyId", &c.access_key},
                            {"SecretAccessKey", &c.secret_key}}) {
    if (value->empty()) return Status::Auth(what + ": the response has no " + key);
  }
  std::string exp = text("Expiration");
  if (!exp.empty()) {
    c.expiration = ParseIso8601Time(exp);
    if (!c.expiration) return Status::Auth(what + ": Expiration '" + exp + "' is not ISO 8601");
    if (*c.expiration <= Clock::now()) {
      return Status::Auth(what + ": the credentials returned expired at " + exp);
    }
  } else if (require_expiration) {
    return Status::Auth(what + ": the response has no Expiration");
  }
  return c;
}

Result<AwsCredentials> StsAssumeRole(HttpClient& http, const StsRequest& r,
                                     const AwsCredentials& source) {
  std::string extra;
  if (!r.external_id.empty()) extra += "&ExternalId=" + FormEncode(r.external_id);
  return StsCall(http, r, "AssumeRole", extra, &source,
                 "assume role " + r.role_arn + " with STS at " + RedactUrl(r.endpoint));
}

Result<AwsCredentials> StsAssumeRoleWithWebIdentity(HttpClient& http, const StsRequest& r,
                                                    const std::string& token_file) {
  const std::string what = "web identity (token file " + token_file + ", role " + r.role_arn + ")";
  Status error;
  std::string token = Trim(ReadSmallFile(token_file, &error, what));
  if (!error.ok()) return error;
  if (token.empty()) return Status::Auth(what + ": the token file is empty");
  return StsCall(http, r, "AssumeRoleWithWebIdentity", "&WebIdentityToken=" + FormEncode(token),
                 nullptr, what + " with STS at " + RedactUrl(r.endpoint));
}

std::shared_ptr<HttpClient> MetadataHttpClient(const MetadataSettings& s) {
  HttpOptions o;
  o.connect_timeout_s = s.timeout_s;
  o.low_speed_time_s = std::max(1L, static_cast<long>(std::ceil(s.timeout_s)));
  o.max_retries = std::max(0, s.attempts - 1);
  o.initial_backoff_s = 0.05;
  o.max_backoff_s = 1;
  o.max_retry_after_s = 1;
  o.max_redirects = 0;
  return std::make_shared<HttpClient>(o);
}

Result<AwsCredentials> FetchInstanceMetadata(HttpClient& http, const std::string& endpoint,
                                             bool v1_disabled) {
  const std::string what = "instance metadata at " + RedactUrl(endpoint);
  HttpRequest put;
  put.method = "PUT";
  put.url = endpoint + "/latest/api/token";
  put.SetHeader("X-aws-ec2-metadata-token-ttl-seconds", "21600");
  Result<HttpResponse> got = MetadataRequest(http, put, what);
  // A token request that times out or cannot connect (a container on EC2
  // whose hop limit is 1) falls back to IMDSv1, as botocore does.
  if (!got.ok() && (got.status().code() != StatusCode::kUnavailable || v1_disabled)) {
    return got.status();
  }
  HttpResponse tok = got.ok() ? std::move(*got) : HttpResponse{405, {}, {}};
  std::string token;
  if (tok.status == 200) {
    token = Trim(tok.body);
  } else if (tok.status == 403 || tok.status == 404 || tok.status == 405) {
    if (v1_disabled) {
      return Status::Auth(what + ": the IMDSv2 token was refused (HTTP " +
                          std::to_string(tok.status) +
                          ") and AWS_EC2_METADATA_V1_DISABLED forbids IMDSv1");
    }
  } else {
    return HttpStatusError(tok.status, "PUT", put.url).WithContext(what);
  }
  auto get = [&](const std::string& path) -> Result<std::string> {
    HttpRequest req;
    req.url = endpoint + path;
    if (!token.empty()) req.SetHeader("X-aws-ec2-metadata-token", token);
    SHARDSTREAM_ASSIGN_OR_RETURN(HttpResponse r, MetadataRequest(http, req, what));
    if (r.status != 200) {
      Status s = HttpStatusError(r.status, "GET", req.url);
      return Status(r.status == 404 ? StatusCode::kAuth : s.code(), what + ": " + s.message(),
                    s.url());
    }
    return std::move(r.body);
  };
  const std::string base = "/latest/meta-data/iam/security-credentials/";
  SHARDSTREAM_ASSIGN_OR_RETURN(std::string roles, get(base));
  std::string role = Trim(roles.substr(0, roles.find('\n')));
  if (role.empty()) return Status::Auth(what + ": no IAM role is attached to the instance");
  SHARDSTREAM_ASSIGN_OR_RETURN(std::string body, get(base + S3UriEncode(role, true)));
  return CredentialsFromJson(body, what + " (role " + role + ")", true);
}

Result<std::string> ContainerCredentialsUrl(const std::string& relative_uri,
                                            const std::string& full_uri) {
  if (!relative_uri.empty()) return "http://169.254.170.2" + relative_uri;
  if (full_uri.empty()) return std::string();
  if (full_uri.rfind("https://", 0) == 0) return full_uri;
  if (full_uri.rfind("http://", 0) != 0) {
    return Status::Config("AWS_CONTAINER_CREDENTIALS_FULL_URI " + RedactUrl(full_uri) +
                          " is neither http:// nor https://");
  }
  std::string rest = full_uri.substr(7);
  std::string host = rest.substr(0, rest.find_first_of("/?#"));
  if (!host.empty() && host[0] == '[') {
    host = host.substr(0, host.find(']') + 1);
  } else {
    host = host.substr(0, host.find(':'));
  }
  // The SDKs allow plain http only to the machine itself (a loopback
  // address, not a name that starts like one) or the ECS/EKS agents.
  in_addr v4{};
  const bool loopback_v4 = ::inet_pton(AF_INET, host.c_str(), &v4) == 1 &&
                           (ntohl(v4.s_addr) >> 24) == 127;
  bool allowed = host == "localhost" || loopback_v4 || host == "[::1]" ||
                 host == "169.254.170.2" || host == "169.254.170.23" || host == "[fd00:ec2::23]";
  if (!allowed) {
    return Status::Config("AWS_CONTAINER_CREDENTIALS_FULL_URI " + RedactUrl(full_uri) +
                          ": plain http is allowed only to loopback, 169.254.170.2, "
                          "169.254.170.23 or fd00:ec2::23");
  }
  return full_uri;
}

Result<AwsCredentials> FetchContainerCredentials(HttpClient& http, const std::string& url,
                                                 const std::string& token_file,
                                                 const std::string& token_env) {
  const std::string what = "container credentials at " + RedactUrl(url);
  std::string token = token_env;
  if (!token_file.empty()) {
    Status error;
    token = Trim(ReadSmallFile(token_file, &error,
                                    what + " (AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE)"));
    if (!error.ok()) return error;
  }
  if (token.find_first_of("\r\n") != std::string::npos) {
    return Status::Config(what + ": the authorization token holds a line break");
  }
  HttpRequest req;
  req.url = url;
  if (!token.empty()) req.SetHeader("Authorization", token);
  SHARDSTREAM_ASSIGN_OR_RETURN(HttpResponse resp, MetadataRequest(http, req, what));
  if (resp.status != 200) {
    return HttpStatusError(resp.status, "GET", url).WithContext(what);
  }
  return CredentialsFromJson(resp.body, what, false);
}

Result<AwsCredentials> RunCredentialProcess(const std::string& command, const std::string& what_in,
                                            double timeout_s) {
  // The command may carry secrets in its arguments or in variables set in
  // front of it: name only its program.
  std::string program;
  {
    std::istringstream words(command);
    std::string w;
    while (words >> w)
      if (w.find('=') == std::string::npos) {
        program = w;
        break;
      }
  }
  const std::string what = what_in + " (credential_process " + program + ")";
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return Status::FromErrno(errno, what + ": pipe");
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return Status::FromErrno(errno, what + ": pipe");
  }
  const pid_t pid = SpawnShell(command, out[1], err[1]);
  const int rc = pid < 0 ? -pid : 0;
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    ::close(out[0]);
    ::close(err[0]);
    return Status::FromErrno(rc, what + ": spawn");
  }
  std::string stdout_text, stderr_text;
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  bool timed_out = false;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open = 2;
  while (open > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    int n = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t got = ::read(fds[i].fd, buf, sizeof(buf));
      if (got > 0) {
        std::string& dst = i == 0 ? stdout_text : stderr_text;
        if (dst.size() < (1 << 20)) dst.append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  // A child that closed its output may still run: wait until the deadline.
  int status = 0;
  while (!timed_out) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (timed_out) {
    ::kill(-pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (timed_out) {
    return Status::Auth(what + ": still running after " + std::to_string(timeout_s) +
                        " s, killed");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string err_line = Trim(stderr_text);
    err_line = err_line.substr(0, err_line.find('\n')).substr(0, 200);
    return Status::Auth(what + ": exited with " +
                        (WIFEXITED(status) ? "status " + std::to_string(WEXITSTATUS(status))
                                           : "signal " + std::to_string(WTERMSIG(status))) +
                        (err_line.empty() ? "" : ": " + err_line));
  }
  try {
    auto j = nlohmann::json::parse(stdout_text);
    if (!j.is_object() || !j.contains("Version") || j["Version"] != 1) {
      return Status::Auth(what + ": the output lacks \"Version\": 1");
    }
  } catch (const nlohmann::json::parse_error&) {
    // CredentialsFromJson reports it below.
  }
  return CredentialsFromJson(stdout_text, what, false);
}

}  // namespace shardstream::internal
