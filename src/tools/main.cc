// Entry point of the `shardstream` command-line tool.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

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

// Levenshtein distance, for "did you mean".
size_t Distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}
}  // namespace

static std::string UnknownSubcommandHint(const std::string& word,
                                         const std::vector<std::string>& names) {
  std::string best;
  size_t best_d = 3;  // at most two edits away
  for (const std::string& name : names) {
    const size_t d = Distance(word, name);
    if (d < best_d) {
      best_d = d;
      best = name;
    }
  }
  return "shardstream: unknown subcommand '" + word + "'" +
         (best.empty() ? "" : ", did you mean '" + best + "'?") +
         " (shardstream --help lists them)";
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
  const std::string first = argv[1];
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  if (!first.empty() && first[0] != '-' &&
      std::find(names.begin(), names.end(), first) == names.end()) {
    std::cerr << UnknownSubcommandHint(first, names) << "\n";
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
