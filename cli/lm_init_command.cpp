// `qkvlab lm init CKPT`: a freshly initialized model of any family and variant
// (lm/parameters.hpp's GPT-2 initialization), written as a checkpoint directory.
#include <iostream>

#include "cli/format_option.hpp"
#include "cli/commands.hpp"
#include "cli/model_options.hpp"
#include "cli/validators.hpp"
#include "lm/checkpoint.hpp"
#include "lm/describe.hpp"
#include "lm/parameters.hpp"

namespace qkvlab::cli {

namespace {

struct InitArgs {
  std::string dir, format = "table";
  std::uint64_t seed = 1;
  ModelOptions model;
};

int run_init(const InitArgs& a) {
  lm::require_model_destination(a.dir, "CKPT");
  lm::Checkpoint ck;
  ck.config = model_config(a.model);
  const auto layout = lm::parameter_layout(ck.config, lm::make_plan(ck.config));
  ck.values = lm::initial_values<float>(ck.config, layout, a.seed);
  ck.metadata["seed"] = std::to_string(a.seed);
  ck.metadata["step"] = "0";
  lm::save_checkpoint(a.dir, ck);
  results::Value out = results::Value::object();
  out.set("checkpoint", a.dir);
  out.set("seed", a.seed);
  out.set("model", lm::config_value(ck.config));
  std::cout << (a.format == "json" ? out.json() : out.text());
  return 0;
}

}  // namespace

std::vector<Command> add_lm_init_commands(CLI::App& lm, const std::string&) {
  auto a = std::make_shared<InitArgs>();
  auto* cmd = lm.add_subcommand("init", "Write a freshly initialized model (N(0, 0.02), residual projections "
                                        "scaled by 1/sqrt(2L)) to a checkpoint directory");
  cmd->add_option("CKPT", a->dir, "Checkpoint directory to write (model.safetensors, config.json): new, empty, or a model lm init, "
                                 "convert or eliminate wrote (docs/lm.md)")->required();
  add_model_options(cmd, a->model);
  cmd->add_option("--seed", a->seed, "Seed of the initialization")->check(seed_value)->capture_default_str();
  add_format_option(cmd, a->format);
  return {{cmd, [a] { return run_init(*a); }}};
}

}  // namespace qkvlab::cli
