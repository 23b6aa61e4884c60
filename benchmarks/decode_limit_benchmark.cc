// The JPEG decode limit: how many images per second libjpeg-turbo decodes on
// N threads when it does nothing else, no reading, cropping, resizing,
// batching or Python. benchmarks/vision_benchmark.py runs it over the same
// JPEGs as the loaders it compares, as the ceiling of a loader that decodes
// every image at full size.
//
//   decode_limit_benchmark [--threads N] [--seconds S | --repeat R] SHARD.tar...
//
// All `.jpg` members of the tar shards are read into memory first (a minimal
// ustar reader: regular files, GNU long names and pax `path` records). Image
// i goes to thread i % N; each thread decodes its images in order, over and
// over, with the TurboJPEG API (tjDecompressHeader3, then tjDecompress2 to
// TJPF_RGB at full size, flags 0) into a buffer it reuses. With --seconds
// (default 3) the threads stop once that much time has passed and each has
// decoded all its images at least once; with --repeat they make exactly R
// passes. Prints one JSON line:
//   {"images_per_s":..., "megapixels_per_s":..., "threads":..., "images":...,
//    "decoded":..., "seconds":..., "jpeg_bytes":...}
// where "images" is the number of distinct JPEGs and "decoded" the number of
// decodes timed.
//
// Build: g++ -O2 -std=c++17 decode_limit_benchmark.cc -lturbojpeg -pthread
#include <turbojpeg.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "decode_limit_benchmark: %s\n", msg.c_str());
  std::exit(1);
}

// An octal (or GNU base-256) tar number field.
uint64_t tar_number(const char* p, size_t n) {
  if (n > 0 && (static_cast<unsigned char>(p[0]) & 0x80)) {
    uint64_t v = static_cast<unsigned char>(p[0]) & 0x7f;
    for (size_t i = 1; i < n; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
    return v;
  }
  uint64_t v = 0;
  size_t i = 0;
  while (i < n && (p[i] == ' ' || p[i] == '\0')) ++i;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i) v = v * 8 + static_cast<uint64_t>(p[i] - '0');
  return v;
}

std::string field(const char* p, size_t n) { return std::string(p, strnlen(p, n)); }

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The value of `key` in a pax extended header's records ("LEN key=value\n").
std::string pax_value(const std::string& data, const std::string& key) {
  size_t pos = 0;
  while (pos < data.size()) {
    size_t space = data.find(' ', pos);
    if (space == std::string::npos) break;
    size_t len = std::strtoull(data.c_str() + pos, nullptr, 10);
    if (len == 0 || pos + len > data.size()) break;
    std::string rec = data.substr(space + 1, pos + len - space - 1);
    if (!rec.empty() && rec.back() == '\n') rec.pop_back();
    size_t eq = rec.find('=');
    if (eq != std::string::npos && rec.compare(0, eq, key) == 0) return rec.substr(eq + 1);
    pos += len;
  }
  return {};
}

