// Each subcommand adds itself to the app and returns itself with the action to
// run once the command line has parsed; the action's return value is the exit
// status. A new subcommand: one file with add_NAME_command, one line in main.cpp.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <vector>

namespace qkvlab::cli {

using Action = std::function<int()>;

struct Command {
  CLI::App* app;
  Action run;
};

Command add_verify_command(CLI::App& app, const std::string& command_line);
Command add_absorb_command(CLI::App& app, const std::string& command_line);
// `qkvlab absorb fit`: a subcommand of absorb (added by add_absorb_command).
Command add_absorb_fit_command(CLI::App& absorb, const std::string& command_line);
Command add_rmt_command(CLI::App& app, const std::string& command_line);
Command add_lnorm_command(CLI::App& app, const std::string& command_line);
// `qkvlab icl`: a parent whose subcommands come in groups, one file each; a
// group adds its subcommands to `icl` and returns them (listed in main.cpp).
using IclGroup = std::function<std::vector<Command>(CLI::App& icl, const std::string& command_line)>;
Command add_icl_command(CLI::App& app, const std::string& command_line, const std::vector<IclGroup>& groups);
// `qkvlab icl theory` and `qkvlab icl lemmas` (icl_theory_command.cpp).
std::vector<Command> add_icl_theory_commands(CLI::App& icl, const std::string& command_line);
// `qkvlab icl train`, `sweep`, `anchor` and `depth` (icl_train_command.cpp).
std::vector<Command> add_icl_train_commands(CLI::App& icl, const std::string& command_line);
Command add_transfer_command(CLI::App& app, const std::string& command_line);
// `qkvlab data brown` (data_command.cpp): the Brown corpus, tokenized, with baselines.
Command add_data_command(CLI::App& app, const std::string& command_line);

}  // namespace qkvlab::cli
