// Subcommands register themselves here so that main.cpp never changes when one is added.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace stackscope::cli {

// A subcommand: `setup` adds it to the app and binds its options; the callback it installs
// runs the command and stores the process exit status in `exit_code`.
struct Command {
  std::string name;
  int order;  // position in --help
  std::function<void(CLI::App& app, int& exit_code)> setup;
};

std::vector<Command>& command_registry();

struct RegisterCommand {
  RegisterCommand(std::string name, int order, std::function<void(CLI::App&, int&)> setup) {
    command_registry().push_back({std::move(name), order, std::move(setup)});
  }
};

}  // namespace stackscope::cli
