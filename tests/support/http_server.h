// Real servers on loopback for the network tests: our fault-injecting Python
// server (tests/servers/http_server.py), Debian's nginx, and moto's S3 with
// SigV4 authentication enforced. Each starts in its constructor (throwing
// std::runtime_error when it cannot) and is killed and reaped in its
// destructor.
#ifndef SHARDSTREAM_TESTS_SUPPORT_HTTP_SERVER_H_
#define SHARDSTREAM_TESTS_SUPPORT_HTTP_SERVER_H_

#include <sys/types.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/test_util.h"

namespace shardstream::testing {

// A child process; stdout is captured through a pipe.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv,
               const std::map<std::string, std::string>& env = {});
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // Reads stdout until a line starting with `prefix`; returns the line.
  std::string WaitForLine(const std::string& prefix, double timeout_s);
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string pending_;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
int FreePort();
// Waits until something accepts connections on 127.0.0.1:port.
bool WaitForPort(int port, double timeout_s);

// tests/servers/http_server.py serving `root`.
class HttpTestServer {
 public:
  explicit HttpTestServer(const std::string& root, const std::vector<std::string>& args = {});
  int port() const { return port_; }
  std::string Url(const std::string& path) const;  // path starts with '/'
  // Adds fault rules (a JSON object or array, see http_server.py).
  void AddFault(const nlohmann::json& rule);
  void ClearFaults();
  // The request log so far, one object per request.
  std::vector<nlohmann::json> Requests() const;
  void ClearLog() const;

 private:
  TempDir dir_;
  std::string log_;
  std::unique_ptr<ChildProcess> proc_;
  int port_ = 0;
};

// nginx (nginx-light) serving `root` with a generated config; no root needed.
// `directives` go into the server block (e.g. "limit_rate 25m;", a store's
// per-connection cap).
class NginxServer {
 public:
  explicit NginxServer(const std::string& root, const std::string& directives = "");
  int port() const { return port_; }
  std::string Url(const std::string& path) const;

 private:
  bool Start(const std::string& root, const std::string& directives);
  TempDir dir_;
  std::unique_ptr<ChildProcess> proc_;
  int port_ = 0;
};

// moto's S3, STS and IAM server (tests/servers/moto_server.py: web identity
// calls unsigned, expired temporary credentials refused, as AWS does) with
// authentication enforced from the first request. An IAM user with full
// access and a role anyone may assume are created at start.
class MotoServer {
 public:
  MotoServer();
  int port() const { return port_; }
  std::string endpoint() const;
  const std::string& access_key() const { return access_key_; }
  const std::string& secret_key() const { return secret_key_; }
  const std::string& role_arn() const { return role_arn_; }

 private:
  std::unique_ptr<ChildProcess> proc_;
  int port_ = 0;
  std::string access_key_;
  std::string secret_key_;
  std::string role_arn_;
};

// tests/servers/aws_metadata_server.py: EC2 instance metadata (IMDSv2) and
// container credentials handing out real temporary credentials of the moto
// server's role, valid `duration_s`, with fault injection and a request log.
class AwsMetadataServer {
 public:
  AwsMetadataServer(const MotoServer& moto, int duration_s,
                    const std::vector<std::string>& args = {});
  std::string Url(const std::string& path = "") const;  // path starts with '/'
  void AddFault(const nlohmann::json& rule);
  void ClearFaults();
  // One object per request: method, path, status, token, authorization,
  // fault, access_key_id.
  std::vector<nlohmann::json> Log() const;
  // The access keys handed out from log entry `from` on.
  std::set<std::string> IssuedKeys(size_t from = 0) const;

 private:
  std::unique_ptr<ChildProcess> proc_;
  int port_ = 0;
};

// tests/servers/fault_proxy.py: a TCP proxy to 127.0.0.1:target_port that
// resets its client connections on demand.
class FaultProxy {
 public:
  explicit FaultProxy(int target_port);
  int port() const { return port_; }
  std::string Url() const;
  // Resets each connection open now once `bytes` more reach its client.
  void ResetAfter(uint64_t bytes);
  // {"connections", "resets", "open", "bytes_to_clients"}.
  nlohmann::json Stats() const;

 private:
  std::unique_ptr<ChildProcess> proc_;
  int port_ = 0;
  int control_port_ = 0;
};

}  // namespace shardstream::testing

#endif  // SHARDSTREAM_TESTS_SUPPORT_HTTP_SERVER_H_
