// Helpers shared by the shard subcommands (pack, ls, index, verify, bench,
// manifest): a small parallel loop and
// hashing a file through the Source seam.
#ifndef SHARDSTREAM_TOOLS_TAR_TOOL_UTIL_H_
#define SHARDSTREAM_TOOLS_TAR_TOOL_UTIL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
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

}  // namespace shardstream::tools

#endif  // SHARDSTREAM_TOOLS_TAR_TOOL_UTIL_H_
