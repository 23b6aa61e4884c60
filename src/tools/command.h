// The `shardstream` tool's subcommand registry. Each subcommand lives in its
// own cmd_*.cc and registers itself with SHARDSTREAM_COMMAND, so adding one
// touches no shared file.
#ifndef SHARDSTREAM_TOOLS_COMMAND_H_
#define SHARDSTREAM_TOOLS_COMMAND_H_

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace shardstream::tools {

// Adds a subcommand to `app`. The callback it installs returns an exit code
// through ExitWith().
using CommandSetup = std::function<void(CLI::App& app)>;

struct CommandRegistration {
  CommandRegistration(const char* name, CommandSetup setup);
};
std::vector<std::pair<std::string, CommandSetup>>& Commands();

// Records the process exit code chosen by a subcommand's callback.
void ExitWith(int code);
int ExitCode();

}  // namespace shardstream::tools

#define SHARDSTREAM_COMMAND(name, setup) \
  static ::shardstream::tools::CommandRegistration ss_cmd_registration_##name(#name, setup)

#endif  // SHARDSTREAM_TOOLS_COMMAND_H_
