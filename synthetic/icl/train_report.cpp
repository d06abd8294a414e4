#include "synthetic/icl/train_report.hpp"

#include "core/errors.hpp"
#include "core/parallel.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <sstream>
#include <stdexcept>

namespace qkvlab::icl {

namespace {

using results::Value;

double finite(double v) {
  if (!std::isfinite(v)) throw NumericalError("a reported value is not finite");
  return v;
}

// A number in text, figures and stream tags (9 significant digits, as always: the
// sweep's stream names carry sigma this way, so changing it would change the draws).
std::string text_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", finite(v));
  return buf;
}

// A number in the tables: `digits` decimals below 1e6 in magnitude (at most 7 + 1 + digits characters);
// from 1e6 up as results::short_number writes it (%.6g, 4e+30), so a large value prints as the number it
// is, never cut to a buffer's width.
std::string fixed(double v, int digits = 4) {
  if (std::abs(finite(v)) >= 1e6) return results::short_number(v);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

Value estimate_value(double mean, double se) {
  Value v = Value::object();
  v.set("value", finite(mean));
  v.set("se", finite(se));
  return v;
}

Value estimate_value(const Estimate& e) { return estimate_value(e.value, e.se); }

void add_row(results::Table& t, const std::vector<double>& row) {
  for (std::size_t k = 0; k < t.columns.size(); ++k) t.columns[k].values.push_back(row[k]);
}

results::Table empty_table(const std::string& name, const std::vector<std::string>& columns) {
  results::Table t{name, {}};
  for (const auto& c : columns) t.columns.push_back({c, {}});
  return t;
}

// The fields every trained experiment's JSON opens with.
Value experiment_header(const char* command, std::uint64_t seed, const Task& task, int steps) {
  Value o = Value::object();
  o.set("command", command);
  o.set("seed", seed);
  o.set("d", task.d);
  o.set("n", task.n);
  o.set("sigma", finite(task.sigma));
  o.set("steps", steps);
  return o;
}

// The tables' model codes, as docs/figures.md lists them: 0 mha, 1 skipv1, 2 resformer, 3 svformer
// (VariantKind's own order is not a file format: it moved when variants were added).
double model_code(VariantKind v) {
  switch (v) {
    case VariantKind::vanilla: return 0;
    case VariantKind::skipv1: return 1;
    case VariantKind::resformer: return 2;
    case VariantKind::svformer: return 3;
    default: throw std::logic_error("icl: no table code for the variant " + variant_name(v));
  }
}
std::string reference_name(VariantKind v) { return v == VariantKind::vanilla ? "lower_bound" : "construction_value"; }
double w0_scale(const Task& t) { return t.W0.size() ? t.W0(0, 0) : 0.0; }

}  // namespace

double trained_memory_bytes(int d, int n, int batch, int eval_samples, int threads, double runs) {
  const double tokens = 2.0 * n + 1, workers = std::min<double>(worker_count(threads), runs);
  return workers * 30 * 8 * double(batch) * tokens * 3 * d + runs * 8 * 2 * double(eval_samples) +
         workers * 2000.0 * d * tokens * 3 * d * 8;
}

double depth_held_out_bytes(const DepthConfig& c) {
  const double d = c.task.d, n = c.task.n, prompts = c.eval_samples;
  // A Prompt: W* (d x d), X and Y (d x n), x_{n+1} and y_{n+1}, five heap blocks (about 32 bytes of
  // allocator overhead each) and the 104 bytes of the struct in the vector.
  const double prompt = 8 * (d * d + 2 * d * n + 2 * d) + 5 * 32 + 104;
  const double max_layers = *std::max_element(c.layers.begin(), c.layers.end());
  const double runs = double(c.layers.size()) * 2, workers = std::min<double>(worker_count(c.threads), runs);
  const double searchers = std::min<double>(worker_count(c.threads), max_layers);
  // Per prompt, d doubles for: GD's last iterate at each step count (kept), the step search's iterates
  // (at most max_layers per searching worker) and each running worker's layer predictions.
  return prompts * (prompt + 8 * d * max_layers * (1 + searchers + workers));
}

// ---------------------------------------------------------------- train

ExperimentTables train_tables(const TrainExperimentResult& r) {
  const auto& c = r.config;
  results::Table runs = empty_table("runs", {"model", "restart", "loss", "loss_se", "final_train_loss", "selection_loss"});
  results::Table curves{"curves", {{"step", r.runs.front().curve.step}}};
  results::Table models = empty_table(
      "models", {"model", "best_loss", "best_se", "mean", "min", "max", "kv_cache_per_token", "decoder_parameters", "C", "C_se"});
  // MHA's lower bound and the SkipV1 construction's value (Assumption 1 runs only).
  results::Table references =
      empty_table("references", {"model", "reference", "reference_se", "best_minus_reference", "difference_se"});
  for (const auto& run : r.runs) {
    add_row(runs, {model_code(run.model), double(run.restart), run.loss.value, run.loss.se, run.curve.loss.back(),
                   run.selection_loss});
    curves.columns.push_back({variant_name(run.model) + "_" + std::to_string(run.restart), run.curve.loss});
  }
  for (const auto& s : r.models) {
    add_row(models, {model_code(s.model), s.best_loss, s.best_se, s.mean, s.min, s.max,
                     double(s.accounting.kv_cache_per_token), double(s.accounting.parameters), r.C.value, r.C.se});
    if (s.reference)
      add_row(references, {model_code(s.model), s.reference->value, s.reference->se, s.best_loss - s.reference->value,
                           std::hypot(s.best_se, s.reference->se)});
  }
  results::Figure f{"icl train: training batch loss (dashed: references), " + first_layer_name(c.first) + ", d = " +
                        std::to_string(c.task.d) + ", n = " + std::to_string(c.task.n),
                    "Adam step", "batch loss E|y_hat - y|^2", false, true, {}, {"set key top right"}};
  int colour = 1;
  for (const auto& s : r.models) {
    const auto& best = r.runs[std::size_t(s.best)];
    f.series.push_back({"step", variant_name(best.model) + "_" + std::to_string(best.restart), "",
                        variant_name(s.model) + " (best restart)", "lines lw 2 lc " + std::to_string(colour++), ""});
    if (s.reference)
      f.series.push_back({"", "", text_num(s.reference->value),
                          s.model == VariantKind::vanilla ? mha_bound_label(c.task, c.a) : "SkipV1 construction value",
                          "lines dt 2 lw 2 lc " + std::to_string(colour - 1), ""});
  }
  f.series.push_back({"", "", text_num(r.C.value), "Bayes loss C", "lines dt 3 lc rgb 'black'", ""});
  std::vector<results::Table> tables{runs, curves, models};
  if (r.theory) tables.push_back(references);
  return {tables, runs, {curves, f}};
}

std::string train_text(const TrainExperimentResult& r) {
  const auto& c = r.config;
  std::ostringstream o;
  o << "icl train: d = " << c.task.d << ", n = " << c.task.n << ", sigma = " << c.task.sigma
    << ", W0 = " << (c.task.W0.size() ? text_num(c.task.W0(0, 0)) + " I" : "0") << ", first layer "
    << first_layer_name(c.first) << (c.first != FirstLayer::attention ? ", a = " + std::to_string(c.a) : "") << "\n  "
    << c.restarts << " restarts x " << c.train.steps << " Adam steps, batch " << c.train.batch << ", lr " << c.train.lr
    << "; held-out loss on " << c.eval_samples << " prompts, the best restart chosen on " << c.eval_samples
    << " others; seed " << c.seed << "\n";
  o << "  Bayes loss C = " << fixed(r.C.value) << " +- " << fixed(r.C.se) << "\n";
  o << "  model      restart  held-out loss (se)      last train loss  selection loss\n";
  for (const auto& run : r.runs)
    o << "  " << std::left << std::setw(10) << variant_name(run.model) << std::right << std::setw(4) << run.restart
      << "     " << fixed(run.loss.value) << " (" << fixed(run.loss.se) << ")      " << fixed(run.curve.loss.back())
      << "        " << fixed(run.selection_loss) << "\n";
  o << "  model      best (se)            spread [min, max]      KV/token  params(decoder)  params(trained)\n";
  for (const auto& s : r.models)
    o << "  " << std::left << std::setw(10) << variant_name(s.model) << std::right << " " << fixed(s.best_loss) << " ("
      << fixed(s.best_se) << ")   [" << fixed(s.min) << ", " << fixed(s.max) << "]   " << std::setw(6)
      << s.accounting.kv_cache_per_token << "  " << std::setw(12) << s.accounting.parameters << "  " << std::setw(12)
      << r.runs[std::size_t(s.best)].trained_parameters << "\n";
  for (const auto& s : r.models) {
    if (!s.reference) continue;
    const double diff = s.best_loss - s.reference->value, se = std::hypot(s.best_se, s.reference->se);
    o << "  " << variant_name(s.model) << ": trained " << fixed(s.best_loss) << " vs "
      << (s.model == VariantKind::vanilla ? mha_bound_label(c.task, c.a) + " " : "construction value (C + C3 at a = d) ")
      << fixed(s.reference->value) << " +- " << fixed(s.reference->se) << ": difference " << fixed(diff) << " +- "
      << fixed(se) << " (" << fixed(diff / se, 1) << " se)\n";
  }
  if (r.skipv1_minus_mha)
    o << "  skipv1 - mha (best runs, paired): " << fixed(r.skipv1_minus_mha->value) << " +- "
      << fixed(r.skipv1_minus_mha->se) << "\n";
  return o.str();
}

results::Value train_json(const TrainExperimentResult& r) {
  const auto& c = r.config;
  Value o = Value::object();
  o.set("command", "icl train");
  o.set("seed", c.seed);
  o.set("d", c.task.d);
  o.set("n", c.task.n);
  o.set("sigma", finite(c.task.sigma));
  o.set("w0_scale", finite(w0_scale(c.task)));
  o.set("first_layer", first_layer_name(c.first));
  o.set("a", c.a);
  o.set("steps", c.train.steps);
  o.set("batch", c.train.batch);
  o.set("lr", finite(c.train.lr));
  o.set("restarts", c.restarts);
  o.set("eval_samples", c.eval_samples);
  o.set("C", estimate_value(r.C));
  o.set("zero_predictor_loss", finite(zero_predictor_loss(c.task)));
  Value runs = Value::array();
  for (const auto& run : r.runs) {
    Value v = Value::object();
    v.set("model", variant_name(run.model));
    v.set("restart", run.restart);
    v.set("loss", estimate_value(run.loss));
    v.set("final_train_loss", finite(run.curve.loss.back()));
    v.set("selection_loss", finite(run.selection_loss));
    runs.push(std::move(v));
  }
  o.set("runs", std::move(runs));
  Value models = Value::array();
  for (const auto& s : r.models) {
    Value v = Value::object();
    v.set("model", variant_name(s.model));
    v.set("best", estimate_value(s.best_loss, s.best_se));
    v.set("best_restart", r.runs[std::size_t(s.best)].restart);
    v.set("mean", finite(s.mean));
    v.set("min", finite(s.min));
    v.set("max", finite(s.max));
    v.set("kv_cache_per_token", std::int64_t(s.accounting.kv_cache_per_token));
    v.set("decoder_parameters", std::int64_t(s.accounting.parameters));
    v.set("trained_parameters", std::int64_t(r.runs[std::size_t(s.best)].trained_parameters));
    if (s.reference) {
      v.set(reference_name(s.model), estimate_value(*s.reference));
      if (s.model == VariantKind::vanilla) v.set("lower_bound_holds", mha_bound_holds(c.task));  // W_0 = 0 only
      v.set("best_minus_reference", estimate_value(s.best_loss - s.reference->value, std::hypot(s.best_se, s.reference->se)));
    }
    models.push(std::move(v));
  }
  o.set("models", std::move(models));
  if (r.skipv1_minus_mha) o.set("skipv1_minus_mha", estimate_value(*r.skipv1_minus_mha));
  return o;
}

// ---------------------------------------------------------------- sweep

std::vector<TrainExperimentConfig> sweep_points(const TrainExperimentConfig& base, const std::vector<int>& ds,
                                                const std::vector<int>& ns, const std::vector<double>& sigmas) {
  std::vector<TrainExperimentConfig> points;
  for (int d : ds)
    for (int n : ns)
      for (double sigma : sigmas)
        for (int a = 0; a <= d; ++a) {
          TrainExperimentConfig e = base;
          e.task = Task{d, n, sigma, {}};
          if (base.task.W0.size()) e.task.W0 = base.task.W0(0, 0) * MatD::Identity(d, d);
          validate(e.task);
          e.first = FirstLayer::copying_fixed, e.a = a, e.models = {VariantKind::vanilla, VariantKind::skipv1};
          e.tag = "sweep/d=" + std::to_string(d) + "/n=" + std::to_string(n) + "/sigma=" + text_num(sigma) +
                  "/a=" + std::to_string(a);
          validate(e);
          points.push_back(e);
        }
  return points;
}

TrainExperimentConfig sweep_base_of(const TrainSettings& s, long theory_prompts) {
  TrainExperimentConfig base;
  base.task = task_of(s), base.train = train_of(s);
  base.restarts = s.restarts, base.eval_samples = s.eval_samples, base.theory_prompts = theory_prompts;
  base.seed = s.seed, base.threads = s.threads;
  return base;
}

TrainSweep run_train_sweep(const std::vector<TrainExperimentConfig>& points,
                           const std::function<void(std::size_t, std::size_t)>& progress) {
  TrainSweep s{points, {}};
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (progress) progress(i, points.size());
    s.results.push_back(run_train_experiment(points[i]));
  }
  if (progress) progress(points.size(), points.size());
  return s;
}

