// `qkvlab icl anchor` and `icl depth`: experiments 4 and 5 of docs/math/icl.md
// (synthetic/icl/anchor.hpp, depth.hpp; the rendering in train_report.hpp): options,
// their validation, the run, the output. The shared options: icl_train_options.hpp.
#include "cli/commands.hpp"
#include "cli/icl_train_options.hpp"
#include "cli/validators.hpp"
#include "core/errors.hpp"

#include <iostream>
#include <memory>

namespace qkvlab::cli {
namespace {

using namespace qkvlab::icl;

int run_anchor_command(const CommonArgs& a, const std::string& command_line) {
  AnchorConfig c;
  c.task = task_of(a), c.train = train_of(a), c.restarts = a.restarts, c.eval_samples = a.eval_samples;
  c.seed = a.seed, c.threads = a.threads;
  validate(c);
  prepare(a);
  require_train_memory(a, a.d, a.n, a.restarts, 0);
  const AnchorResult r = run_anchor(c, progress_of("icl anchor", "restarts", a.quiet));
  write_outputs(a, anchor_tables(c, r), command_line);
  std::cout << (a.format == "json" ? anchor_json(c, r).json_line() : anchor_text(c, r));
  return 0;
}

struct DepthArgs {
  CommonArgs common;
  std::vector<int> layers{1, 2, 3, 4};
  int heads = 2;
};

int run_depth_command(const DepthArgs& a, const std::string& command_line) {
  DepthConfig c;
  c.task = task_of(a.common), c.train = train_of(a.common), c.layers = a.layers, c.heads = a.heads;
  c.eval_samples = a.common.eval_samples, c.seed = a.common.seed, c.threads = a.common.threads;
  validate(c);
  prepare(a.common);
  require_train_memory(a.common, a.common.d, a.common.n, 2.0 * double(a.layers.size()), 0, depth_held_out_bytes(c));
  const std::vector<DepthRun> runs = run_depth(c, progress_of("icl depth", "runs", a.common.quiet));
  for (const DepthRun& r : runs)  // icl train's outcome: exit 3, nothing written
    if (!r.diverged.empty()) throw NumericalError(r.diverged);
  write_outputs(a.common, depth_tables(c, runs), command_line);  // first: a failed write prints nothing
  std::cout << (a.common.format == "json" ? depth_json(c, runs).json_line() : depth_text(c, runs));
  return 0;
}

}  // namespace

std::vector<Command> add_icl_anchor_commands(CLI::App& icl, const std::string& command_line) {
  std::vector<Command> out;
  {
    auto a = std::make_shared<CommonArgs>();
    a->steps = 3000, a->batch = 128, a->lr = 5e-3, a->restarts = 2, a->eval_samples = 40000;
    auto* cmd = icl.add_subcommand("anchor", "Experiment 4: one-layer linear self-attention against the best one-step GD");
    add_common_options(cmd, *a, {});
    cmd->footer(
        "Trains a one-layer linear self-attention on tokens [x_i; y_i] (query [x_{n+1}; 0], residual read-out) and\n"
        "compares its held-out loss with L(eta*) = d sigma^2 + d^2 (d+1+sigma^2)/(n+d+1+sigma^2), the loss of the\n"
        "best single GD step from zero (W0 = 0). Defaults: d = 4, n = 16, sigma = 0.5, 3000 steps, batch 128,\n"
        "lr 0.005, 2 restarts, 40000 held-out prompts, seed 1.\n" +
        std::string(kIclTrainExit));
    out.push_back({cmd, [a, command_line] { return run_anchor_command(*a, command_line); }});
  }
  {
    auto a = std::make_shared<DepthArgs>();
    a->common.steps = 1500, a->common.batch = 64, a->common.lr = 5e-3, a->common.restarts = 1;
    auto* cmd = icl.add_subcommand("depth", "Experiment 5: depth, SkipV1 against MHA, and a layerwise probe against GD");
    add_common_options(cmd, a->common, {.restarts = false});
    add_list_option(cmd, "--layers", a->layers, "Depths L to train", integer_in(1, 16));
    cmd->add_option("--heads", a->heads, "Heads per layer (even; SkipV1 takes the second half from layer 1)")
        ->check(integer_in(1, 64))
        ->capture_default_str();
    cmd->footer(
        "Trains L-layer linear self-attention (residual, concatenated tokens) for each L, MHA and SkipV1 (L >= 2),\n"
        "and compares the query's y-slot after each layer l with l steps of GD from zero (best constant step).\n"
        "One run per L and model. Defaults: d = 4, n = 16, sigma = 0.5, L = 1..4,\n"
        "2 heads, 1500 steps, batch 64, lr 0.005, 20000 held-out prompts, seed 1.\n" +
        std::string(kIclTrainExit));
    out.push_back({cmd, [a, command_line] { return run_depth_command(*a, command_line); }});
  }
  return out;
}

}  // namespace qkvlab::cli
