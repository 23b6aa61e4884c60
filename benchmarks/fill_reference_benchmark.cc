// The least work of filling a cache entry from HTTP: libcurl receives (256 KiB
// buffer, as the library's source) and the bytes are written to a file in
// 1 MiB blocks (the cache's download size), its space reserved up front as the
// cache does. No hash, no reader, no parse:
// what the page cache and the network stack allow on this machine, the
// reference for "reading while the cache fills" (benchmarks/remote_benchmark.py).
//
//   fill_reference_benchmark URL FILE [--runs N]   -> JSON, GB/s per run and median
#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Sink {
  CURL* handle = nullptr;
  bool reserved = false;
  int fd = -1;
  std::vector<char> block = std::vector<char>(size_t{1} << 20);
  size_t fill = 0;
  bool failed = false;
  bool Flush() {
    size_t off = 0;
    while (off < fill) {
      ssize_t w = ::write(fd, block.data() + off, fill - off);
      if (w <= 0) return false;
      off += static_cast<size_t>(w);
    }
    fill = 0;
    return true;
  }
};

size_t OnData(char* p, size_t size, size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  const size_t len = size * n;
  if (!s->reserved) {
    // As the cache does: reserve the whole body first (fallocate, size kept).
    s->reserved = true;
    curl_off_t length = -1;
    curl_easy_getinfo(s->handle, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    if (length > 0) (void)::fallocate(s->fd, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(length));
  }
  for (size_t off = 0; off < len;) {
    const size_t k = std::min(len - off, s->block.size() - s->fill);
    std::memcpy(s->block.data() + s->fill, p + off, k);
    s->fill += k;
    off += k;
    if (s->fill == s->block.size() && !s->Flush()) {
      s->failed = true;
      return 0;
    }
  }
  return len;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s URL FILE [--runs N]\n", argv[0]);
    return 2;
  }
  int runs = 5;
  for (int i = 3; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--runs") runs = std::max(1, std::atoi(argv[i + 1]));
  curl_global_init(CURL_GLOBAL_DEFAULT);
  std::vector<double> gbps;
  for (int r = 0; r < runs; ++r) {
    ::unlink(argv[2]);
    Sink sink;
    sink.fd = ::open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (sink.fd < 0) {
      std::perror(argv[2]);
      return 1;
    }
    CURL* h = curl_easy_init();
    sink.handle = h;
    curl_easy_setopt(h, CURLOPT_URL, argv[1]);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnData);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 256L * 1024);
    curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
    const auto t0 = std::chrono::steady_clock::now();
    const CURLcode rc = curl_easy_perform(h);
    const bool ok = rc == CURLE_OK && !sink.failed && sink.Flush();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    curl_off_t bytes = 0;
    curl_easy_getinfo(h, CURLINFO_SIZE_DOWNLOAD_T, &bytes);
    curl_easy_cleanup(h);
    ::close(sink.fd);
    if (!ok) {
      std::fprintf(stderr, "fill_reference_benchmark: %s: %s\n", argv[1],
                   rc != CURLE_OK ? curl_easy_strerror(rc) : "write failed");
      return 1;
    }
    gbps.push_back(static_cast<double>(bytes) / s / 1e9);
  }
  ::unlink(argv[2]);
  std::vector<double> sorted = gbps;
  std::sort(sorted.begin(), sorted.end());
  const size_t m = sorted.size();
  const double median = m % 2 ? sorted[m / 2] : (sorted[m / 2 - 1] + sorted[m / 2]) / 2;
  std::printf("{\"median_gbps\": %.4f, \"runs\": [", median);
  for (size_t i = 0; i < gbps.size(); ++i) std::printf("%s%.4f", i ? ", " : "", gbps[i]);
  std::printf("]}\n");
  curl_global_cleanup();
  return 0;
}