ExperimentTables sweep_tables(const TrainSweep& s) {
  results::Table table = empty_table(
      "sweep", {"d", "n", "sigma", "w0_scale", "a", "mha_trained", "mha_trained_se", "mha_bound", "mha_bound_se",
                "skipv1_trained", "skipv1_trained_se", "skipv1_construction", "skipv1_construction_se", "C", "C_se",
                "skipv1_minus_mha", "skipv1_minus_mha_se"});
  for (std::size_t i = 0; i < s.points.size(); ++i) {
    const TrainExperimentResult& r = s.results[i];
    const ModelSummary &mha = r.models[0], &skip = r.models[1];
    const auto& e = s.points[i];
    add_row(table, {double(e.task.d), double(e.task.n), e.task.sigma, w0_scale(e.task), double(e.a), mha.best_loss,
                    mha.best_se, mha.reference->value, mha.reference->se, skip.best_loss, skip.best_se,
                    skip.reference->value, skip.reference->se, r.C.value, r.C.se, r.skipv1_minus_mha->value,
                    r.skipv1_minus_mha->se});
  }
  const Task& first = s.points.front().task;
  results::Figure f{"Trained losses against the bounds (Assumption 1, d = " + std::to_string(first.d) +
                        ", n = " + std::to_string(first.n) + ", sigma = " + text_num(first.sigma) + ")",
                    "a (rows of A)", "loss E|y_hat - y|^2", false, false, {},
                    {"set key top center", "set xtics 1", "set yrange [0:24]"}};
  f.series = {{"a", "mha_bound", "", mha_bound_label(first, -1), "lines dt 2 lw 2 lc rgb '#c03020'", ""},
              {"a", "mha_trained", "", "MHA trained (best restart)", "points pt 7 ps 1.3 lc rgb '#c03020'", ""},
              {"a", "skipv1_construction", "", "SkipV1 construction value", "lines dt 2 lw 2 lc rgb '#2060c0'", ""},
              {"a", "skipv1_trained", "", "SkipV1 trained (best restart)", "points pt 5 ps 1.3 lc rgb '#2060c0'", ""},
              {"a", "C", "", "Bayes loss C", "lines dt 3 lc rgb 'black'", ""}};
  results::Table drawn = table;  // the first (d, n, sigma): a = 0 … d
  for (auto& col : drawn.columns) col.values.resize(std::size_t(first.d + 1));
  return {{table}, table, {drawn, f}};
}

