// `qkvlab params [DIR]`: the exact parameter count of a model (a checkpoint
// directory or the model flags), per component and per layer (lm/accounting.hpp).
#include <iostream>
#include <memory>

#include "cli/format_option.hpp"
#include "cli/commands.hpp"
#include "cli/model_source.hpp"
#include "lm/accounting.hpp"

namespace qkvlab::cli {

namespace {

struct ParamsArgs {
  ModelSource model;
  std::string format = "table";
};

int run_params(const ParamsArgs& a) {
  const results::Value v = lm::parameters_value(model_config(a.model));
  std::cout << (a.format == "json" ? v.json() : v.text());
  return 0;
}

}  // namespace

Command add_params_command(CLI::App& app, const std::string&) {
  auto a = std::make_shared<ParamsArgs>();
  auto* cmd = app.add_subcommand("params", "Count a model's parameters exactly: total, embedding (tokens and "
                                           "learned positions), non-embedding, per component and per layer");
  cmd->footer("Exit status: 0 success, 2 usage error (one line on stderr).");
  add_model_source(cmd, a->model);
  add_format_option(cmd, a->format);
  return {cmd, [a] { return run_params(*a); }};
}

}  // namespace qkvlab::cli
