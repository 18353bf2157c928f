// `stackscope agent` in the portable stackscope binary: runs stackscope-agent (installed beside it), which holds
// the daemon. The agent links prometheus-cpp and civetweb, which Debian ships only as shared libraries; keeping
// them out of this binary keeps it runnable on machines without them (the GPU machines it is carried to).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "cli/registry.h"

namespace stackscope::cli {
namespace {

RegisterCommand reg("agent", 90, [](CLI::App& app, int& exit_code) {
  auto args = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand("agent", "Node daemon: find GPU/ML jobs, trace them, serve Prometheus metrics "
                                          "(runs stackscope-agent; `stackscope agent --help` for its options)");
  cmd->prefix_command();  // every argument goes to stackscope-agent as given, --help included
  cmd->set_help_flag();
  cmd->callback([cmd, &exit_code] {
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    const std::string beside = ec ? std::string() : (self.parent_path() / "stackscope-agent").string();
    std::vector<std::string> argv{"stackscope-agent", "agent"};
    for (const auto& a : cmd->remaining()) argv.push_back(a);
    std::vector<char*> c;
    for (auto& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    if (!beside.empty() && ::access(beside.c_str(), X_OK) == 0) ::execv(beside.c_str(), c.data());
    ::execvp("stackscope-agent", c.data());  // else on PATH
    std::cerr << "stackscope: agent: cannot run stackscope-agent (beside " << (beside.empty() ? "?" : beside)
              << " or on PATH): " << std::strerror(errno) << "\n";
    exit_code = 127;
  });
});

}  // namespace
}  // namespace stackscope::cli
