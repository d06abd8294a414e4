// Each subcommand adds itself to the app and returns the action to run once the
// command line has parsed; the action's return value is the exit status.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace qkvlab::cli {

using Action = std::function<int()>;

Action add_verify_command(CLI::App& app, const std::string& command_line);

}  // namespace qkvlab::cli
