// Figures shared by the benchmark subcommands (bench, bench-loader).
#ifndef SHARDSTREAM_TOOLS_BENCH_UTIL_H_
#define SHARDSTREAM_TOOLS_BENCH_UTIL_H_

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace shardstream::tools {

// CPU seconds (user + system) of this process (RUSAGE_SELF) or of its
// waited-for children: on a shared machine a phase's CPU time is a steadier
// figure than its wall time, and tells a pipeline short of cores from one
// that waits.
inline double CpuSeconds(int who = RUSAGE_SELF) {
  struct rusage ru {};
  ::getrusage(who, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// The median of the runs; 0 for none.
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The process's peak resident memory (VmHWM) since the last ResetPeakRss;
// getrusage's figure, which cannot be reset, where /proc is not there.
inline int64_t PeakRssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::strtoll(line.c_str() + 6, nullptr, 10) * 1024;
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

// Starts the peak over from the memory resident now (/proc/self/clear_refs),
// so that a phase's peak leaves out what came before it; false where that
// cannot be done (no /proc, or a kernel or sandbox that refuses it).
inline bool ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return out.good();
}

}  // namespace shardstream::tools

#endif  // SHARDSTREAM_TOOLS_BENCH_UTIL_H_
