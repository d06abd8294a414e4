// `qkvlab icl train | sweep | anchor | depth`: the trained experiments 2–5 of
// docs/math/icl.md. The models and experiments live in synthetic/icl/
// (linear_attention_models.hpp, train_experiment.hpp, anchor.hpp, depth.hpp);
// this file parses options, prints tables or JSON, and writes HDF5, CSV and
// figures. Tokens are columns in docs/math/icl.md; the trained models store Θ = Wᵀ
// (row convention, see linear_attention_models.hpp).
#include "cli/commands.hpp"
#include "cli/device_option.hpp"
#include "cli/plot_common.hpp"
#include "cli/threads_option.hpp"
#include "cli/validators.hpp"
#include "core/errors.hpp"
#include "core/json_text.hpp"
#include "core/limits.hpp"
#include "engine/blas.hpp"
#include "results/figure.hpp"
#include "synthetic/icl/anchor.hpp"
#include "synthetic/icl/depth.hpp"
#include "synthetic/icl/train_experiment.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

namespace qkvlab::cli {
namespace {

// The Monte Carlo and the training here run on the CPU only: no GPU path yet.
constexpr bool kGpuPath = false;

using namespace qkvlab::icl;
namespace fs = std::filesystem;

// ---------------------------------------------------------------- shared options

struct CommonArgs {
  int d = 4, n = 16;
  double sigma = 0.5, w0_scale = 0;
  int steps = 3000, batch = 64;
  double lr = 1e-2;
  int restarts = 3, eval_samples = 20000, threads = 0;
  std::uint64_t seed = 1;
  std::string out, csv, figure, format = "table";
  Device device = Device::cpu;
  bool quiet = false;
};

// Which of the shared options a subcommand uses: it accepts only those.
struct CommonOptions {
  bool task = true;      // --d, --n, --sigma (icl sweep has lists instead)
  bool w0 = false;       // --w0-scale
  bool restarts = true;  // --restarts (icl depth trains one run per L and model)
};

void add_common_options(CLI::App* cmd, CommonArgs& a, CommonOptions use) {
  if (use.task) {
    cmd->add_option("--d", a.d, "Dimension d of x and y")->check(integer_in(1, 64))->capture_default_str();
    cmd->add_option("--n", a.n, "Number n of (x, y) pairs in a prompt")->check(integer_in(1, 4096))->capture_default_str();
    cmd->add_option("--sigma", a.sigma, "Noise standard deviation sigma")->check(non_negative_real)->capture_default_str();
  }
  if (use.w0)
    cmd->add_option("--w0-scale", a.w0_scale, "c of the prior mean W_0 = c I (0: W_0 = 0)")->check(finite_real)->capture_default_str();
  cmd->add_option("--steps", a.steps, "Adam steps per run")->check(positive_integer)->capture_default_str();
  cmd->add_option("--batch", a.batch, "Fresh prompts per step")->check(positive_integer)->capture_default_str();
  cmd->add_option("--lr", a.lr, "Peak learning rate (linear warmup, cosine decay to 1% of it)")
      ->check(positive_real)
      ->capture_default_str();
  if (use.restarts)
    cmd->add_option("--restarts", a.restarts, "Independent initializations per model")->check(positive_integer)->capture_default_str();
  cmd->add_option("--eval-samples", a.eval_samples, "Held-out prompts for the final losses")
      ->check(integer_in(2, 100000000))
      ->capture_default_str();
  cmd->add_option("--seed", a.seed, "Seed of every random draw")->check(seed_value)->capture_default_str();
  add_threads_option(cmd, a.threads);
  cmd->add_option("--out", a.out, "Write every table to this HDF5 file");
  cmd->add_option("--csv", a.csv, "Write the main table to this CSV file");
  cmd->add_option("--figure", a.figure, "Write the figure to STEM.svg and STEM.png (its data to STEM.csv; needs gnuplot)");
  cmd->add_option("--format", a.format, "Output on stdout")->check(CLI::IsMember({"table", "json"}))->capture_default_str();
  add_device_option(cmd, a.device, kGpuPath);
  cmd->add_flag("--quiet", a.quiet, "No progress on stderr");
}

Task task_of(const CommonArgs& a) {
  Task t{a.d, a.n, a.sigma, {}};
  if (!std::isfinite(a.w0_scale)) throw UsageError("--w0-scale must be a finite number");
  if (a.w0_scale != 0) t.W0 = a.w0_scale * MatD::Identity(a.d, a.d);
  validate(t);
  return t;
}

TrainConfig train_of(const CommonArgs& a) {
  TrainConfig t;
  t.steps = a.steps, t.batch = a.batch, t.lr = a.lr;
  t.log_every = std::max(1, a.steps / 100);
  validate(t);
  return t;
}

// Output paths must sit in existing directories: checked before any work.
void check_paths(const CommonArgs& a) {
  for (const auto& [option, path] : {std::pair{"--out", a.out}, {"--csv", a.csv}, {"--figure", a.figure}}) {
    if (path.empty()) continue;
    const fs::path parent = fs::path(path).parent_path();
    if (!parent.empty() && !fs::is_directory(parent))
      throw UsageError(std::string(option) + ": directory " + parent.string() + " does not exist");
  }
}

// The memory the sizes imply, before anything is allocated: each thread's training
// batch on the tape (about 30 matrices of batch x tokens x 3d), every run's
// held-out losses (kept per prompt for paired differences) and a held-out chunk's
// probes, and the Monte Carlo of the bounds (theory_prompts; 0 when none).
void require_train_memory(const CommonArgs& a, int d, int n, double runs, long theory_prompts) {
  const double tokens = 2.0 * n + 1, threads = std::min<double>(worker_count(a.threads), runs);
  double bytes = threads * 30 * 8 * double(a.batch) * tokens * 3 * d + runs * 8 * 2 * double(a.eval_samples) +
                 threads * 2000.0 * d * tokens * 3 * d * 8;
  if (theory_prompts > 0) bytes += theory_memory_bytes(Task{d, n, 0.0, {}}, {theory_prompts, a.seed, a.threads});
  require_memory("--d " + std::to_string(d) + " --n " + std::to_string(n) + " --batch " + std::to_string(a.batch) +
                     " --eval-samples " + std::to_string(a.eval_samples) +
                     (theory_prompts > 0 ? " --theory-prompts " + std::to_string(theory_prompts) : ""),
                 bytes);
}

void prepare(const CommonArgs& a) {
  require_device(a.device, kGpuPath);
  check_paths(a);
  // The runs are what runs in parallel, each product on its run's thread.
  apply_threads(a.threads, BlasUse::per_worker);
}

fs::path stem_of(const std::string& figure) {
  fs::path p(figure);
  if (p.extension() == ".svg" || p.extension() == ".png") p.replace_extension();
  return p;
}

// A JSON number (core/json_text.hpp: 17 significant digits); a diverged run is
// reported as an error, never written.
std::string num(double v) {
  if (!std::isfinite(v)) throw NumericalError("a reported value is not finite");
  return json_number(v);
}

// A number in text, figures and stream tags (9 significant digits, as always: the
// sweep's stream names carry sigma this way, so changing it would change the draws).
std::string text_num(double v) {
  if (!std::isfinite(v)) throw NumericalError("a reported value is not finite");
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string estimate_json(double mean, double se) { return "{\"value\": " + num(mean) + ", \"se\": " + num(se) + "}"; }


std::string fixed(double v, int digits = 4) {
  if (!std::isfinite(v)) throw NumericalError("a reported value is not finite");
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::function<void(int, int)> progress_of(const std::string& name, const std::string& what, bool quiet) {
  auto p = std::make_shared<Progress>(Progress{name, Progress::wanted(quiet)});
  return [p, what](int done, int total) { (*p)(what, std::size_t(done), std::size_t(total)); };
}

// --out, --csv and --figure (STEM.csv, STEM.svg, STEM.png): all or none.
void write_outputs(const CommonArgs& a, const std::vector<results::Table>& tables, const results::Table& main,
                   const results::Table& figure_table, const results::Figure& figure, const std::string& command_line) {
  StagedFiles files;
  if (!a.out.empty()) results::stage_tables_hdf5(files, a.out, tables, a.seed, command_line);
  if (!a.csv.empty()) results::stage_csv(files, a.csv, main);
  if (!a.figure.empty()) {
    const fs::path stem = stem_of(a.figure);
    results::stage_csv(files, fs::path(stem.string() + ".csv"), figure_table);
    results::stage_figure(files, figure, figure_table, stem);
  }
  files.commit();
}

double model_code(Variant v) { return double(int(v)); }

// ---------------------------------------------------------------- train

struct TrainArgs {
  CommonArgs common;
  bool assumption1 = false, learn_ab = false;
  int a = -1;  // -1: d
  std::vector<std::string> models{"mha", "skipv1", "resformer", "svformer"};
  long theory_prompts = 100000;
};

TrainExperimentConfig experiment_of(const TrainArgs& t) {
  TrainExperimentConfig c;
  c.task = task_of(t.common);
  c.first = !t.assumption1 ? FirstLayer::attention : t.learn_ab ? FirstLayer::copying_learned : FirstLayer::copying_fixed;
  if (!t.assumption1 && t.learn_ab) throw UsageError("--learn-ab needs --assumption1");
  c.a = t.a < 0 ? c.task.d : t.a;
  c.models.clear();
  for (const auto& m : t.models) c.models.push_back(parse_variant(m));
  c.train = train_of(t.common);
  c.restarts = t.common.restarts, c.eval_samples = t.common.eval_samples, c.theory_prompts = t.theory_prompts;
  c.seed = t.common.seed, c.threads = t.common.threads;
  validate(c);
  return c;
}

std::string reference_name(Variant v) { return v == Variant::mha ? "lower_bound" : "construction_value"; }

void print_train_table(const TrainExperimentResult& r) {
  const auto& c = r.config;
  std::cout << "icl train: d = " << c.task.d << ", n = " << c.task.n << ", sigma = " << c.task.sigma
            << ", W0 = " << (c.task.W0.size() ? text_num(c.task.W0(0, 0)) + " I" : "0") << ", first layer "
            << first_layer_name(c.first) << (c.first != FirstLayer::attention ? ", a = " + std::to_string(c.a) : "")
            << "\n  " << c.restarts << " restarts x " << c.train.steps << " Adam steps, batch " << c.train.batch
            << ", lr " << c.train.lr << "; held-out loss on " << c.eval_samples << " prompts; seed " << c.seed << "\n";
  std::cout << "  Bayes loss C = " << fixed(r.C.value) << " +- " << fixed(r.C.se) << "\n";
  std::cout << "  model      restart  held-out loss (se)      last train loss\n";
  for (const auto& run : r.runs)
    std::cout << "  " << std::left << std::setw(10) << variant_name(run.model) << std::right << std::setw(4)
              << run.restart << "     " << fixed(run.loss.value) << " (" << fixed(run.loss.se) << ")      "
              << fixed(run.curve.loss.back()) << "\n";
  std::cout << "  model      best (se)            spread [min, max]      KV/token  params(decoder)  params(trained)\n";
  for (const auto& s : r.models)
    std::cout << "  " << std::left << std::setw(10) << variant_name(s.model) << std::right << " " << fixed(s.best_loss)
              << " (" << fixed(s.best_se) << ")   [" << fixed(s.min) << ", " << fixed(s.max) << "]   "
              << std::setw(6) << s.accounting.kv_cache_per_token << "  " << std::setw(12) << s.accounting.parameters
              << "  " << std::setw(12) << r.runs[std::size_t(s.best)].trained_parameters << "\n";
  for (const auto& s : r.models) {
    if (!s.reference) continue;
    const double diff = s.best_loss - s.reference->value, se = std::hypot(s.best_se, s.reference->se);
    std::cout << "  " << variant_name(s.model) << ": trained " << fixed(s.best_loss) << " vs "
              << (s.model == Variant::mha ? "lower bound C + C3 + c_a " : "construction value (C + C3 at a = d) ")
              << fixed(s.reference->value) << " +- " << fixed(s.reference->se) << ": difference " << fixed(diff)
              << " +- " << fixed(se) << " (" << fixed(diff / se, 1) << " se)\n";
  }
  if (r.skipv1_minus_mha)
    std::cout << "  skipv1 - mha (best runs, paired): " << fixed(r.skipv1_minus_mha->value) << " +- "
              << fixed(r.skipv1_minus_mha->se) << "\n";
}

void print_train_json(const TrainExperimentResult& r) {
  const auto& c = r.config;
  std::ostringstream o;
  o << "{\"command\": \"icl train\", \"seed\": " << c.seed << ", \"d\": " << c.task.d << ", \"n\": " << c.task.n
    << ", \"sigma\": " << num(c.task.sigma) << ", \"w0_scale\": " << num(c.task.W0.size() ? c.task.W0(0, 0) : 0.0)
    << ", \"first_layer\": " << json_quote(first_layer_name(c.first)) << ", \"a\": " << c.a
    << ", \"steps\": " << c.train.steps << ", \"batch\": " << c.train.batch << ", \"lr\": " << num(c.train.lr)
    << ", \"restarts\": " << c.restarts << ", \"eval_samples\": " << c.eval_samples
    << ", \"C\": " << estimate_json(r.C.value, r.C.se) << ", \"runs\": [";
  for (std::size_t i = 0; i < r.runs.size(); ++i) {
    const auto& run = r.runs[i];
    o << (i ? ", " : "") << "{\"model\": " << json_quote(variant_name(run.model)) << ", \"restart\": " << run.restart
      << ", \"loss\": " << estimate_json(run.loss.value, run.loss.se)
      << ", \"final_train_loss\": " << num(run.curve.loss.back()) << "}";
  }
  o << "], \"models\": [";
  for (std::size_t i = 0; i < r.models.size(); ++i) {
    const auto& s = r.models[i];
    o << (i ? ", " : "") << "{\"model\": " << json_quote(variant_name(s.model))
      << ", \"best\": " << estimate_json(s.best_loss, s.best_se) << ", \"best_restart\": " << r.runs[std::size_t(s.best)].restart
      << ", \"mean\": " << num(s.mean) << ", \"min\": " << num(s.min) << ", \"max\": " << num(s.max)
      << ", \"kv_cache_per_token\": " << s.accounting.kv_cache_per_token
      << ", \"decoder_parameters\": " << s.accounting.parameters
      << ", \"trained_parameters\": " << r.runs[std::size_t(s.best)].trained_parameters;
    if (s.reference)
      o << ", \"" << reference_name(s.model) << "\": " << estimate_json(s.reference->value, s.reference->se)
        << ", \"best_minus_reference\": "
        << estimate_json(s.best_loss - s.reference->value, std::hypot(s.best_se, s.reference->se));
    o << "}";
  }
  o << "]";
  if (r.skipv1_minus_mha)
    o << ", \"skipv1_minus_mha\": " << estimate_json(r.skipv1_minus_mha->value, r.skipv1_minus_mha->se);
  o << "}\n";
  std::cout << o.str();
}

int run_train(const TrainArgs& t, const std::string& command_line) {
  const TrainExperimentConfig c = experiment_of(t);
  prepare(t.common);
  require_train_memory(t.common, c.task.d, c.task.n, double(c.models.size()) * c.restarts,
                       t.assumption1 ? t.theory_prompts : 0);
  const TrainExperimentResult r = run_train_experiment(c, progress_of("icl train", "runs", t.common.quiet));
  // Tables: one row per run; the curves (one column per run); per model.
  results::Table runs{"runs", {{"model", {}}, {"restart", {}}, {"loss", {}}, {"loss_se", {}}, {"final_train_loss", {}}}};
  results::Table curves{"curves", {{"step", r.runs.front().curve.step}}};
  results::Table models{"models", {{"model", {}}, {"best_loss", {}}, {"best_se", {}}, {"mean", {}}, {"min", {}},
                                   {"max", {}}, {"kv_cache_per_token", {}}, {"decoder_parameters", {}},
                                   {"C", {}}, {"C_se", {}}}};
  // MHA's lower bound and the SkipV1 construction's value (Assumption 1 runs only).
  results::Table references{"references", {{"model", {}}, {"reference", {}}, {"reference_se", {}},
                                           {"best_minus_reference", {}}, {"difference_se", {}}}};
  for (const auto& run : r.runs) {
    for (auto [k, v] : {std::pair{0, model_code(run.model)}, {1, double(run.restart)}, {2, run.loss.value},
                        {3, run.loss.se}, {4, run.curve.loss.back()}})
      runs.columns[std::size_t(k)].values.push_back(v);
    curves.columns.push_back({variant_name(run.model) + "_" + std::to_string(run.restart), run.curve.loss});
  }
  for (const auto& s : r.models) {
    const double row[] = {model_code(s.model), s.best_loss, s.best_se, s.mean, s.min, s.max,
                          double(s.accounting.kv_cache_per_token), double(s.accounting.parameters), r.C.value, r.C.se};
    for (std::size_t k = 0; k < models.columns.size(); ++k) models.columns[k].values.push_back(row[k]);
    if (!s.reference) continue;
    const double ref[] = {model_code(s.model), s.reference->value, s.reference->se, s.best_loss - s.reference->value,
                          std::hypot(s.best_se, s.reference->se)};
    for (std::size_t k = 0; k < references.columns.size(); ++k) references.columns[k].values.push_back(ref[k]);
  }
  results::Figure f{"icl train: training batch loss (dashed: bounds), " + first_layer_name(c.first) + ", d = " +
                        std::to_string(c.task.d) + ", n = " + std::to_string(c.task.n),
                    "Adam step", "batch loss E|y_hat - y|^2", false, true, {}, {"set key top right"}};
  int colour = 1;
  for (const auto& s : r.models) {
    const auto& best = r.runs[std::size_t(s.best)];
    f.series.push_back({"step", variant_name(best.model) + "_" + std::to_string(best.restart), "",
                        variant_name(s.model) + " (best restart)", "lines lw 2 lc " + std::to_string(colour++)});
    if (s.reference)
      f.series.push_back({"", "", text_num(s.reference->value),
                          s.model == Variant::mha ? "MHA lower bound C + C3 + c_a" : "SkipV1 construction value",
                          "lines dt 2 lw 2 lc " + std::to_string(colour - 1)});
  }
  f.series.push_back({"", "", text_num(r.C.value), "Bayes loss C", "lines dt 3 lc rgb 'black'"});
  std::vector<results::Table> tables{runs, curves, models};
  if (r.theory) tables.push_back(references);
  write_outputs(t.common, tables, runs, curves, f, command_line);
  if (t.common.format == "json") print_train_json(r);
  else print_train_table(r);
  return 0;
}

// ---------------------------------------------------------------- sweep

struct SweepArgs {
  CommonArgs common;
  std::vector<int> ds{4}, ns{16};
  std::vector<double> sigmas{0.5};
  long theory_prompts = 50000;
};

int run_sweep(const SweepArgs& s, const std::string& command_line) {
  prepare(s.common);
  require_each_integer_in("--d-list", s.ds, 1, 64);
  require_each_integer_in("--n-list", s.ns, 1, 4096);
  require_each_non_negative("--sigma-list", s.sigmas);
  for (int d : s.ds)
    for (int n : s.ns) require_train_memory(s.common, d, n, 2.0 * s.common.restarts, s.theory_prompts);
  std::vector<TrainExperimentConfig> points;
  for (int d : s.ds)
    for (int n : s.ns)
      for (double sigma : s.sigmas)
        for (int a = 0; a <= d; ++a) {
          CommonArgs c = s.common;
          c.d = d, c.n = n, c.sigma = sigma;
          TrainExperimentConfig e;
          e.task = task_of(c), e.first = FirstLayer::copying_fixed, e.a = a, e.models = {Variant::mha, Variant::skipv1};
          e.train = train_of(c), e.restarts = c.restarts, e.eval_samples = c.eval_samples;
          e.theory_prompts = s.theory_prompts, e.seed = c.seed, e.threads = c.threads;
          e.tag = "sweep/d=" + std::to_string(d) + "/n=" + std::to_string(n) + "/sigma=" + text_num(sigma) + "/a=" + std::to_string(a);
          validate(e);
          points.push_back(e);
        }
  const Progress progress{"icl sweep", Progress::wanted(s.common.quiet)};
  results::Table table{"sweep", {{"d", {}}, {"n", {}}, {"sigma", {}}, {"w0_scale", {}}, {"a", {}},
                                 {"mha_trained", {}}, {"mha_trained_se", {}}, {"mha_bound", {}}, {"mha_bound_se", {}},
                                 {"skipv1_trained", {}}, {"skipv1_trained_se", {}}, {"skipv1_construction", {}},
                                 {"skipv1_construction_se", {}}, {"C", {}}, {"C_se", {}},
                                 {"skipv1_minus_mha", {}}, {"skipv1_minus_mha_se", {}}}};
  std::ostringstream json;
  json << "{\"command\": \"icl sweep\", \"seed\": " << s.common.seed << ", \"steps\": " << s.common.steps
       << ", \"restarts\": " << s.common.restarts << ", \"points\": [";
  if (s.common.format == "table")
    std::cout << "icl sweep: Assumption 1 (A = [I_a 0], B = [0 I_(d-a)] fixed), best of " << s.common.restarts
              << " restarts x " << s.common.steps << " steps; seed " << s.common.seed << "\n"
              << "   d    n  sigma  a   MHA trained (se)   MHA bound (se)     SkipV1 trained (se)  SkipV1 constr. (se)  C\n";
  for (std::size_t i = 0; i < points.size(); ++i) {
    progress("points", i, points.size());
    const TrainExperimentResult r = run_train_experiment(points[i]);
    const ModelSummary& mha = r.models[0];
    const ModelSummary& skip = r.models[1];
    const auto& e = points[i];
    const double row[] = {double(e.task.d), double(e.task.n), e.task.sigma, s.common.w0_scale, double(e.a),
                          mha.best_loss, mha.best_se, mha.reference->value, mha.reference->se,
                          skip.best_loss, skip.best_se, skip.reference->value, skip.reference->se,
                          r.C.value, r.C.se, r.skipv1_minus_mha->value, r.skipv1_minus_mha->se};
    for (std::size_t k = 0; k < table.columns.size(); ++k) table.columns[k].values.push_back(row[k]);
    json << (i ? ", " : "") << "{\"d\": " << e.task.d << ", \"n\": " << e.task.n << ", \"sigma\": " << num(e.task.sigma)
         << ", \"a\": " << e.a << ", \"mha_trained\": " << estimate_json(mha.best_loss, mha.best_se)
         << ", \"mha_bound\": " << estimate_json(mha.reference->value, mha.reference->se)
         << ", \"skipv1_trained\": " << estimate_json(skip.best_loss, skip.best_se)
         << ", \"skipv1_construction\": " << estimate_json(skip.reference->value, skip.reference->se)
         << ", \"C\": " << estimate_json(r.C.value, r.C.se)
         << ", \"skipv1_minus_mha\": " << estimate_json(r.skipv1_minus_mha->value, r.skipv1_minus_mha->se) << "}";
    if (s.common.format == "table")
      std::cout << std::setw(4) << e.task.d << std::setw(5) << e.task.n << std::setw(7) << e.task.sigma << std::setw(3)
                << e.a << "   " << fixed(mha.best_loss) << " (" << fixed(mha.best_se) << ")  " << fixed(mha.reference->value)
                << " (" << fixed(mha.reference->se) << ")   " << fixed(skip.best_loss) << " (" << fixed(skip.best_se)
                << ")    " << fixed(skip.reference->value) << " (" << fixed(skip.reference->se) << ")   "
                << fixed(r.C.value) << "\n";
  }
  progress("points", points.size(), points.size());
  json << "]}\n";
  if (s.common.format == "json") std::cout << json.str();
  results::Figure f{"Trained losses against the bounds (Assumption 1, d = " + std::to_string(s.ds.front()) +
                        ", n = " + std::to_string(s.ns.front()) + ", sigma = " + text_num(s.sigmas.front()) + ")",
                    "a (rows of A)", "loss E|y_hat - y|^2", false, false, {},
                    {"set key top center", "set xtics 1", "set yrange [0:24]"}};
  f.series = {{"a", "mha_bound", "", "MHA lower bound C + C3 + c_a", "lines dt 2 lw 2 lc rgb '#c03020'"},
              {"a", "mha_trained", "", "MHA trained (best restart)", "points pt 7 ps 1.3 lc rgb '#c03020'"},
              {"a", "skipv1_construction", "", "SkipV1 construction value", "lines dt 2 lw 2 lc rgb '#2060c0'"},
              {"a", "skipv1_trained", "", "SkipV1 trained (best restart)", "points pt 5 ps 1.3 lc rgb '#2060c0'"},
              {"a", "C", "", "Bayes loss C", "lines dt 3 lc rgb 'black'"}};
  // The figure draws the first (d, n, sigma); the CSV and HDF5 hold every point.
  results::Table first = table;
  const std::size_t rows_first = std::size_t(s.ds.front() + 1);
  for (auto& col : first.columns) col.values.resize(rows_first);
  write_outputs(s.common, {table}, table, first, f, command_line);
  return 0;
}

// ---------------------------------------------------------------- anchor

int run_anchor_command(const CommonArgs& a, const std::string& command_line) {
  AnchorConfig c;
  c.task = task_of(a), c.train = train_of(a), c.restarts = a.restarts, c.eval_samples = a.eval_samples;
  c.seed = a.seed, c.threads = a.threads;
  validate(c);
  prepare(a);
  require_train_memory(a, a.d, a.n, a.restarts, 0);
  const AnchorResult r = run_anchor(c, progress_of("icl anchor", "restarts", a.quiet));
  const AnchorRun& best = r.runs[std::size_t(r.best)];
  results::Table summary{"anchor", {{"restart", {}}, {"trained_loss", {}}, {"trained_se", {}}, {"analytic_optimum", {}},
                                    {"eta_star", {}}, {"relative_gap", {}}, {"paired_gap_mc", {}}, {"paired_gap_se", {}},
                                    {"gd_mc_loss", {}}, {"gd_mc_se", {}}}};
  results::Table curves{"curves", {{"step", best.curve.step}}};
  for (std::size_t i = 0; i < r.runs.size(); ++i) {
    const auto& run = r.runs[i];
    const double row[] = {double(i), run.trained.value, run.trained.se, r.analytic.loss, r.analytic.eta,
                          (run.trained.value - r.analytic.loss) / r.analytic.loss, run.gap_to_gd.value, run.gap_to_gd.se,
                          r.gd_monte_carlo.value, r.gd_monte_carlo.se};
    for (std::size_t k = 0; k < summary.columns.size(); ++k) summary.columns[k].values.push_back(row[k]);
    curves.columns.push_back({"restart_" + std::to_string(i), run.curve.loss});
  }
  results::Figure f{"One-layer linear self-attention against the best one-step GD (d = " + std::to_string(a.d) +
                        ", n = " + std::to_string(a.n) + ", sigma = " + text_num(a.sigma) + ")",
                    "Adam step", "batch loss E|y_hat - y|^2", false, true, {}, {"set key top right"}};
  for (std::size_t i = 0; i < r.runs.size(); ++i)
    f.series.push_back({"step", "restart_" + std::to_string(i), "", "trained, restart " + std::to_string(i), "lines lw 2"});
  f.series.push_back({"", "", text_num(r.analytic.loss), "analytic one-step GD optimum L(eta*)", "lines dt 2 lw 2 lc rgb 'black'"});
  write_outputs(a, {summary, curves}, summary, curves, f, command_line);
  const double rel = r.relative_gap();
  if (a.format == "json") {
    std::ostringstream o;
    o << "{\"command\": \"icl anchor\", \"seed\": " << a.seed << ", \"d\": " << a.d << ", \"n\": " << a.n
      << ", \"sigma\": " << num(a.sigma) << ", \"steps\": " << a.steps << ", \"batch\": " << a.batch
      << ", \"lr\": " << num(a.lr) << ", \"eta_star\": " << num(r.analytic.eta)
      << ", \"analytic_optimum\": " << num(r.analytic.loss)
      << ", \"gd_monte_carlo\": " << estimate_json(r.gd_monte_carlo.value, r.gd_monte_carlo.se)
      << ", \"trained\": " << estimate_json(best.trained.value, best.trained.se) << ", \"best_restart\": " << r.best
      << ", \"relative_gap\": " << num(rel) << ", \"paired_gap\": " << estimate_json(best.gap_to_gd.value, best.gap_to_gd.se)
      << ", \"restarts\": [";
    for (std::size_t i = 0; i < r.runs.size(); ++i)
      o << (i ? ", " : "") << estimate_json(r.runs[i].trained.value, r.runs[i].trained.se);
    o << "]}\n";
    std::cout << o.str();
  } else {
    std::cout << "icl anchor: one-layer linear self-attention (tokens [x_i; y_i], query [x_{n+1}; 0], residual)\n"
              << "  d = " << a.d << ", n = " << a.n << ", sigma = " << a.sigma << ", W0 = 0; " << a.restarts << " restarts x "
              << a.steps << " Adam steps, batch " << a.batch << ", lr " << a.lr << "; seed " << a.seed << "\n"
              << "  analytic one-step GD optimum: eta* = 1/(n+d+1+sigma^2) = " << text_num(r.analytic.eta)
              << ", L(eta*) = " << fixed(r.analytic.loss) << "\n"
              << "  eta* step on the " << a.eval_samples << " held-out prompts: " << fixed(r.gd_monte_carlo.value) << " +- "
              << fixed(r.gd_monte_carlo.se) << "\n";
    for (std::size_t i = 0; i < r.runs.size(); ++i)
      std::cout << "  restart " << i << ": trained " << fixed(r.runs[i].trained.value) << " +- "
                << fixed(r.runs[i].trained.se) << ", paired gap to the eta* step " << fixed(r.runs[i].gap_to_gd.value)
                << " +- " << fixed(r.runs[i].gap_to_gd.se) << "\n";
    std::cout << "  best trained " << fixed(best.trained.value) << " vs analytic " << fixed(r.analytic.loss)
              << ": relative gap " << fixed(100 * rel, 2) << "%\n";
  }
  return 0;
}

// ---------------------------------------------------------------- depth

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
  require_train_memory(a.common, a.common.d, a.common.n, 2.0 * double(a.layers.size()), 0);
  const std::vector<DepthRun> runs = run_depth(c, progress_of("icl depth", "runs", a.common.quiet));
  results::Table losses{"depth", {{"layers", {}}, {"skipv1", {}}, {"trained_loss", {}}, {"trained_se", {}},
                                  {"gd_same_steps_loss", {}}}};
  results::Table probes{"probe", {{"layers", {}}, {"skipv1", {}}, {"layer", {}}, {"layer_loss", {}}, {"gd_eta", {}},
                                  {"gd_loss", {}}, {"cosine", {}}, {"relative_distance", {}}}};
  results::Table mha_fig{"depth_mha", {{"layers", {}}, {"mha", {}}, {"gd", {}}}};
  results::Table skip_fig{"depth_skipv1", {{"layers", {}}, {"skipv1", {}}}};
  std::ostringstream json;
  json << "{\"command\": \"icl depth\", \"seed\": " << a.common.seed << ", \"d\": " << a.common.d << ", \"n\": " << a.common.n
       << ", \"sigma\": " << num(a.common.sigma) << ", \"steps\": " << a.common.steps << ", \"runs\": [";
  if (a.common.format == "table")
    std::cout << "icl depth: L-layer linear self-attention, " << a.heads << " heads, residual, concatenated tokens; d = "
              << a.common.d << ", n = " << a.common.n << ", sigma = " << a.common.sigma << "; " << a.common.steps
              << " Adam steps; seed " << a.common.seed << "\n"
              << "  L  model    trained loss (se)   | layer l: loss of its y-slot, GD-l loss (eta_l), cosine, rel. distance\n";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const DepthRun& r = runs[i];
    const double gd_loss = r.probes.back().gd.loss;
    for (auto [k, v] : {std::pair{0, double(r.layers)}, {1, double(r.skipv1)}, {2, r.trained.value}, {3, r.trained.se},
                        {4, gd_loss}})
      losses.columns[std::size_t(k)].values.push_back(v);
    if (r.skipv1) skip_fig.columns[0].values.push_back(r.layers), skip_fig.columns[1].values.push_back(r.trained.value);
    else
      mha_fig.columns[0].values.push_back(r.layers), mha_fig.columns[1].values.push_back(r.trained.value),
          mha_fig.columns[2].values.push_back(gd_loss);
    json << (i ? ", " : "") << "{\"layers\": " << r.layers << ", \"model\": " << json_quote(r.skipv1 ? "skipv1" : "mha")
         << ", \"trained\": " << estimate_json(r.trained.value, r.trained.se) << ", \"probes\": [";
    if (a.common.format == "table")
      std::cout << "  " << r.layers << "  " << std::left << std::setw(7) << (r.skipv1 ? "skipv1" : "mha") << std::right
                << "  " << fixed(r.trained.value) << " (" << fixed(r.trained.se) << ")\n";
    for (std::size_t l = 0; l < r.probes.size(); ++l) {
      const LayerProbe& p = r.probes[l];
      const double row[] = {double(r.layers), double(r.skipv1), double(p.layer), p.model_loss, p.gd.eta, p.gd.loss,
                            p.cosine, p.relative_distance};
      for (std::size_t k = 0; k < probes.columns.size(); ++k) probes.columns[k].values.push_back(row[k]);
      json << (l ? ", " : "") << "{\"layer\": " << p.layer << ", \"layer_loss\": " << num(p.model_loss)
           << ", \"gd_eta\": " << num(p.gd.eta) << ", \"gd_loss\": " << num(p.gd.loss) << ", \"cosine\": " << num(p.cosine)
           << ", \"relative_distance\": " << num(p.relative_distance) << "}";
      if (a.common.format == "table")
        std::cout << "       layer " << p.layer << ": " << fixed(p.model_loss) << ", GD-" << p.layer << " " << fixed(p.gd.loss)
                  << " (eta " << text_num(p.gd.eta) << "), cos " << fixed(p.cosine, 3) << ", rel " << fixed(p.relative_distance, 3)
                  << "\n";
    }
    json << "]}";
  }
  json << "]}\n";
  if (a.common.format == "json") std::cout << json.str();
  // Figure: loss against L for MHA, SkipV1 and GD with L steps.
  results::Table fig{"depth_figure", {{"layers", {}}, {"mha", {}}, {"skipv1", {}}, {"gd", {}}}};
  for (const DepthRun& r : runs) {
    if (r.skipv1) continue;
    double skip = std::nan("");
    for (const DepthRun& s : runs)
      if (s.skipv1 && s.layers == r.layers) skip = s.trained.value;
    fig.columns[0].values.push_back(r.layers), fig.columns[1].values.push_back(r.trained.value);
    fig.columns[2].values.push_back(std::isnan(skip) ? r.trained.value : skip);  // L = 1: SkipV1 is MHA
    fig.columns[3].values.push_back(r.probes.back().gd.loss);
  }
  results::Figure f{"Depth: trained L-layer linear attention against L steps of GD (d = " + std::to_string(a.common.d) +
                        ", n = " + std::to_string(a.common.n) + ")",
                    "layers L", "held-out loss", false, false, {}, {"set key top right", "set xtics 1"}};
  f.series = {{"layers", "mha", "", "MHA", "linespoints pt 7 lw 2"},
              {"layers", "skipv1", "", "SkipV1 (L = 1: same as MHA)", "linespoints pt 5 lw 2"},
              {"layers", "gd", "", "GD, L steps, best constant step", "linespoints dt 2 lc rgb 'black'"}};
  write_outputs(a.common, {losses, probes, fig}, probes, fig, f, command_line);
  return 0;
}

const char* kExit =
    "Exit status: 0 success, 2 usage error (one line on stderr, nothing written),\n"
    "3 a numerical failure (a diverged run) or another error.";

}  // namespace

std::vector<Command> add_icl_train_commands(CLI::App& icl, const std::string& command_line) {
  std::vector<Command> out;
  {
    auto t = std::make_shared<TrainArgs>();
    auto* cmd = icl.add_subcommand("train", "Experiments 2 and 3: trained two-layer linear attention (MHA, SkipV1, ResFormer, SVFormer)");
    add_common_options(cmd, t->common, {.w0 = true});
    cmd->add_flag("--assumption1", t->assumption1,
                  "Experiment 2: Assumption 1's copying first layer (A = [I_a 0], B = [0 I_(d-a)]); default: a learned first layer (experiment 3)");
    cmd->add_flag("--learn-ab", t->learn_ab, "With --assumption1: learn A and B (started at the coordinate copying layer)");
    cmd->add_option("--a", t->a, "Rows of A under Assumption 1 (default d)")->check(integer_in(0, 64));
    cmd->add_option("--models", t->models, "Models to train: mha, skipv1, resformer, svformer")->delimiter(',')->capture_default_str();
    cmd->add_option("--theory-prompts", t->theory_prompts, "Monte Carlo prompts for C and the bounds")
        ->check(integer64_in(2, 100000000))
        ->capture_default_str();
    cmd->footer(
        "Trains each model from --restarts initializations with Adam on fresh batches (the same prompts for every\n"
        "model), reports the held-out loss with its standard error, the best run and the spread, the Bayes loss C,\n"
        "and under --assumption1 MHA's lower bound C + C3 + c_a and the SkipV1 construction's value (icl theory).\n"
        "Also the KV cache per token and parameters of each model's decoder form. Defaults: d = 4, n = 16,\n"
        "sigma = 0.5, W0 = 0, 3000 steps, batch 64, lr 0.01, 3 restarts, 20000 held-out prompts, seed 1.\n" +
        std::string(kExit));
    out.push_back({cmd, [t, command_line] { return run_train(*t, command_line); }});
  }
  {
    auto s = std::make_shared<SweepArgs>();
    auto* cmd = icl.add_subcommand("sweep", "Trained MHA and SkipV1 under Assumption 1 for a = 0..d against the bound lines");
    add_common_options(cmd, s->common, {.task = false, .w0 = true});
    cmd->add_option("--d-list", s->ds, "Values of d")->delimiter(',')->capture_default_str();
    cmd->add_option("--n-list", s->ns, "Values of n")->delimiter(',')->capture_default_str();
    cmd->add_option("--sigma-list", s->sigmas, "Values of sigma")->delimiter(',')->capture_default_str();
    cmd->add_option("--theory-prompts", s->theory_prompts, "Monte Carlo prompts for C and the bounds")
        ->check(integer64_in(2, 100000000))
        ->capture_default_str();
    cmd->footer(
        "For every (d, n, sigma) of the lists and a = 0..d: trains MHA and SkipV1 with Assumption 1's fixed copying\n"
        "layer and reports the best held-out losses against MHA's lower bound and the SkipV1 construction's value.\n"
        "The figure draws the first (d, n, sigma). Defaults: d-list 4, n-list 16, sigma-list 0.5, W0 = 0,\n"
        "3000 steps, batch 64, lr 0.01, 3 restarts, 20000 held-out prompts, seed 1.\n" +
        std::string(kExit));
    out.push_back({cmd, [s, command_line] { return run_sweep(*s, command_line); }});
  }
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
        std::string(kExit));
    out.push_back({cmd, [a, command_line] { return run_anchor_command(*a, command_line); }});
  }
  {
    auto a = std::make_shared<DepthArgs>();
    a->common.steps = 1500, a->common.batch = 64, a->common.lr = 5e-3, a->common.restarts = 1;
    auto* cmd = icl.add_subcommand("depth", "Experiment 5: depth, SkipV1 against MHA, and a layerwise probe against GD");
    add_common_options(cmd, a->common, {.restarts = false});
    cmd->add_option("--layers", a->layers, "Depths L to train")->delimiter(',')->capture_default_str();
    cmd->add_option("--heads", a->heads, "Heads per layer (even; SkipV1 takes the second half from layer 1)")
        ->check(integer_in(1, 64))
        ->capture_default_str();
    cmd->footer(
        "Trains L-layer linear self-attention (residual, concatenated tokens) for each L, MHA and SkipV1 (L >= 2),\n"
        "and compares the query's y-slot after each layer l with l steps of GD from zero (best constant step).\n"
        "One run per L and model. Defaults: d = 4, n = 16, sigma = 0.5, L = 1..4,\n"
        "2 heads, 1500 steps, batch 64, lr 0.005, 20000 held-out prompts, seed 1.\n" +
        std::string(kExit));
    out.push_back({cmd, [a, command_line] { return run_depth_command(*a, command_line); }});
  }
  return out;
}

}  // namespace qkvlab::cli
