// `qkvlab icl train` and `icl sweep`: experiments 2 and 3 of docs/math/icl.md and the sweep over a
// (synthetic/icl/train_experiment.hpp; the sweep and the rendering in train_report.hpp): options,
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

std::vector<std::string> all_model_names() {
  std::vector<std::string> names;
  for (VariantKind v : kAllVariants) names.push_back(variant_name(v));
  return names;
}

struct IclTrainArgs {
  CommonArgs common;
  bool assumption1 = false, learn_ab = false;
  int a = -1;  // -1: d
  std::vector<std::string> models = all_model_names();
  long theory_prompts = kTrainTheoryPrompts;
};

TrainExperimentConfig experiment_of(const IclTrainArgs& t) {
  if (!t.assumption1 && t.learn_ab) throw UsageError("--learn-ab needs --assumption1");
  if (!t.assumption1 && t.a >= 0) throw UsageError("--a needs --assumption1 (a learned first layer has no copy width)");
  const FirstLayer first = !t.assumption1 ? FirstLayer::attention : t.learn_ab ? FirstLayer::copying_learned : FirstLayer::copying_fixed;
  std::vector<VariantKind> models;
  for (const auto& m : t.models) models.push_back(parse_variant(m));
  return train_experiment_of(t.common, first, t.a, models, t.theory_prompts);
}

int run_train(const IclTrainArgs& t, const std::string& command_line) {
  const TrainExperimentConfig c = experiment_of(t);
  prepare(t.common);
  require_train_memory(t.common, c.task.d, c.task.n, double(c.models.size()) * c.restarts, t.assumption1 ? t.theory_prompts : 0);
  const TrainExperimentResult r = run_train_experiment(c, progress_of("icl train", "runs", t.common.quiet));
  write_outputs(t.common, train_tables(r), command_line);
  std::cout << (t.common.format == "json" ? train_json(r).json_line() : train_text(r));
  return 0;
}

struct SweepArgs {
  CommonArgs common;
  std::vector<int> ds{common.d}, ns{common.n};  // the lists default to the task's single values
  std::vector<double> sigmas{common.sigma};
  long theory_prompts = kSweepTheoryPrompts;
};

int run_sweep(const SweepArgs& s, const std::string& command_line) {
  prepare(s.common);
  for (int d : s.ds)
    for (int n : s.ns) require_train_memory(s.common, d, n, 2.0 * s.common.restarts, s.theory_prompts);
  const TrainExperimentConfig base = sweep_base_of(s.common, s.theory_prompts);
  const Progress progress{"icl sweep", Progress::wanted(s.common.quiet)};
  const TrainSweep sweep = run_train_sweep(sweep_points(base, s.ds, s.ns, s.sigmas),
                                           [&](std::size_t done, std::size_t total) { progress("points", done, total); });
  write_outputs(s.common, sweep_tables(sweep), command_line);  // first: a failed write prints nothing
  std::cout << (s.common.format == "json" ? sweep_json(sweep).json_line() : sweep_text(sweep));
  return 0;
}

}  // namespace

std::vector<Command> add_icl_train_commands(CLI::App& icl, const std::string& command_line) {
  std::vector<Command> out;
  {
    auto t = std::make_shared<IclTrainArgs>();
    auto* cmd = icl.add_subcommand("train", "Experiments 2 and 3: trained two-layer linear attention (MHA, SkipV1, ResFormer, SVFormer)");
    add_common_options(cmd, t->common, {.w0 = true});
    cmd->add_flag("--assumption1", t->assumption1,
                  "Experiment 2: Assumption 1's copying first layer (A = [I_a 0], B = [0 I_(d-a)]); default: a learned first layer (experiment 3)");
    cmd->add_flag("--learn-ab", t->learn_ab, "With --assumption1: learn A and B (started at the coordinate copying layer)");
    cmd->add_option("--a", t->a, "With --assumption1: rows of A (default d)")->check(integer_in(0, 64));
    add_list_option(cmd, "--models", t->models, "Models to train: mha, skipv1, resformer, svformer",
                    CLI::IsMember({"mha", "skipv1", "resformer", "svformer"}));
    cmd->add_option("--theory-prompts", t->theory_prompts, "Monte Carlo prompts for C and the bounds")
        ->check(integer64_in(2, 100000000))
        ->capture_default_str();
    cmd->footer(
        "Trains each model from --restarts initializations with Adam on fresh batches (the same prompts for every\n"
        "model), reports the held-out loss with its standard error, the best run and the spread, the Bayes loss C,\n"
        "and under --assumption1 MHA's lower bound C + C3 + c_a and the SkipV1 construction's value (icl theory).\n"
        "Also the KV cache per token and parameters of each model's decoder form. Defaults: d = 4, n = 16,\n"
        "sigma = 0.5, W0 = 0, 3000 steps, batch 64, lr 0.01, 3 restarts, 20000 held-out prompts, seed 1.\n" +
        std::string(kIclTrainExit));
    out.push_back({cmd, [t, command_line] { return run_train(*t, command_line); }});
  }
  {
    auto s = std::make_shared<SweepArgs>();
    auto* cmd = icl.add_subcommand("sweep", "Trained MHA and SkipV1 under Assumption 1 for a = 0..d against the bound lines");
    add_common_options(cmd, s->common, {.task = false, .w0 = true});
    add_list_option(cmd, "--d-list", s->ds, "Values of d", integer_in(1, 64));
    add_list_option(cmd, "--n-list", s->ns, "Values of n", integer_in(1, 4096));
    add_list_option(cmd, "--sigma-list", s->sigmas,
                    "Values of sigma >= 0 (0 needs n >= d; E|y|^2 = |W0|_F^2 + d^2 + d sigma^2 < 1.8e308)",
                    non_negative_real);
    cmd->add_option("--theory-prompts", s->theory_prompts, "Monte Carlo prompts for C and the bounds")
        ->check(integer64_in(2, 100000000))
        ->capture_default_str();
    cmd->footer(
        "For every (d, n, sigma) of the lists and a = 0..d: trains MHA and SkipV1 with Assumption 1's fixed copying\n"
        "layer and reports the best held-out losses against MHA's lower bound and the SkipV1 construction's value.\n"
        "The figure draws the first (d, n, sigma). Defaults: d-list 4, n-list 16, sigma-list 0.5, W0 = 0,\n"
        "3000 steps, batch 64, lr 0.01, 3 restarts, 20000 held-out prompts, seed 1.\n" +
        std::string(kIclTrainExit));
    out.push_back({cmd, [s, command_line] { return run_sweep(*s, command_line); }});
  }
  return out;
}

}  // namespace qkvlab::cli