std::string sweep_text(const TrainSweep& s) {
  const auto& c = s.points.front();
  std::ostringstream o;
  o << "icl sweep: Assumption 1 (A = [I_a 0], B = [0 I_(d-a)] fixed), best of " << c.restarts << " restarts x "
    << c.train.steps << " steps; seed " << c.seed << "\n"
    << "   d    n  sigma  a   MHA trained (se)   MHA bound (se)     SkipV1 trained (se)  SkipV1 constr. (se)  C\n";
  for (std::size_t i = 0; i < s.points.size(); ++i) {
    const TrainExperimentResult& r = s.results[i];
    const ModelSummary &mha = r.models[0], &skip = r.models[1];
    const auto& e = s.points[i];
    o << std::setw(4) << e.task.d << std::setw(5) << e.task.n << std::setw(7) << e.task.sigma << std::setw(3) << e.a
      << "   " << fixed(mha.best_loss) << " (" << fixed(mha.best_se) << ")  " << fixed(mha.reference->value) << " ("
      << fixed(mha.reference->se) << ")   " << fixed(skip.best_loss) << " (" << fixed(skip.best_se) << ")    "
      << fixed(skip.reference->value) << " (" << fixed(skip.reference->se) << ")   " << fixed(r.C.value) << "\n";
  }
  if (!mha_bound_holds(c.task))
    o << "  MHA bound: the formula C + C3 + c_a (C + E|W_D|^2 at a = d), not a lower bound at W0 != 0, where the\n"
         "  proof's Lemmas 2-4 fail (icl lemmas)\n";
  return o.str();
}

