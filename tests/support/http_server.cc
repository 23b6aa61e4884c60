#include "support/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "http/http_client.h"

extern char** environ;

namespace shardstream::testing {

ChildProcess::ChildProcess(const std::vector<std::string>& argv,
                           const std::map<std::string, std::string>& env) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    if (env.count(kv.substr(0, kv.find('='))) == 0) env_strings.push_back(kv);
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);
  int rc = ::posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  stdout_fd_ = fds[0];
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    int status;
    for (int i = 0; i < 200; ++i) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
  }
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
}

std::string ChildProcess::WaitForLine(const std::string& prefix, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    size_t nl;
    while ((nl = pending_.find('\n')) != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      if (line.rfind(prefix, 0) == 0) return line;
    }
    pollfd p{stdout_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      char buf[4096];
      ssize_t n = ::read(stdout_fd_, buf, sizeof(buf));
      if (n <= 0) break;
      pending_.append(buf, static_cast<size_t>(n));
    }
  }
  throw std::runtime_error("child did not print '" + prefix + "'");
}

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool WaitForPort(int port, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::close(fd);
    if (rc == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

namespace {

// A request to a test server's control url; throws unless it answers 200.
std::string Control(const std::string& method, const std::string& url, const std::string& body) {
  static internal::HttpClient* client = new internal::HttpClient(HttpOptions{});
  internal::HttpRequest req;
  req.method = method;
  req.url = url;
  req.body = body;
  auto resp = client->Send(req);
  if (!resp.ok() || resp->status != 200)
    throw std::runtime_error("control request failed: " + url);
  return resp->body;
}

std::string Post(const std::string& url, const std::string& body) {
  return Control("POST", url, body);
}

}  // namespace

HttpTestServer::HttpTestServer(const std::string& root, const std::vector<std::string>& args) {
  log_ = dir_.Join("requests.jsonl");
  std::vector<std::string> argv = {PythonPath(),
                                   std::string(SHARDSTREAM_SOURCE_DIR) +
                                       "/tests/servers/http_server.py",
                                   "--root", root, "--port", "0", "--log", log_};
  argv.insert(argv.end(), args.begin(), args.end());
  proc_ = std::make_unique<ChildProcess>(argv);
  std::string line = proc_->WaitForLine("port ", 20);
  port_ = std::stoi(line.substr(5));
}

std::string HttpTestServer::Url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

void HttpTestServer::AddFault(const nlohmann::json& rule) {
  Post(Url("/_control/faults"), rule.dump());
}

void HttpTestServer::ClearFaults() { Post(Url("/_control/clear"), ""); }

std::vector<nlohmann::json> HttpTestServer::Requests() const {
  std::vector<nlohmann::json> out;
  std::ifstream in(log_);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

void HttpTestServer::ClearLog() const { std::ofstream(log_, std::ios::trunc); }

NginxServer::NginxServer(const std::string& root, const std::string& directives) {
  // nginx needs its port in the config: a free one is taken and released
  // first, so another process may take it meanwhile. The server that answers
  // must then be this nginx (a probe url only it knows); if not, another port.
  for (int attempt = 1;; ++attempt) {
    if (Start(root, directives)) return;
    proc_.reset();
    if (attempt == 5) throw std::runtime_error("nginx did not start");
  }
}

bool NginxServer::Start(const std::string& root, const std::string& directives) {
  port_ = FreePort();
  const std::string probe = "/.nginx-probe-" + std::to_string(::getpid()) + "-" +
                            std::to_string(port_);
  std::string conf = dir_.Join("nginx.conf");
  std::ostringstream c;
  c << "daemon off;\nmaster_process off;\nworker_processes 1;\n"
    << "pid " << dir_.Join("nginx.pid") << ";\n"
    << "error_log " << dir_.Join("error.log") << " warn;\n"
    << "events { worker_connections 256; }\n"
    << "http {\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n"
    << "  client_body_temp_path " << dir_.path() << "/body;\n"
    << "  proxy_temp_path " << dir_.path() << "/proxy;\n"
    << "  fastcgi_temp_path " << dir_.path() << "/fastcgi;\n"
    << "  uwsgi_temp_path " << dir_.path() << "/uwsgi;\n"
    << "  scgi_temp_path " << dir_.path() << "/scgi;\n"
    << "  default_type application/octet-stream;\n"
    << "  server {\n    listen 127.0.0.1:" << port_ << ";\n    root " << root
    << ";\n    location = " << probe << " { return 204; }\n    " << directives
    << "\n  }\n}\n";
  WriteFile(conf, c.str());
  proc_ = std::make_unique<ChildProcess>(std::vector<std::string>{
      "/usr/sbin/nginx", "-p", dir_.path(), "-e", dir_.Join("error.log"), "-c", conf});
  if (!WaitForPort(port_, 10)) return false;
  static internal::HttpClient* client = new internal::HttpClient(HttpOptions{});
  internal::HttpRequest req;
  req.method = "GET";
  req.url = Url(probe);
  auto resp = client->Send(req);
  return resp.ok() && resp->status == 204;
}

std::string NginxServer::Url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

MotoServer::MotoServer() {
  // moto binds a port the kernel picks and says which: none is reserved and
  // released first for another process to take while moto starts.
  proc_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{PythonPath(),
                               std::string(SHARDSTREAM_SOURCE_DIR) + "/tests/servers/moto_server.py",
                               "--port-0"},
      std::map<std::string, std::string>{{"INITIAL_NO_AUTH_ACTION_COUNT", "0"}});
  port_ = std::stoi(proc_->WaitForLine("port ", 30).substr(5));
  // Briefly lifts enforcement to create an IAM user, then restores it.
  std::string out;
  int rc = RunCommand(PythonPath() + " " + SHARDSTREAM_SOURCE_DIR +
                          "/tests/servers/moto_setup.py " + endpoint(),
                      &out);
  if (rc != 0) throw std::runtime_error("moto setup failed: " + out);
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("access_key ", 0) == 0) access_key_ = line.substr(11);
    if (line.rfind("secret_key ", 0) == 0) secret_key_ = line.substr(11);
    if (line.rfind("role_arn ", 0) == 0) role_arn_ = line.substr(9);
  }
  if (access_key_.empty()) throw std::runtime_error("moto setup printed no keys: " + out);
}

