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
// A parent (`qkvlab icl`, `qkvlab lm`) whose subcommands come in groups, one
// file each; a group adds its subcommands to the parent and returns them
// (listed in main.cpp).
using CommandGroup = std::function<std::vector<Command>(CLI::App& parent, const std::string& command_line)>;
Command add_parent_command(CLI::App& app, const std::string& name, const std::string& help,
                           const std::string& footer, const std::string& command_line,
                           const std::vector<CommandGroup>& groups);
// `qkvlab icl theory` (icl_theory_command.cpp) and `qkvlab icl lemmas` (icl_lemmas_command.cpp).
std::vector<Command> add_icl_theory_commands(CLI::App& icl, const std::string& command_line);
std::vector<Command> add_icl_lemmas_commands(CLI::App& icl, const std::string& command_line);
// `qkvlab icl train` and `sweep` (icl_train_command.cpp), `anchor` and `depth` (icl_anchor_command.cpp).
std::vector<Command> add_icl_train_commands(CLI::App& icl, const std::string& command_line);
std::vector<Command> add_icl_anchor_commands(CLI::App& icl, const std::string& command_line);
Command add_transfer_command(CLI::App& app, const std::string& command_line);
// `qkvlab lm init`, `lm eval`, `lm train` (lm_init_command.cpp, lm_eval_command.cpp, lm_train_command.cpp).
std::vector<Command> add_lm_init_commands(CLI::App& lm, const std::string& command_line);
// `qkvlab lm export` (lm_export_command.cpp).
std::vector<Command> add_lm_export_commands(CLI::App& lm, const std::string& command_line);
// `qkvlab params` and `qkvlab kv` (params_command.cpp, kv_command.cpp).
Command add_params_command(CLI::App& app, const std::string& command_line);
Command add_kv_command(CLI::App& app, const std::string& command_line);
// `qkvlab data brown` (data_command.cpp): the Brown corpus, tokenized, with baselines.
Command add_data_command(CLI::App& app, const std::string& command_line);
// `qkvlab analyze KIND CKPT` (analyze_command.cpp): per-layer analyses of a trained model.
Command add_analyze_command(CLI::App& app, const std::string& command_line);
// `qkvlab probe CKPT` (probe_command.cpp): layerwise linear probes of a frozen model.
Command add_probe_command(CLI::App& app, const std::string& command_line);
// `qkvlab reproduce FIGURE | --list` (reproduce/).
Command add_reproduce_command(CLI::App& app, const std::string& command_line);
// `qkvlab lm eval|train|compare` (lm_eval_command.cpp, lm_train_command.cpp, lm_compare_command.cpp).
std::vector<Command> add_lm_eval_commands(CLI::App& lm, const std::string& command_line);
// `qkvlab lm generate` (lm_generate_command.cpp).
std::vector<Command> add_lm_generate_commands(CLI::App& lm, const std::string& command_line);
std::vector<Command> add_lm_train_commands(CLI::App& lm, const std::string& command_line);
std::vector<Command> add_lm_compare_commands(CLI::App& lm, const std::string& command_line);
// `qkvlab lm tokenize` (lm_tokenize_command.cpp): text to ids and back with a checkpoint's tokenizer.
std::vector<Command> add_lm_tokenize_commands(CLI::App& lm, const std::string& command_line);
// `qkvlab lm eliminate` (lm_eliminate_command.cpp): Query-weight elimination on a trained model.
std::vector<Command> add_lm_eliminate_commands(CLI::App& lm, const std::string& command_line);

}  // namespace qkvlab::cli
