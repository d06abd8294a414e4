// Each subcommand adds itself to the app and returns itself with the action to
// run once the command line has parsed; the action's return value is the exit
// status. A new subcommand: one file with add_NAME_command, one line in main.cpp.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace qkvlab::cli {

using Action = std::function<int()>;

struct Command {
  CLI::App* app;
  Action run;
};

Command add_verify_command(CLI::App& app, const std::string& command_line);
Command add_absorb_command(CLI::App& app, const std::string& command_line);
Command add_rmt_command(CLI::App& app, const std::string& command_line);
Command add_lnorm_command(CLI::App& app, const std::string& command_line);

}  // namespace qkvlab::cli
