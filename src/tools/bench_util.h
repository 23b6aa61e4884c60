// Figures shared by the benchmark subcommands (bench, bench-loader).
#ifndef SHARDSTREAM_TOOLS_BENCH_UTIL_H_
#define SHARDSTREAM_TOOLS_BENCH_UTIL_H_

#include <sys/resource.h>

#include <algorithm>
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

}  // namespace shardstream::tools

#endif  // SHARDSTREAM_TOOLS_BENCH_UTIL_H_
