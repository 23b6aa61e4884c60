// Helpers shared by the shard subcommands (pack, ls, index, verify, bench,
// manifest): a small parallel loop and
// hashing a file through the Source seam.
#ifndef SHARDSTREAM_TOOLS_TAR_TOOL_UTIL_H_
#define SHARDSTREAM_TOOLS_TAR_TOOL_UTIL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shardstream/byte_size.h"
#include "shardstream/checksum.h"
#include "shardstream/manifest.h"
#include "shardstream/result.h"
#include "shardstream/source.h"

namespace shardstream::tools {

// Replaces each brace pattern in `args` ("data-{000..099}.tar", quoted in
// the shell) by the names it expands to, in order, as the library does for a
// data set. On failure returns kConfig naming the malformed pattern.
inline Status ExpandBraceArgs(std::vector<std::string>* args) {
  std::vector<std::string> out;
  for (const std::string& a : *args) {
    if (!IsBracePattern(a)) {
      out.push_back(a);
      continue;
    }
    SHARDSTREAM_ASSIGN_OR_RETURN(std::vector<std::string> names, ExpandBraces(a));
    out.insert(out.end(), names.begin(), names.end());
  }
  *args = std::move(out);
  return Status::OK();
}

// Runs fn(i) for i in [0, n) on up to `threads` threads (0: one per core).
inline void ParallelFor(size_t n, unsigned threads, const std::function<void(size_t)>& fn) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<size_t>(threads, n));
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < n;) fn(i);
    });
  for (auto& th : pool) th.join();
}

// Size and "xxh3_128:<hex>" of a whole object, read in 4 MiB blocks.
struct FileDigest {
  uint64_t size = 0;
  std::string checksum;
};
// Size and checksum of everything `in` delivers.
inline Result<FileDigest> DigestStream(InputStream& in, const std::string& algorithm) {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto hasher, Hasher::Create(algorithm));
  std::vector<char> buf(size_t{4} << 20);
  FileDigest d;
  while (true) {
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t n, in.Read(buf.size(), buf.data()));
    if (n == 0) break;
    hasher->Update(buf.data(), n);
    d.size += n;
  }
  d.checksum = hasher->Finish();
  return d;
}

inline Result<FileDigest> DigestFile(Source& source, const std::string& url,
                                     const std::string& algorithm = "xxh3_128") {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto in, source.OpenInputStream(url, 0));
  return DigestStream(*in, algorithm);
}

inline std::string HumanBytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

// Progress of a long command on stderr: "<what>: 4210/10000 shards (42%), 31.4 GiB, 42 s,
// about 58 s left", at most every `interval_s` seconds (0: never), from any thread. A run
// shorter than the interval prints nothing; the caller prints its own summary.
class Progress {
 public:
  Progress(std::string what, size_t total, double interval_s)
      : what_(std::move(what)), total_(total), interval_s_(interval_s),
        start_(std::chrono::steady_clock::now()), last_(start_) {}

  // One more item done (of `bytes`); `resumed` items were done by an earlier run.
  void Done(uint64_t bytes, size_t resumed = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    done_ += 1;
    resumed_ += resumed;
    bytes_ += bytes;
    if (interval_s_ <= 0) return;
    auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last_).count() < interval_s_ || done_ == total_) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    // The rate of the items this run did itself, not of those it found done.
    const size_t worked = done_ - resumed_;
    std::string eta;
    if (worked > 0) {
      const double left = elapsed / static_cast<double>(worked) *
                          static_cast<double>(total_ - done_);
      eta = ", about " + Seconds(left) + " left";
    }
    std::fprintf(stderr, "%s: %zu/%zu shards (%.0f%%), %s, %s%s\n", what_.c_str(), done_,
                 total_, 100.0 * static_cast<double>(done_) / static_cast<double>(total_),
                 HumanBytes(bytes_).c_str(), Seconds(elapsed).c_str(), eta.c_str());
    std::fflush(stderr);
  }

 private:
  static std::string Seconds(double s) {
    char buf[32];
    if (s < 120) std::snprintf(buf, sizeof(buf), "%.0f s", s);
    else if (s < 7200) std::snprintf(buf, sizeof(buf), "%.0f min", s / 60);
    else std::snprintf(buf, sizeof(buf), "%.1f h", s / 3600);
    return buf;
  }

  const std::string what_;
  const size_t total_;
  const double interval_s_;
  const std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point last_;
  size_t done_ = 0, resumed_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace shardstream::tools

#endif  // SHARDSTREAM_TOOLS_TAR_TOOL_UTIL_H_