results::Value sweep_json(const TrainSweep& s) {
  const auto& c = s.points.front();
  Value o = Value::object();
  o.set("command", "icl sweep");
  o.set("seed", c.seed);
  o.set("steps", c.train.steps);
  o.set("restarts", c.restarts);
  Value points = Value::array();
  for (std::size_t i = 0; i < s.points.size(); ++i) {
    const TrainExperimentResult& r = s.results[i];
    const ModelSummary &mha = r.models[0], &skip = r.models[1];
    const auto& e = s.points[i];
    Value v = Value::object();
    v.set("d", e.task.d);
    v.set("n", e.task.n);
    v.set("sigma", finite(e.task.sigma));
    v.set("w0_scale", finite(w0_scale(e.task)));
    v.set("zero_predictor_loss", finite(zero_predictor_loss(e.task)));
    v.set("a", e.a);
    v.set("mha_bound_holds", mha_bound_holds(e.task));
    v.set("mha_trained", estimate_value(mha.best_loss, mha.best_se));
    v.set("mha_bound", estimate_value(*mha.reference));
    v.set("skipv1_trained", estimate_value(skip.best_loss, skip.best_se));
    v.set("skipv1_construction", estimate_value(*skip.reference));
    v.set("C", estimate_value(r.C));
    v.set("skipv1_minus_mha", estimate_value(*r.skipv1_minus_mha));
    points.push(std::move(v));
  }
  o.set("points", std::move(points));
  return o;
}

