// HttpSource streaming throughput against `curl -s -o /dev/null`, both from
// nginx on loopback serving a page-cached shard, in the same run. Also
// reports time to first byte, and the peak RSS of a process that streams a
// small and a large shard (it must not grow with the shard).
//
// Usage: http_source_benchmark [--size-mib N] [--small-mib M] [--runs R]
//                              [--read-kib K]
// Defaults: N = 1024, M = 128, R = 5, K = 1024. Needs /usr/sbin/nginx and curl.
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <arpa/inet.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <netinet/in.h>
#include <random>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <vector>

#include "shardstream/http_source.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

bool PortOpen(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::close(fd);
  return rc == 0;
}

pid_t Spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  return pid;
}

std::string Capture(const std::string& cmd) {
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

void WriteShard(const std::string& path, uint64_t mib) {
  std::string block(1 << 20, '\0');
  std::mt19937_64 rng(42);
  for (size_t i = 0; i < block.size(); i += 8) {
    uint64_t x = rng();
    std::memcpy(&block[i], &x, 8);
  }
  std::ofstream out(path, std::ios::binary);
  for (uint64_t i = 0; i < mib; ++i) {
    block[0] = static_cast<char>(i);  // no two MiB alike
    out.write(block.data(), static_cast<std::streamsize>(block.size()));
  }
}

struct StreamResult {
  double ttfb_s = 0;
  double total_s = 0;
  uint64_t bytes = 0;
};

StreamResult StreamOnce(shardstream::HttpSource& src, const std::string& url, size_t read_size) {
  std::vector<char> buf(read_size);
  StreamResult r;
  auto start = Clock::now();
  auto in = src.OpenInputStream(url, 0);
  if (!in.ok()) {
    std::cerr << in.status() << "\n";
    std::exit(1);
  }
  while (true) {
    auto got = (*in)->Read(buf.size(), buf.data());
    if (!got.ok()) {
      std::cerr << got.status() << "\n";
      std::exit(1);
    }
    if (r.bytes == 0) r.ttfb_s = Seconds(Clock::now() - start);
    if (*got == 0) break;
    r.bytes += *got;
  }
  r.total_s = Seconds(Clock::now() - start);
  return r;
}

// Child mode: stream the url once and print peak RSS in KiB.
int Probe(const std::string& url, size_t read_size) {
  shardstream::HttpSource src;
  StreamResult r = StreamOnce(src, url, read_size);
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  std::cout << ru.ru_maxrss << " " << r.bytes << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t size_mib = 1024, small_mib = 128;
  int runs = 5;
  size_t read_kib = 1024;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--size-mib") size_mib = std::stoull(next());
    else if (a == "--small-mib") small_mib = std::stoull(next());
    else if (a == "--runs") runs = std::stoi(next());
    else if (a == "--read-kib") read_kib = std::stoull(next());
    else if (a == "--probe") return Probe(next(), read_kib << 10);
    else {
      std::cerr << "usage: " << argv[0]
                << " [--size-mib N] [--small-mib M] [--runs R] [--read-kib K]\n";
      return 2;
    }
  }
  const size_t read_size = read_kib << 10;
  char tmpl[] = "/tmp/shardstream-bench-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  std::filesystem::create_directories(dir + "/www");
  WriteShard(dir + "/www/large.tar", size_mib);
  WriteShard(dir + "/www/small.tar", small_mib);
  Capture("cat " + dir + "/www/large.tar " + dir + "/www/small.tar > /dev/null");

  int port = FreePort();
  std::ofstream(dir + "/nginx.conf")
      << "daemon off;\nmaster_process off;\nworker_processes 1;\npid " << dir
      << "/nginx.pid;\nerror_log " << dir << "/error.log warn;\n"
      << "events { worker_connections 64; }\nhttp {\n access_log off;\n sendfile on;\n"
      << " tcp_nopush on;\n client_body_temp_path " << dir << "/t1;\n proxy_temp_path " << dir
      << "/t2;\n fastcgi_temp_path " << dir << "/t3;\n uwsgi_temp_path " << dir
      << "/t4;\n scgi_temp_path " << dir << "/t5;\n server {\n  listen 127.0.0.1:" << port
      << ";\n  root " << dir << "/www;\n }\n}\n";
  pid_t nginx = Spawn({"/usr/sbin/nginx", "-p", dir, "-e", dir + "/error.log", "-c",
                       dir + "/nginx.conf"});
  for (int i = 0; i < 500 && !PortOpen(port); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  const std::string url = base + "/large.tar";

  shardstream::HttpSource src;
  std::vector<double> ours_gbps, curl_gbps, ours_ttfb, curl_ttfb;
  for (int run = 0; run < runs; ++run) {
    // curl first, then ours, alternating within the run so both see the
    // same machine state.
    std::string t = Capture("curl -s -o /dev/null -w '%{time_starttransfer} %{time_total} "
                            "%{size_download}' " + url);
    double c_ttfb = 0, c_total = 0, c_bytes = 0;
    std::sscanf(t.c_str(), "%lf %lf %lf", &c_ttfb, &c_total, &c_bytes);
    curl_gbps.push_back(c_bytes / c_total / 1e9);
    curl_ttfb.push_back(c_ttfb);
    StreamResult r = StreamOnce(src, url, read_size);
    ours_gbps.push_back(static_cast<double>(r.bytes) / r.total_s / 1e9);
    ours_ttfb.push_back(r.ttfb_s);
    std::printf("run %d: curl %.2f GB/s (ttfb %.1f ms), HttpSource %.2f GB/s (ttfb %.1f ms)\n",
                run + 1, curl_gbps.back(), c_ttfb * 1e3, ours_gbps.back(), r.ttfb_s * 1e3);
  }

  auto probe = [&](const std::string& name) {
    std::string out = Capture(std::string("'") + argv[0] + "' --read-kib " +
                              std::to_string(read_kib) + " --probe " + base + "/" + name);
    long rss = 0;
    unsigned long long bytes = 0;
    std::sscanf(out.c_str(), "%ld %llu", &rss, &bytes);
    return std::make_pair(rss, bytes);
  };
  auto small = probe("small.tar");
  auto large = probe("large.tar");

  ::kill(nginx, SIGTERM);
  ::waitpid(nginx, nullptr, 0);
  std::filesystem::remove_all(dir);

  double ratio = Median(ours_gbps) / Median(curl_gbps);
  std::printf("\nshard %llu MiB from nginx on loopback, %d runs, read size %zu KiB (medians)\n",
              static_cast<unsigned long long>(size_mib), runs, read_kib);
  std::printf("| client | throughput | time to first byte |\n|---|---|---|\n");
  std::printf("| curl -s -o /dev/null | %.2f GB/s | %.1f ms |\n", Median(curl_gbps),
              Median(curl_ttfb) * 1e3);
  std::printf("| HttpSource | %.2f GB/s | %.1f ms |\n", Median(ours_gbps),
              Median(ours_ttfb) * 1e3);
  std::printf("ratio HttpSource/curl: %.1f%% (target >= 90%%)\n", ratio * 100);
  std::printf("peak RSS streaming %llu MiB: %ld KiB; streaming %llu MiB: %ld KiB\n",
              static_cast<unsigned long long>(small.second >> 20), small.first,
              static_cast<unsigned long long>(large.second >> 20), large.first);
  return 0;
}
