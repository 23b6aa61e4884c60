// Entry point of the `shardstream` command-line tool.
#include <algorithm>
#include <iostream>

#include "shardstream/version.h"
#include "tools/command.h"

namespace shardstream::tools {

std::vector<std::pair<std::string, CommandSetup>>& Commands() {
  static std::vector<std::pair<std::string, CommandSetup>> commands;
  return commands;
}
CommandRegistration::CommandRegistration(const char* name, CommandSetup setup) {
  Commands().emplace_back(name, std::move(setup));
}
namespace {
int g_exit_code = 0;
}
void ExitWith(int code) { g_exit_code = code; }
int ExitCode() { return g_exit_code; }

}  // namespace shardstream::tools

int main(int argc, char** argv) {
  using namespace shardstream::tools;
  CLI::App app{"shardstream: stream tar shards to GPUs; pack, inspect, verify and benchmark them"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(shardstream::Version()));
  auto& cmds = Commands();
  std::sort(cmds.begin(), cmds.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [name, setup] : cmds) setup(app);
  if (argc < 2) {
    // No subcommand: the overview, and the usage exit status.
    std::cout << app.help();
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 2 (CLI11's own
    // codes, 100 and up, mean nothing to a shell script).
    return app.exit(e) == 0 ? 0 : 2;
  }
  return ExitCode();
}
