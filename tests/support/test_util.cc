#include "support/test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace shardstream::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/shardstream-test-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void WriteFile(const std::string& path, std::string_view data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int RunCommand(const std::string& cmd, std::string* output) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string CliPath() {
  if (const char* env = std::getenv("SHARDSTREAM_CLI"); env && *env) return env;
  return std::string(SHARDSTREAM_BINARY_DIR) + "/shardstream";
}

std::string PythonPath() {
  if (const char* env = std::getenv("SHARDSTREAM_PYTHON"); env && *env) return env;
  std::string venv = std::string(SHARDSTREAM_SOURCE_DIR) + "/.venv/bin/python";
  if (::access(venv.c_str(), X_OK) == 0) return venv;
  return "python3";
}

namespace {

int ThreadCount() {
  std::string status = ReadFile("/proc/self/status");
  return std::atoi(status.c_str() + status.find("Threads:") + 8);
}

}  // namespace

int SettledThreadCount(int expect) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  int count = ThreadCount();
  auto still_since = Clock::now();
  while (count != expect && Clock::now() < deadline &&
         Clock::now() - still_since < std::chrono::milliseconds(200)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    int now = ThreadCount();
    if (now != count) {
      count = now;
      still_since = Clock::now();
    }
  }
  return count;
}

}  // namespace shardstream::testing
