// `qkvlab absorb fit`: the empirical half of qwe.cor8.4.1 (column vectors, W_1
// m×d, W_2 d×m). For each seed and pair kind, draws a skip network
// f(x) = R x + W_2 σ(W_1 x), decides with decide_absorption whether it is a
// skipless MLP of width m, and fits g(x) = W̃_2 σ(W̃_1 x) from several random
// restarts (synthetic/absorb_fit.hpp). The statement checked, per seed:
//   representable pair: decision yes and best held-out rel_err ≤ kPrecision,
//   generic pair:       decision no  and best held-out rel_err ≥ kFloor.
// Exit 0 when it holds for every seed, 1 when not (the output names the seed),
// 2 on a usage error (nothing written).
#include "cli/commands.hpp"
#include "cli/matrix_argument.hpp"
#include "cli/plot_common.hpp"
#include "cli/validators.hpp"
#include "core/absorb.hpp"
#include "core/errors.hpp"
#include "core/json_text.hpp"
#include "core/limits.hpp"
#include "core/linalg.hpp"
#include "results/figure.hpp"
#include "synthetic/absorb_fit.hpp"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

namespace qkvlab::cli {
namespace {

constexpr double kPrecision = synthetic::optimizer_precision;
constexpr double kFloor = synthetic::generic_floor;

struct FitArgs {
  int d = 3, m = 0, seeds = 3;
  std::uint64_t seed = 1;
  double min_sine = 0.2;
  std::string pair = "both", skip = "identity", format = "table", out, w1, w2;
  synthetic::FitConfig config;
  bool quiet = false;
};

enum class Kind { representable, generic, given };
const char* kind_name(Kind k) { return k == Kind::representable ? "representable" : k == Kind::generic ? "generic" : "given"; }

struct PairFit {
  Kind kind;
  std::uint64_t seed;
  AbsorbDecision decision;
  synthetic::FitResult fit;
  bool holds = false;
  std::string failure;  // why not, one line
};

std::string number(double x, int digits = 3) {
  std::ostringstream s;
  s.precision(digits);
  s << x;
  return s.str();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::vector<double> rel_errs(const synthetic::FitResult& f) {
  std::vector<double> v;
  for (const auto& r : f.restarts) v.push_back(r.rel_err);
  return v;
}

int restarts_within(const synthetic::FitResult& f) {
  int n = 0;
  for (const auto& r : f.restarts) n += r.rel_err <= kPrecision;
  return n;
}

// The expectation for a pair, from its kind (or, for a given pair, its decision).
void judge(PairFit& p) {
  const double best = p.fit.best_fit().rel_err;
  const Verdict expected = p.kind == Kind::representable ? Verdict::yes
                           : p.kind == Kind::generic     ? Verdict::no
                                                         : p.decision.verdict;
  const std::string who = std::string(kind_name(p.kind)) + " seed " + std::to_string(p.seed) + ": ";
  if (p.decision.verdict != expected) {
    p.failure = who + "decision " + verdict_name(p.decision.verdict) + ", expected " + verdict_name(expected);
  } else if (expected == Verdict::yes && !(best <= kPrecision)) {
    p.failure = who + "best rel_err " + number(best) + " > precision " + number(kPrecision) + " on a representable pair";
  } else if (expected == Verdict::no && !(best >= kFloor)) {
    p.failure = who + "best rel_err " + number(best) + " < floor " + number(kFloor) + " on a non-representable pair";
  } else if (expected == Verdict::undecided) {
    p.failure = who + "decision undecided: " + p.decision.reason;
  }
  p.holds = p.failure.empty();
}

MatD skip_matrix(const FitArgs& a, int d, std::uint64_t seed) {
  if (a.skip == "identity") return MatD::Identity(d, d);
  Rng rng(seed, "absorb fit/R");
  return draw_basis(rng, d, 1 / std::sqrt(double(d)));
}

synthetic::SkipNetwork given_network(const FitArgs& a) {
  const NpyMatrix W_1 = read_matrix_argument(a.w1), W_2 = read_matrix_argument(a.w2);
  const Eigen::Index m = W_1.data.rows(), d = W_1.data.cols();
  if (m == 0 || d == 0) throw UsageError("--w1: " + a.w1 + ": W1 is empty");
  if (W_2.data.rows() != d || W_2.data.cols() != m)
    throw UsageError("--w2: " + a.w2 + ": W2 must be " + std::to_string(d) + "x" + std::to_string(m) + ", got " +
                     std::to_string(W_2.data.rows()) + "x" + std::to_string(W_2.data.cols()));
  return {MatD::Identity(d, d), W_1.data, W_2.data};
}

// The memory the sizes imply, before anything is allocated: per step the batch's
// inputs, targets, hidden layer and their gradients on the tape; the selection
// and held-out samples with their hidden layers.
double fit_memory_bytes(const FitArgs& a, int d, int m) {
  const auto& c = a.config;
  return 8.0 * (double(c.batch) * (6.0 * d + 8.0 * m) +
                double(c.select_samples + c.heldout_samples) * (2.0 * m + 6.0 * d) * 2);
}

void validate(FitArgs& a) {
  if (a.w1.empty() != a.w2.empty()) throw UsageError("--w1 and --w2 go together");
  if (!a.w1.empty() && (a.skip != "identity"))
    throw UsageError("--skip: a given pair (--w1, --w2) is fitted with R = I");
  if (a.seed > UINT64_MAX - std::uint64_t(a.seeds - 1))
    throw UsageError("--seed " + std::to_string(a.seed) + " with --seeds " + std::to_string(a.seeds) +
                     ": the last seed would pass 2^64 - 1");
  if (a.m == 0) a.m = 2 * a.d;
  if (a.w1.empty() && a.pair != "generic" && a.m < a.d)
    throw UsageError("--m: a representable pair needs m >= d, got m=" + std::to_string(a.m) + ", d=" + std::to_string(a.d));
  if (!a.out.empty()) {
    const auto parent = std::filesystem::path(a.out).parent_path();
    if (!parent.empty() && !std::filesystem::is_directory(parent))
      throw UsageError("--out: directory " + parent.string() + " does not exist");
  }
  if (a.w1.empty())
    require_memory("--d " + std::to_string(a.d) + " --m " + std::to_string(a.m) + " --batch " +
                       std::to_string(a.config.batch),
                   fit_memory_bytes(a, a.d, a.m));
}

void print_table(const FitArgs& a, const std::vector<PairFit>& fits, int d, int m, bool holds) {
  const auto& c = a.config;
  std::cout << "qwe.cor8.4.1 (empirical): fit g(x) = W~2 relu(W~1 x) (width m, no skip) to f(x) = R x + W2 relu(W1 x)\n"
            << "d = " << d << ", m = " << m << ", R = " << (a.skip == "identity" ? "I" : "generic (seeded)")
            << ", restarts = " << c.restarts << ", steps = " << c.steps << ", batch = " << c.batch
            << ", lr = " << c.lr << " (warmup + cosine to " << c.lr * c.lr_floor << "), double, min sine "
            << a.min_sine << "\n"
            << "seeds " << a.seed << ".." << a.seed + std::uint64_t(a.seeds) - 1
            << "; rel_err = sqrt(sum|g-f|^2 / sum|f|^2) on " << c.heldout_samples
            << " held-out x ~ N(0, I); best = lowest loss on " << c.select_samples << " other samples\n"
            << "precision " << kPrecision << " (exact fits end far below it), floor " << kFloor
            << " (the negative-control margin)\n\n";
  std::printf("%-14s %5s %-9s %12s %12s %12s %12s %8s %8s  %s\n", "pair", "seed", "decision", "best_rel_err",
              "min", "median", "max", "exact", "matched", "ok");
  for (const auto& p : fits) {
    const auto v = rel_errs(p.fit);
    std::printf("%-14s %5" PRIu64 " %-9s %12.3e %12.3e %12.3e %12.3e %4d/%-3d %4d/%-3d  %s\n", kind_name(p.kind), p.seed,
                verdict_name(p.decision.verdict), p.fit.best_fit().rel_err, *std::min_element(v.begin(), v.end()),
                median(v), *std::max_element(v.begin(), v.end()), restarts_within(p.fit), int(v.size()),
                p.fit.best_fit().matched_units, m, p.holds ? "yes" : "NO");
  }
  std::cout << "\n(exact: restarts with rel_err <= " << kPrecision << "; matched: rows of the best W~1 collinear with rows of W1)\n";
  for (const auto& p : fits)
    if (!p.holds) std::cout << "broken: " << p.failure << "\n";
  std::cout << "verdict: " << (holds ? "holds" : "FAILS")
            << ": representable pairs are fitted to optimizer precision (best rel_err <= " << kPrecision
            << ") and generic ones stay above the floor (best rel_err >= " << kFloor << ") for every seed\n";
}

void print_json(const FitArgs& a, const std::vector<PairFit>& fits, int d, int m, bool holds,
                const std::string& command_line) {
  const auto& c = a.config;
  std::ostringstream o;
  o << "{\"claim\": \"qwe.cor8.4.1\", \"seed\": " << a.seed << ", \"seeds\": " << a.seeds
    << ", \"command_line\": " << json_quote(command_line) << ", \"d\": " << d << ", \"m\": " << m
    << ", \"skip\": " << json_quote(a.skip) << ", \"min_sine\": " << json_number(a.min_sine) << ", \"restarts\": " << c.restarts << ", \"steps\": " << c.steps
    << ", \"batch\": " << c.batch << ", \"lr\": " << json_number(c.lr) << ", \"precision\": " << json_number(kPrecision)
    << ", \"floor\": " << json_number(kFloor) << ", \"holds\": " << (holds ? "true" : "false") << ",\n\"fits\": [";
  for (std::size_t k = 0; k < fits.size(); ++k) {
    const auto& p = fits[k];
    o << (k ? ",\n " : "\n ") << "{\"pair\": \"" << kind_name(p.kind) << "\", \"seed\": " << p.seed
      << ", \"decision\": \"" << verdict_name(p.decision.verdict) << "\", \"decision_reason\": "
      << json_quote(p.decision.reason) << ", \"best\": " << p.fit.best
      << ", \"best_rel_err\": " << json_number(p.fit.best_fit().rel_err) << ", \"holds\": " << (p.holds ? "true" : "false")
      << ", \"failure\": " << json_quote(p.failure) << ", \"restarts\": [";
    for (std::size_t i = 0; i < p.fit.restarts.size(); ++i) {
      const auto& r = p.fit.restarts[i];
      o << (i ? ", " : "") << "{\"loss\": " << json_number(r.loss) << ", \"rel_err\": " << json_number(r.rel_err)
        << ", \"matched_units\": " << r.matched_units << ", \"trace\": [";
      for (std::size_t t = 0; t < r.trace_steps.size(); ++t)
        o << (t ? ", " : "") << "[" << r.trace_steps[t] << ", " << json_number(r.trace_loss[t]) << "]";
      o << "]}";
    }
    o << "]}";
  }
  o << "\n]}\n";
  std::cout << o.str();
}

void write_hdf5(const FitArgs& a, const std::vector<PairFit>& fits, const std::string& command_line) {
  results::Table summary{"fits", {{"pair", {}}, {"seed", {}}, {"decision", {}}, {"best", {}}, {"best_rel_err", {}}, {"holds", {}}}};
  results::Table restarts{"restarts", {{"pair", {}}, {"seed", {}}, {"restart", {}}, {"loss", {}}, {"rel_err", {}}, {"matched_units", {}}}};
  results::Table traces{"traces", {{"pair", {}}, {"seed", {}}, {"restart", {}}, {"step", {}}, {"loss", {}}}};
  for (const auto& p : fits) {
    const double kind = double(int(p.kind)), seed = double(p.seed);
    const std::vector<double> row{kind, seed, double(int(p.decision.verdict)), double(p.fit.best),
                                  p.fit.best_fit().rel_err, p.holds ? 1.0 : 0.0};
    for (std::size_t j = 0; j < row.size(); ++j) summary.columns[j].values.push_back(row[j]);
    for (std::size_t i = 0; i < p.fit.restarts.size(); ++i) {
      const auto& r = p.fit.restarts[i];
      const std::vector<double> rr{kind, seed, double(i), r.loss, r.rel_err, double(r.matched_units)};
      for (std::size_t j = 0; j < rr.size(); ++j) restarts.columns[j].values.push_back(rr[j]);
      for (std::size_t t = 0; t < r.trace_steps.size(); ++t) {
        const std::vector<double> tr{kind, seed, double(i), double(r.trace_steps[t]), r.trace_loss[t]};
        for (std::size_t j = 0; j < tr.size(); ++j) traces.columns[j].values.push_back(tr[j]);
      }
    }
  }
  results::write_tables_hdf5(a.out, {summary, restarts, traces}, a.seed, command_line);
}

int run_fit(FitArgs& a, const std::string& command_line) {
  validate(a);
  const bool given = !a.w1.empty();
  const synthetic::SkipNetwork user = given ? given_network(a) : synthetic::SkipNetwork{};
  const int d = given ? int(user.W_1.cols()) : a.d, m = given ? int(user.W_1.rows()) : a.m;
  if (given)
    require_memory("--w1 " + a.w1 + " (" + std::to_string(m) + "x" + std::to_string(d) + ") with --batch " +
                       std::to_string(a.config.batch),
                   fit_memory_bytes(a, d, m));
  std::vector<Kind> kinds;
  if (given) kinds = {Kind::given};
  if (!given && a.pair != "generic") kinds.push_back(Kind::representable);
  if (!given && a.pair != "representable") kinds.push_back(Kind::generic);

  const Progress progress{"absorb fit", Progress::wanted(a.quiet)};
  const std::size_t total = kinds.size() * std::size_t(a.seeds);
  std::vector<PairFit> fits;
  for (int s = 0; s < a.seeds; ++s) {
    const std::uint64_t seed = a.seed + std::uint64_t(s);
    for (Kind kind : kinds) {
      progress("fits", fits.size(), total);
      Rng rng(seed, std::string("absorb fit/pair/") + kind_name(kind));
      const MatD R = skip_matrix(a, d, seed);
      synthetic::SkipNetwork f;
      try {
        f = kind == Kind::given           ? user
            : kind == Kind::representable ? synthetic::representable_network(rng, d, m, R, a.min_sine)
                                          : synthetic::generic_network(rng, d, m, R, a.min_sine);
      } catch (const SamplingLimit& e) {  // the options ask for W1 that cannot (practically) be drawn
        std::ostringstream sine;
        sine << a.min_sine;
        throw UsageError("--min-sine " + sine.str() + " with --d " + std::to_string(d) + " --m " + std::to_string(m) +
                         ": " + e.what() + " (lower --min-sine or --m)");
      }
      PairFit p{kind, seed, decide_absorption(f.W_1, f.W_2, f.R, AbsorbLimits{}),
                synthetic::fit_skipless(f, a.config, seed, std::string("absorb fit/") + kind_name(kind)), false, ""};
      judge(p);
      fits.push_back(std::move(p));
    }
  }
  progress("fits", total, total);
  const bool holds = std::all_of(fits.begin(), fits.end(), [](const PairFit& p) { return p.holds; });
  if (!a.out.empty()) write_hdf5(a, fits, command_line);
  if (a.format == "json")
    print_json(a, fits, d, m, holds, command_line);
  else
    print_table(a, fits, d, m, holds);
  return holds ? 0 : 1;
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
      "expecting what its decision says.\n"
      "--out writes HDF5 (groups fits, restarts, traces; pair 0 representable, 1 generic, 2 given; decision 0 yes,\n"
      "1 no, 2 undecided; root attributes seed and command_line).\n"
      "Exit status: 0 the statement holds for every seed, 1 it fails for some seed (named in the output),\n"
      "2 usage error (one line on stderr, nothing written).");
  cmd->add_option("--d", a->d, "Input dimension d")->check(integer_in(1, 64))->capture_default_str();
  cmd->add_option("--m", a->m, "Width m (default 2d)")->check(integer_in(1, 512));
  cmd->add_option("--pair", a->pair, "Which pairs to fit")
      ->check(CLI::IsMember({"generic", "representable", "both"}))
      ->capture_default_str();
  cmd->add_option("--skip", a->skip, "R: the identity, or a generic invertible matrix drawn per seed")
      ->check(CLI::IsMember({"identity", "generic"}))
      ->capture_default_str();
  cmd->add_option("--min-sine", a->min_sine,
                  "Rows of W1 are redrawn until every pair is at least this far from collinear (sine of the angle)")
      ->check(real_in(0.0, 1.0))
      ->capture_default_str();
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
  cmd->add_option("--format", a->format, "Output on stdout")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  cmd->add_option("--out", a->out, "Write the numbers to this HDF5 file (atomically)");
  cmd->add_flag("--quiet", a->quiet, "No progress on stderr");
  return {cmd, [a, command_line] { return run_fit(*a, command_line); }};
}

}  // namespace qkvlab::cli
