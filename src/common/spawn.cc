#include "common/spawn.h"

#include <dirent.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>

extern char** environ;

namespace shardstream::internal {
namespace {

// The child gets stdin, stdout and stderr only, never a cache file or a socket of ours. glibc 2.34
// has a file action for that; the wheels are built against glibc 2.31, where each descriptor open
// now is closed by name (one that another thread opens meanwhile without O_CLOEXEC slips through).
void CloseFromThree(posix_spawn_file_actions_t* actions) {
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 34)
  posix_spawn_file_actions_addclosefrom_np(actions, 3);
#else
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return;
  const int own = ::dirfd(dir);
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const int fd = ::atoi(entry->d_name);
    // A descriptor closed before the spawn is no error there: glibc ignores EBADF in range.
    if (fd >= 3 && fd != own) posix_spawn_file_actions_addclose(actions, fd);
  }
  ::closedir(dir);
#endif
}

}  // namespace

pid_t SpawnShell(const std::string& command, int out_fd, int err_fd) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (out_fd >= 0) posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  if (err_fd >= 0) posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
  CloseFromThree(&actions);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, "/bin/sh", &actions, &attr, const_cast<char**>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  return rc == 0 ? pid : -rc;
}

}  // namespace shardstream::internal