std::string MotoServer::endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }


AwsMetadataServer::AwsMetadataServer(const MotoServer& moto, int duration_s,
                                     const std::vector<std::string>& args) {
  std::vector<std::string> argv = {
      PythonPath(), std::string(SHARDSTREAM_SOURCE_DIR) + "/tests/servers/aws_metadata_server.py",
      "--moto", moto.endpoint(), "--access-key", moto.access_key(), "--secret-key",
      moto.secret_key(), "--role-arn", moto.role_arn(), "--duration", std::to_string(duration_s)};
  argv.insert(argv.end(), args.begin(), args.end());
  proc_ = std::make_unique<ChildProcess>(argv);
  std::string line = proc_->WaitForLine("port ", 30);
  port_ = std::stoi(line.substr(5));
}

std::string AwsMetadataServer::Url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

void AwsMetadataServer::AddFault(const nlohmann::json& rule) {
  Post(Url("/_control/faults"), rule.dump());
}

void AwsMetadataServer::ClearFaults() { Post(Url("/_control/clear"), ""); }

std::set<std::string> AwsMetadataServer::IssuedKeys(size_t from) const {
  std::set<std::string> keys;
  const std::vector<nlohmann::json> log = Log();
  for (size_t i = from; i < log.size(); ++i)
    if (!log[i]["access_key_id"].is_null()) keys.insert(log[i]["access_key_id"].get<std::string>());
  return keys;
}

std::vector<nlohmann::json> AwsMetadataServer::Log() const {
  return nlohmann::json::parse(Control("GET", Url("/_control/log"), ""))
      .get<std::vector<nlohmann::json>>();
}

FaultProxy::FaultProxy(int target_port) {
  proc_ = std::make_unique<ChildProcess>(std::vector<std::string>{
      PythonPath(), std::string(SHARDSTREAM_SOURCE_DIR) + "/tests/servers/fault_proxy.py",
      "--target", std::to_string(target_port)});
  std::string line = proc_->WaitForLine("port ", 20);
  std::istringstream words(line);
  std::string w1, w2;
  words >> w1 >> port_ >> w2 >> control_port_;
}

std::string FaultProxy::Url() const { return "http://127.0.0.1:" + std::to_string(port_); }

void FaultProxy::ResetAfter(uint64_t bytes) {
  Post("http://127.0.0.1:" + std::to_string(control_port_) + "/reset_after",
       "{\"bytes\": " + std::to_string(bytes) + "}");
}

nlohmann::json FaultProxy::Stats() const {
  return nlohmann::json::parse(
      Control("GET", "http://127.0.0.1:" + std::to_string(control_port_) + "/stats", ""));
}

}  // namespace shardstream::testing
