// `qkvlab absorb fit`: the empirical half of qwe.cor8.4.1 (synthetic/absorb_fit_check.hpp):
// options, their validation, the run, the output. Exit 0 when the statement holds for
// every seed, 1 when not (the output names the seed), 2 on a usage error (nothing written), 3 when a
// fit diverges (a loss that is not finite).
#include "cli/format_option.hpp"
#include "cli/commands.hpp"
#include "cli/matrix_argument.hpp"
#include "cli/output_paths.hpp"
#include "cli/plot_common.hpp"
#include "cli/validators.hpp"
#include "core/errors.hpp"
#include "core/limits.hpp"
#include "synthetic/absorb_fit_check.hpp"

#include <filesystem>
#include <iostream>
#include <sstream>

namespace qkvlab::cli {
namespace {

struct FitArgs {
  int d = 3, m = 0, seeds = 3;
  std::uint64_t seed = 1;
  double min_sine = 0.2;
  std::string pair = "both", skip = "identity", format = "table", out, w1, w2;
  synthetic::FitConfig config;
  bool quiet = false;
  std::vector<const CLI::Option*> drawn_options;  // --d, --m, --pair, --skip, --min-sine: what draws a pair
};

// The given pair, and the decision's unit roundoff as `qkvlab absorb` takes it.
synthetic::SkipNetwork given_network(const FitArgs& a, AbsorbLimits& limits) {
  const NpyMatrix W_1 = read_matrix_argument(a.w1), W_2 = read_matrix_argument(a.w2);
  limits.unit_roundoff = data_unit_roundoff(W_1, W_2);
  const Eigen::Index m = W_1.data.rows(), d = W_1.data.cols();
  if (m == 0 || d == 0) throw UsageError("--w1: " + a.w1 + ": W1 is empty");
  if (W_2.data.rows() != d || W_2.data.cols() != m)
    throw UsageError("--w2: " + a.w2 + ": W2 must be " + std::to_string(d) + "x" + std::to_string(m) + ", got " +
                     std::to_string(W_2.data.rows()) + "x" + std::to_string(W_2.data.cols()));
  return {MatD::Identity(d, d), W_1.data, W_2.data};
}

synthetic::AbsorbFitConfig config_of(const FitArgs& a) {
  if (a.w1.empty() != a.w2.empty()) throw UsageError("--w1 and --w2 go together");
  for (const CLI::Option* o : a.drawn_options)
    if (!a.w1.empty() && o->count() > 0)
      throw UsageError(o->get_name() + ": does not apply to a given pair (--w1, --w2): it sets how a pair is drawn");
  if (a.seed > UINT64_MAX - std::uint64_t(a.seeds - 1))
    throw UsageError("--seed " + std::to_string(a.seed) + " with --seeds " + std::to_string(a.seeds) +
                     ": the last seed would pass 2^64 - 1");
  synthetic::AbsorbFitConfig c{a.d, a.m == 0 ? 2 * a.d : a.m, a.seed, a.seeds, a.min_sine, a.skip == "generic", {}, {}, a.config, {}};
  if (a.w1.empty() && a.pair != "generic" && c.m < c.d)
    throw UsageError("--m: a representable pair needs m >= d, got m=" + std::to_string(c.m) + ", d=" + std::to_string(c.d));
  const std::string w1 = matrix_file(a.w1), w2 = matrix_file(a.w2);  // the given pair's files
  require_report_files({{"--out", &a.out}}, {}, {{"--w1", &w1}, {"--w2", &w2}});
  if (a.w1.empty()) {
    require_memory("--d " + std::to_string(c.d) + " --m " + std::to_string(c.m) + " --batch " + std::to_string(a.config.batch),
                   synthetic::absorb_fit_memory_bytes(a.config, c.d, c.m));
    if (a.pair != "generic") c.kinds.push_back(synthetic::PairKind::representable);
    if (a.pair != "representable") c.kinds.push_back(synthetic::PairKind::generic);
    return c;
  }
  c.given = given_network(a, c.limits);
  c.d = int(c.given->W_1.cols()), c.m = int(c.given->W_1.rows()), c.kinds = {synthetic::PairKind::given};
  require_memory("--w1 " + a.w1 + " (" + std::to_string(c.m) + "x" + std::to_string(c.d) + ") with --batch " +
                     std::to_string(a.config.batch),
                 synthetic::absorb_fit_memory_bytes(a.config, c.d, c.m));
  return c;
}

int run_fit(const FitArgs& a, const std::string& command_line) {
  const synthetic::AbsorbFitConfig c = config_of(a);
  const Progress progress{"absorb fit", Progress::wanted(a.quiet)};
  synthetic::AbsorbFitResult r;
  try {
    r = synthetic::run_absorb_fit(c, [&](std::size_t done, std::size_t total) { progress("fits", done, total); });
  } catch (const SamplingLimit& e) {  // the options ask for W1 that cannot (practically) be drawn
    std::ostringstream sine;
    sine << a.min_sine;
    throw UsageError("--min-sine " + sine.str() + " with --d " + std::to_string(c.d) + " --m " + std::to_string(c.m) +
                     ": " + e.what() + " (lower --min-sine or --m)");
  }
  if (!a.out.empty()) results::write_tables_hdf5(a.out, synthetic::absorb_fit_tables(r), a.seed, command_line);
  std::cout << (a.format == "json" ? synthetic::absorb_fit_json(r, command_line).json_line() : synthetic::absorb_fit_text(r));
  return r.holds ? 0 : 1;
}

}  // namespace

Command add_absorb_fit_command(CLI::App& absorb, const std::string& command_line) {
  auto a = std::make_shared<FitArgs>();
  auto* cmd = absorb.add_subcommand(
      "fit", "Fit skipless ReLU MLPs of the same width to skip ones: exact on representable pairs, not on generic ones "
             "(qwe.cor8.4.1)");
  cmd->footer(
      "For each seed S..S+N-1 and pair kind: f(x) = R x + W2 relu(W1 x) (column vectors, W1 m x d entries N(0,1/d),\n"
      "W2 d x m entries N(0,1/m), W1 redrawn until its rows are pairwise --min-sine from collinear: nearly\n"
      "collinear kinks trap same-width fits in spurious minima); 'representable' sets the J-columns of W2 (|J| = d, random) so that W2 P_J W1 = -R\n"
      "(qwe.thm8.4's construction), 'generic' leaves the draw as it is. The decision of 'qkvlab absorb' is printed\n"
      "beside each fit. g(x) = W~2 relu(W~1 x) of width m is fitted in double from --restarts random inits on fresh\n"
      "x ~ N(0, I) batches: Adam (no weight decay), warmup then cosine decay to 1e-4 lr, clipping at norm 1, loss\n"
      "sum|g-f|^2 / sum|f|^2. The best restart has the lowest loss on a common selection sample; its rel_err =\n"
      "sqrt(sum|g-f|^2 / sum|f|^2) is measured on 65536 other fresh inputs.\n"
      "Statement checked per seed: representable -> decision yes and best rel_err <= 1e-6 (optimizer precision);\n"
      "generic -> decision no and best rel_err >= 1e-3 (the floor). --w1/--w2 fit a given pair (R = I) instead,\n"
      "expecting what its decision says (--d, --m, --pair, --min-sine and --skip, which draw a pair, are refused with it).\n"
      "--out writes HDF5 (groups fits, restarts, traces; pair 0 representable, 1 generic, 2 given; decision 0 yes,\n"
      "1 no, 2 undecided; root attributes seed and command_line).\n"
      "Exit status: 0 the statement holds for every seed, 1 it fails for some seed (named in the output),\n"
      "2 usage error (one line on stderr, nothing written), 3 a fit diverged (a loss that is not finite; one line,\n"
      "nothing written).");
  a->drawn_options.push_back(cmd->add_option("--d", a->d, "Input dimension d")->check(integer_in(1, 64))->capture_default_str());
  a->drawn_options.push_back(cmd->add_option("--m", a->m, "Width m (default 2d)")->check(integer_in(1, 512)));
  a->drawn_options.push_back(cmd->add_option("--pair", a->pair, "Which pairs to fit")
                                 ->check(CLI::IsMember({"generic", "representable", "both"}))
                                 ->capture_default_str());
  a->drawn_options.push_back(cmd->add_option("--skip", a->skip, "R: the identity, or a generic invertible matrix drawn per seed")
                                 ->check(CLI::IsMember({"identity", "generic"}))
                                 ->capture_default_str());
  a->drawn_options.push_back(
      cmd->add_option("--min-sine", a->min_sine,
                      "Rows of W1 are redrawn until every pair is at least this far from collinear (sine of the angle)")
          ->check(real_in(0.0, 1.0))
          ->capture_default_str());
  cmd->add_option("--seed", a->seed, "First seed")->check(seed_value)->capture_default_str();
  cmd->add_option("--seeds", a->seeds, "Number of seeds (S, S+1, ...)")->check(integer_in(1, 1000))->capture_default_str();
  cmd->add_option("--restarts", a->config.restarts, "Random restarts per fit")
      ->check(integer_in(1, 1000))
      ->capture_default_str();
  cmd->add_option("--steps", a->config.steps, "Optimizer steps per restart")
      ->check(integer_in(10, 10000000))
      ->capture_default_str();
  cmd->add_option("--batch", a->config.batch, "Fresh inputs per step")->check(integer_in(1, 1 << 20))->capture_default_str();
  cmd->add_option("--lr", a->config.lr, "Peak learning rate")->check(positive_real)->capture_default_str();
  cmd->add_option("--w1", a->w1, "Fit this W1 (m x d, .npy or FILE.h5:DATASET) instead of drawn pairs");
  cmd->add_option("--w2", a->w2, "Fit this W2 (d x m), with --w1");
  add_format_option(cmd, a->format);
  cmd->add_option("--out", a->out, "Write the numbers to this HDF5 file (atomically)");
  cmd->add_flag("--quiet", a->quiet, "No progress on stderr");
  return {cmd, [a, command_line] { return run_fit(*a, command_line); }};
}

}  // namespace qkvlab::cli
