// What the CPU can run, asked once per process: code with wider
// instructions is chosen at run time, so one build serves every x86-64.
// Elsewhere every answer is false.
#ifndef SHARDSTREAM_COMMON_CPU_FEATURES_H_
#define SHARDSTREAM_COMMON_CPU_FEATURES_H_

namespace shardstream::internal {

#if defined(__x86_64__) && defined(__GNUC__)
inline bool CpuHasSsse3() {
  static const bool have = __builtin_cpu_supports("ssse3");
  return have;
}
inline bool CpuHasAvx2() {
  static const bool have = __builtin_cpu_supports("avx2");
  return have;
}
#else
inline bool CpuHasSsse3() { return false; }
inline bool CpuHasAvx2() { return false; }
#endif

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_COMMON_CPU_FEATURES_H_