// ---------------------------------------------------------------- anchor

ExperimentTables anchor_tables(const AnchorConfig& c, const AnchorResult& r) {
  const AnchorRun& best = r.runs[std::size_t(r.best)];
  results::Table summary = empty_table("anchor", {"restart", "trained_loss", "trained_se", "analytic_optimum", "eta_star",
                                                  "relative_gap", "paired_gap_mc", "paired_gap_se", "gd_mc_loss", "gd_mc_se",
                                                  "selection_loss"});
  results::Table curves{"curves", {{"step", best.curve.step}}};
  for (std::size_t i = 0; i < r.runs.size(); ++i) {
    const auto& run = r.runs[i];
    add_row(summary, {double(i), run.trained.value, run.trained.se, r.analytic.loss, r.analytic.eta,
                      (run.trained.value - r.analytic.loss) / r.analytic.loss, run.gap_to_gd.value, run.gap_to_gd.se,
                      r.gd_monte_carlo.value, r.gd_monte_carlo.se, run.selection_loss});
    curves.columns.push_back({"restart_" + std::to_string(i), run.curve.loss});
  }
  results::Figure f{"One-layer linear self-attention against the best one-step GD (d = " + std::to_string(c.task.d) +
                        ", n = " + std::to_string(c.task.n) + ", sigma = " + text_num(c.task.sigma) + ")",
                    "Adam step", "batch loss E|y_hat - y|^2", false, true, {}, {"set key top right"}};
  for (std::size_t i = 0; i < r.runs.size(); ++i)
    f.series.push_back({"step", "restart_" + std::to_string(i), "", "trained, restart " + std::to_string(i), "lines lw 2", ""});
  f.series.push_back({"", "", text_num(r.analytic.loss), "analytic one-step GD optimum L(eta*)", "lines dt 2 lw 2 lc rgb 'black'", ""});
  return {{summary, curves}, summary, {curves, f}};
}