// Appends the .jpg members of the tar file at `path` to `out`.
void read_tar(const std::string& path, std::vector<std::string>* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) die("cannot open " + path);
  std::string tar((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t pos = 0;
  std::string long_name;
  while (pos + 512 <= tar.size()) {
    const char* h = tar.data() + pos;
    bool zero = true;
    for (int i = 0; i < 512 && zero; ++i) zero = h[i] == '\0';
    if (zero) break;  // end-of-archive block
    uint64_t size = tar_number(h + 124, 12);
    char type = h[156];
    std::string name = field(h, 100);
    if (std::memcmp(h + 257, "ustar", 5) == 0 && h[345] != '\0')
      name = field(h + 345, 155) + "/" + name;
    size_t data = pos + 512;
    if (data + size > tar.size()) die(path + ": truncated member " + name);
    std::string body = tar.substr(data, size);
    pos = data + (size + 511) / 512 * 512;
    if (type == 'L') {  // GNU long name of the next member
      long_name = field(body.data(), body.size());
      continue;
    }
    if (type == 'x') {  // pax header of the next member
      std::string p = pax_value(body, "path");
      if (!p.empty()) long_name = p;
      continue;
    }
    if (type == 'g') continue;
    if (!long_name.empty()) {
      name = long_name;
      long_name.clear();
    }
    if ((type == '0' || type == '\0') && ends_with(name, ".jpg")) out->push_back(std::move(body));
  }
}

struct Result {
  uint64_t decoded = 0;
  uint64_t pixels = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  double seconds = 3.0;
  int repeat = 0;
  std::vector<std::string> tars;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--threads") threads = std::atoi(value().c_str());
    else if (a == "--seconds") seconds = std::atof(value().c_str());
    else if (a == "--repeat") repeat = std::atoi(value().c_str());
    else if (a == "-h" || a == "--help") {
      std::printf("usage: %s [--threads N] [--seconds S | --repeat R] SHARD.tar...\n", argv[0]);
      return 0;
    } else if (!a.empty() && a[0] == '-') die("unknown option " + a);
    else tars.push_back(a);
  }
  if (threads < 1) die("--threads must be at least 1");
  if (tars.empty()) die("no tar shards given");

  std::vector<std::string> jpegs;
  for (const auto& t : tars) read_tar(t, &jpegs);
  if (jpegs.empty()) die("no .jpg members in the shards");
  uint64_t jpeg_bytes = 0;
  for (const auto& j : jpegs) jpeg_bytes += j.size();

  std::atomic<bool> stop{false};
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<Result> results(threads);
  std::vector<std::string> errors(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      tjhandle tj = tjInitDecompress();
      if (!tj) {
        errors[t] = "tjInitDecompress failed";
        ready++;
        return;
      }
      std::vector<unsigned char> buf;
      Result r;
      ready++;
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      for (int pass = 0;; ++pass) {
        if (repeat > 0 ? pass >= repeat : (pass > 0 && stop.load(std::memory_order_relaxed))) break;
        for (size_t i = t; i < jpegs.size(); i += threads) {
          const auto& j = jpegs[i];
          auto* src = reinterpret_cast<const unsigned char*>(j.data());
          int w = 0, h = 0, subsamp = 0, colorspace = 0;
          if (tjDecompressHeader3(tj, src, j.size(), &w, &h, &subsamp, &colorspace) != 0) {
            errors[t] = "image " + std::to_string(i) + ": " + tjGetErrorStr2(tj);
            tjDestroy(tj);
            return;
          }
          size_t need = static_cast<size_t>(w) * h * 3;
          if (buf.size() < need) buf.resize(need);
          if (tjDecompress2(tj, src, j.size(), buf.data(), w, 0, h, TJPF_RGB, 0) != 0 &&
              tjGetErrorCode(tj) != TJERR_WARNING) {
            errors[t] = "image " + std::to_string(i) + ": " + tjGetErrorStr2(tj);
            tjDestroy(tj);
            return;
          }
          r.decoded++;
          r.pixels += static_cast<uint64_t>(w) * h;
          // Past the first pass, stop mid-pass once the time is up.
          if (repeat == 0 && pass > 0 && stop.load(std::memory_order_relaxed)) break;
        }
      }
      tjDestroy(tj);
      results[t] = r;
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  auto start = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  if (repeat == 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop.store(true);
  }
  for (auto& th : pool) th.join();
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& e : errors)
    if (!e.empty()) die(e);

  Result total;
  for (const auto& r : results) {
    total.decoded += r.decoded;
    total.pixels += r.pixels;
  }
  std::printf(
      "{\"images_per_s\": %.3f, \"megapixels_per_s\": %.3f, \"threads\": %d, \"images\": %zu, "
      "\"decoded\": %llu, \"seconds\": %.3f, \"jpeg_bytes\": %llu}\n",
      total.decoded / elapsed, total.pixels / elapsed / 1e6, threads, jpegs.size(),
      static_cast<unsigned long long>(total.decoded), elapsed,
      static_cast<unsigned long long>(jpeg_bytes));
  return 0;
}
