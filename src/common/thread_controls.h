// Where and how eagerly the loader's worker threads run (LoaderOptions'
// reader_cpus and reader_nice): a training process keeps cores, and the
// scheduler's favour, for the thread that launches GPU kernels.
#ifndef SHARDSTREAM_COMMON_THREAD_CONTROLS_H_
#define SHARDSTREAM_COMMON_THREAD_CONTROLS_H_

#include <string>
#include <vector>

#include "shardstream/export.h"
#include "shardstream/status.h"

namespace shardstream::internal {

// The CPUs the calling thread runs on (sched_getaffinity), ascending.
SHARDSTREAM_EXPORT std::vector<int> ThreadCpus();

// The CPUs any thread of this process may be given, ascending: what its
// cpuset allows, whatever the calling thread was confined to (a training
// thread pinned to one CPU still gives its readers the others). Asked of
// the kernel from a short-lived thread.
SHARDSTREAM_EXPORT std::vector<int> ProcessCpus();

// "0-3,8" for {0, 1, 2, 3, 8}: the kernel's own list form (taskset -c).
SHARDSTREAM_EXPORT std::string FormatCpuList(const std::vector<int>& cpus);

// kConfig unless every CPU is one of ProcessCpus() and nice is 0-19.
Status CheckThreadControls(const std::vector<int>& cpus, int nice);

// Confines the calling thread to `cpus` (none: left as it is) and raises its
// niceness by `nice` over the thread that created it. Errors are the
// kernel's (a CPU taken away since the check, say); the caller decides.
Status ApplyThreadControls(const std::vector<int>& cpus, int nice);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_COMMON_THREAD_CONTROLS_H_