std::string anchor_text(const AnchorConfig& c, const AnchorResult& r) {
  const AnchorRun& best = r.runs[std::size_t(r.best)];
  std::ostringstream o;
  o << "icl anchor: one-layer linear self-attention (tokens [x_i; y_i], query [x_{n+1}; 0], residual)\n"
    << "  d = " << c.task.d << ", n = " << c.task.n << ", sigma = " << c.task.sigma << ", W0 = 0; " << c.restarts
    << " restarts x " << c.train.steps << " Adam steps, batch " << c.train.batch << ", lr " << c.train.lr << "; seed "
    << c.seed << "\n"
    << "  analytic one-step GD optimum: eta* = 1/(n+d+1+sigma^2) = " << text_num(r.analytic.eta)
    << ", L(eta*) = " << fixed(r.analytic.loss) << "\n"
    << "  eta* step on the " << c.eval_samples << " held-out prompts: " << fixed(r.gd_monte_carlo.value) << " +- "
    << fixed(r.gd_monte_carlo.se) << "\n";
  for (std::size_t i = 0; i < r.runs.size(); ++i)
    o << "  restart " << i << ": trained " << fixed(r.runs[i].trained.value) << " +- " << fixed(r.runs[i].trained.se)
      << ", paired gap to the eta* step " << fixed(r.runs[i].gap_to_gd.value) << " +- " << fixed(r.runs[i].gap_to_gd.se)
      << "; selection loss " << fixed(r.runs[i].selection_loss) << "\n";
  o << "  best (lowest selection loss, on " << c.eval_samples << " other prompts) trained " << fixed(best.trained.value) << " vs analytic " << fixed(r.analytic.loss) << ": relative gap "
    << fixed(100 * r.relative_gap(), 2) << "%\n";
  return o.str();
}

results::Value anchor_json(const AnchorConfig& c, const AnchorResult& r) {
  const AnchorRun& best = r.runs[std::size_t(r.best)];
  Value o = experiment_header("icl anchor", c.seed, c.task, c.train.steps);
  o.set("batch", c.train.batch);
  o.set("lr", finite(c.train.lr));
  o.set("eta_star", finite(r.analytic.eta));
  o.set("analytic_optimum", finite(r.analytic.loss));
  o.set("gd_monte_carlo", estimate_value(r.gd_monte_carlo));
  o.set("trained", estimate_value(best.trained));
  o.set("best_restart", r.best);
  o.set("relative_gap", finite(r.relative_gap()));
  o.set("paired_gap", estimate_value(best.gap_to_gd));
  Value restarts = Value::array();
  Value selection = Value::array();
  for (const auto& run : r.runs) restarts.push(estimate_value(run.trained)), selection.push(finite(run.selection_loss));
  o.set("restarts", std::move(restarts));
  o.set("selection_losses", std::move(selection));
  return o;
}

// ---------------------------------------------------------------- depth

