// Real servers on loopback for the network tests: our fault-injecting Python
// server (tests/servers/http_server.py), Debian's nginx, and moto's S3 with
// SigV4 authentication enforced. Each starts in its constructor (throwing
// std::runtime_error when it cannot) and is killed and reaped in its
// destructor.
#ifndef SHARDSTREAM_TESTS_SUPPORT_HTTP_SERVER_H_
#define SHARDSTREAM_TESTS_SUPPORT_HTTP_SERVER_H_

#include <sys/types.h>

#include <map>
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
class NginxServer {
 public:
  explicit NginxServer(const std::string& root);
  int port() const { return port_; }
  std::string Url(const std::string& path) const;

 private:
  TempDir dir_;
  std::unique_ptr<ChildProcess> proc_;
  int port_ = 0;
};

// moto's S3 server with authentication enforced from the first request. An
// IAM user with full access is created at start; its keys are below.
class MotoServer {
 public:
  MotoServer();
  int port() const { return port_; }
  std::string endpoint() const;
  const std::string& access_key() const { return access_key_; }
  const std::string& secret_key() const { return secret_key_; }

 private:
  std::unique_ptr<ChildProcess> proc_;
  int port_ = 0;
  std::string access_key_;
  std::string secret_key_;
};

}  // namespace shardstream::testing

#endif  // SHARDSTREAM_TESTS_SUPPORT_HTTP_SERVER_H_
