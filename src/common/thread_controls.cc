#include "common/thread_controls.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace shardstream::internal {

std::vector<int> ThreadCpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

std::vector<int> ProcessCpus() {
  // The kernel intersects a requested mask with the cpuset's CPUs, so a
  // thread that asks for every CPU is given exactly those the process may
  // use; a thread of its own, since the caller's mask must stay as it is.
  std::vector<int> out;
  std::thread probe([&out] {
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
    if (sched_setaffinity(0, sizeof(all), &all) == 0) out = ThreadCpus();
  });
  probe.join();
  return out.empty() ? ThreadCpus() : out;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::vector<int> s = cpus;
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t j = i;
    while (j + 1 < s.size() && s[j + 1] == s[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(s[i]);
    if (j > i) out += '-' + std::to_string(s[j]);
    i = j + 1;
  }
  return out;
}

Status CheckThreadControls(const std::vector<int>& cpus, int nice) {
  if (nice < 0 || nice > 19)
    return Status::Config("loader: reader_nice " + std::to_string(nice) +
                          ": expected 0-19 (lowering it below the process's needs privileges)");
  if (cpus.empty()) return Status::OK();
  const std::vector<int> allowed = ProcessCpus();
  for (int c : cpus) {
    if (!std::binary_search(allowed.begin(), allowed.end(), c))
      return Status::Config("loader: reader_cpus: CPU " + std::to_string(c) +
                            " is not one this process may use (" + FormatCpuList(allowed) + ")");
  }
  return Status::OK();
}

Status ApplyThreadControls(const std::vector<int>& cpus, int nice) {
  if (!cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cpus)
      if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
    // pid 0 is the calling thread: affinity is per thread on Linux.
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
      return Status::Config("loader: reader_cpus " + FormatCpuList(cpus) + ": " +
                            std::strerror(errno));
  }
  if (nice > 0) {
    // PRIO_PROCESS with a thread id sets that thread's niceness alone; a new
    // thread starts at its creator's, so this adds to the consumer's.
    const id_t tid = static_cast<id_t>(syscall(SYS_gettid));
    errno = 0;
    const int now = getpriority(PRIO_PROCESS, tid);
    if (errno != 0 || setpriority(PRIO_PROCESS, tid, std::min(19, now + nice)) != 0)
      return Status::Config("loader: reader_nice " + std::to_string(nice) + ": " +
                            std::strerror(errno));
  }
  return Status::OK();
}

}  // namespace shardstream::internal
