// stackscope: watches ML training and inference jobs from outside and says what is abnormal.
#include <algorithm>
#include <cstdio>
#include <exception>

#include "cli/crash_report.h"
#include "cli/registry.h"

namespace stackscope::cli {
std::vector<Command>& command_registry() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace stackscope::cli

int main(int argc, char** argv) {
  using namespace stackscope::cli;
  install_crash_report();
  CLI::App app{"stackscope: tracing, telemetry and anomaly analysis for ML jobs, from outside the job"};
  app.set_version_flag("--version", std::string("stackscope ") + STACKSCOPE_VERSION);
  app.require_subcommand(1);
  auto& commands = command_registry();
  std::sort(commands.begin(), commands.end(), [](const Command& a, const Command& b) { return a.order < b.order; });
  int exit_code = 0;
  for (auto& c : commands) c.setup(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stackscope: error: %s\n", e.what());
    return 1;
  }
  return exit_code;
}