ExperimentTables depth_tables(const DepthConfig& c, const std::vector<DepthRun>& runs) {
  results::Table losses = empty_table("depth", {"layers", "skipv1", "trained_loss", "trained_se", "gd_same_steps_loss"});
  results::Table probes = empty_table(
      "probe", {"layers", "skipv1", "layer", "layer_loss", "gd_eta", "gd_loss", "cosine", "relative_distance"});
  for (const DepthRun& r : runs) {
    add_row(losses, {double(r.layers), double(r.skipv1), r.trained.value, r.trained.se, r.probes.back().gd.loss});
    for (const LayerProbe& p : r.probes)
      add_row(probes, {double(r.layers), double(r.skipv1), double(p.layer), p.model_loss, p.gd.eta, p.gd.loss, p.cosine,
                       p.relative_distance});
  }
  // Figure: loss against L for MHA, SkipV1 and GD with L steps.
  results::Table fig = empty_table("depth_figure", {"layers", "mha", "skipv1", "gd"});
  for (const DepthRun& r : runs) {
    if (r.skipv1) continue;
    double skip = std::nan("");
    for (const DepthRun& s : runs)
      if (s.skipv1 && s.layers == r.layers) skip = s.trained.value;
    // L = 1: SkipV1 is MHA
    add_row(fig, {double(r.layers), r.trained.value, std::isnan(skip) ? r.trained.value : skip, r.probes.back().gd.loss});
  }
  results::Figure f{"Depth: trained L-layer linear attention against L steps of GD (d = " + std::to_string(c.task.d) +
                        ", n = " + std::to_string(c.task.n) + ")",
                    "layers L", "held-out loss", false, false, {}, {"set key top right", "set xtics 1"}};
  f.series = {{"layers", "mha", "", "MHA", "linespoints pt 7 lw 2", ""},
              {"layers", "skipv1", "", "SkipV1 (L = 1: same as MHA)", "linespoints pt 5 lw 2", ""},
              {"layers", "gd", "", "GD, L steps, best constant step", "linespoints dt 2 lc rgb 'black'", ""}};
  return {{losses, probes, fig}, probes, {fig, f}};
}

std::string depth_text(const DepthConfig& c, const std::vector<DepthRun>& runs) {
  std::ostringstream o;
  o << "icl depth: L-layer linear self-attention, " << c.heads << " heads, residual, concatenated tokens; d = " << c.task.d
    << ", n = " << c.task.n << ", sigma = " << c.task.sigma << "; " << c.train.steps << " Adam steps; seed " << c.seed
    << "\n"
    << "  L  model    trained loss (se)   | layer l: loss of its y-slot, GD-l loss (eta_l), cosine, rel. distance\n";
  for (const DepthRun& r : runs) {
    o << "  " << r.layers << "  " << std::left << std::setw(7) << (r.skipv1 ? "skipv1" : "mha") << std::right << "  "
      << fixed(r.trained.value) << " (" << fixed(r.trained.se) << ")\n";
    for (const LayerProbe& p : r.probes)
      o << "       layer " << p.layer << ": " << fixed(p.model_loss) << ", GD-" << p.layer << " " << fixed(p.gd.loss)
        << " (eta " << text_num(p.gd.eta) << "), cos " << fixed(p.cosine, 3) << ", rel " << fixed(p.relative_distance, 3)
        << "\n";
  }
  return o.str();
}

results::Value depth_json(const DepthConfig& c, const std::vector<DepthRun>& runs) {
  Value o = experiment_header("icl depth", c.seed, c.task, c.train.steps);
  Value rs = Value::array();
  for (const DepthRun& r : runs) {
    Value v = Value::object();
    v.set("layers", r.layers);
    v.set("model", r.skipv1 ? "skipv1" : "mha");
    v.set("trained", estimate_value(r.trained));
    Value probes = Value::array();
    for (const LayerProbe& p : r.probes) {
      Value q = Value::object();
      q.set("layer", p.layer);
      q.set("layer_loss", finite(p.model_loss));
      q.set("gd_eta", finite(p.gd.eta));
      q.set("gd_loss", finite(p.gd.loss));
      q.set("cosine", finite(p.cosine));
      q.set("relative_distance", finite(p.relative_distance));
      probes.push(std::move(q));
    }
    v.set("probes", std::move(probes));
    rs.push(std::move(v));
  }
  o.set("runs", std::move(rs));
  return o;
}

}  // namespace qkvlab::icl
