// Starting a shell command as a child the way every command of ours is
// started (pipe: sources, credential_process): `/bin/sh -c COMMAND` in a
// process group of its own, so that the whole group can be stopped; default
// signal dispositions and an empty mask, whatever the parent set (Python
// ignores SIGPIPE); and no descriptor of this process but 0-2 (sockets and
// cache files stay ours).
#ifndef SHARDSTREAM_COMMON_SPAWN_H_
#define SHARDSTREAM_COMMON_SPAWN_H_

#include <sys/types.h>

#include <string>

namespace shardstream::internal {

// Starts the command with `out_fd` as its standard output and `err_fd` as
// its standard error (-1: this process's). Returns the child's pid (also its
// process group), or -errno.
pid_t SpawnShell(const std::string& command, int out_fd, int err_fd);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_COMMON_SPAWN_H_
