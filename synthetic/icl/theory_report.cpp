#include "synthetic/icl/theory_report.hpp"

#include <cmath>
#include <cstdarg>
#include <cstdio>

namespace qkvlab::icl {

namespace {

using results::Value;

// printf onto a string.
void appendf(std::string& out, const char* format, ...) {
  char buf[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  out += buf;
}

std::string pm(const Estimate& e) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.6g +- %.2g", e.value, e.se);
  return buf;
}

Value values(const std::vector<Estimate>& v, bool se) {
  Value a = Value::array();
  for (const auto& e : v) a.push(se ? e.se : e.value);
  return a;
}

void set_estimate(Value& o, const std::string& name, const Estimate& e, const std::string& line_break = "") {
  o.set(name, e.value, line_break);
  o.set(name + "_se", e.se);
}

void set_estimates(Value& o, const std::string& name, const std::vector<Estimate>& v, const std::string& line_break) {
  o.set(name, values(v, false), line_break);
  o.set(name + "_se", values(v, true));
}

// lambda, C, C3, W_hat_sq, LambdaYX_sq and the per-a arrays, each with *_se; `line_break` before each group.
void set_theory_fields(Value& o, const Theory& t, const std::string& line_break) {
  set_estimates(o, "lambda", t.lambda, line_break);
  set_estimate(o, "C", t.C, line_break);
  set_estimate(o, "C3", t.C3);
  set_estimate(o, "W_hat_sq", t.W_hat_sq);
  set_estimate(o, "LambdaYX_sq", t.LambdaB_sq);
  set_estimates(o, "c_a", t.c_a, line_break);
  set_estimates(o, "skipv1_value", t.skipv1_value, line_break);
  set_estimates(o, "mha_bound", t.mha_bound, line_break);
  o.set("mha_bound_holds", mha_bound_holds(t.task));  // W_0 = 0: else the formula's value, not a bound
  set_estimates(o, "gap", t.gap, line_break);
}

// λ̄ = mean_i λ_i; its SE treats the λ_i as independent (sqrt(Σ se_i²)/d).
Estimate lambda_mean(const Theory& t) {
  Estimate m;
  for (const auto& e : t.lambda) m.value += e.value, m.se += e.se * e.se;
  return {m.value / t.task.d, std::sqrt(m.se) / t.task.d};
}

// The per-point summary: c_a at a = floor(d/2) and a = d−1 (the latter is the separation
// mha_bound[d−1] − skipv1_value[d], per prompt), the MHA bound at a = d−1 and d, SkipV1 at a = d.
std::vector<std::pair<std::string, Estimate>> point_summary(const Theory& t) {
  const auto d = std::size_t(t.task.d);
  return {{"C", t.C}, {"C3", t.C3}, {"lambda_mean", lambda_mean(t)}, {"c_a_half", t.c_a[d / 2]},
          {"c_a_dm1", t.c_a[d - 1]}, {"mha_bound_dm1", t.mha_bound[d - 1]}, {"mha_bound_d", t.mha_bound[d]},
          {"skipv1_value_d", t.skipv1_value[d]}};
}

}  // namespace

results::Table theory_by_a_table(const Theory& t) {
  results::Table tab{"by_a", {}};
  std::vector<double> a;
  for (int k = 0; k <= t.task.d; ++k) a.push_back(k);
  tab.columns.push_back({"a", a});
  auto add = [&](const std::string& name, const std::vector<Estimate>& v) {
    std::vector<double> x, s;
    for (const auto& e : v) x.push_back(e.value), s.push_back(e.se);
    tab.columns.push_back({name, x});
    tab.columns.push_back({name + "_se", s});
  };
  add("c_a", t.c_a);
  add("mha_bound", t.mha_bound);
  add("skipv1_value", t.skipv1_value);
  add("gap", t.gap);
  const std::size_t rows = a.size();
  auto constant = [&](const std::string& name, const Estimate& e) {
    tab.columns.push_back({name, std::vector<double>(rows, e.value)});
    tab.columns.push_back({name + "_se", std::vector<double>(rows, e.se)});
  };
  constant("C", t.C);
  constant("C3", t.C3);
  return tab;
}

results::Table theory_scalar_table(const Theory& t) {
  results::Table tab{"scalars", {}};
  auto add = [&](const std::string& name, const Estimate& e) {
    tab.columns.push_back({name, {e.value}});
    tab.columns.push_back({name + "_se", {e.se}});
  };
  tab.columns.push_back({"d", {double(t.task.d)}});
  tab.columns.push_back({"n", {double(t.task.n)}});
  tab.columns.push_back({"sigma", {t.task.sigma}});
  tab.columns.push_back({"w0_norm", {t.task.prior_mean().norm()}});
  tab.columns.push_back({"prompts", {double(t.options.prompts)}});
  add("C", t.C);
  add("C3", t.C3);
  add("W_hat_sq", t.W_hat_sq);
  add("LambdaYX_sq", t.LambdaB_sq);
  add("posterior_residual", t.posterior.residual);
  add("posterior_loss", t.posterior.loss);
  add("ridge_residual", t.ridge.residual);
  add("ridge_loss", t.ridge.loss);
  for (int i = 0; i < t.task.d; ++i) add("lambda_" + std::to_string(i + 1), t.lambda[std::size_t(i)]);
  return tab;
}

results::Figure theory_figure(const Theory& t) {
  char title[160];
  std::snprintf(title, sizeof title, "d = %d, n = %d, sigma = %g, ||W_0||_F = %g, %ld prompts", t.task.d, t.task.n,
                t.task.sigma, t.task.prior_mean().norm(), t.options.prompts);
  results::Figure f{title, "copy width a", "loss", false, false, {}, {"set key top left", "set xtics 1"}};
  f.series.push_back({"a", "mha_bound", "", mha_bound_label(t.task, -1), "linespoints pt 7 lw 2", ""});
  f.series.push_back({"a", "skipv1_value", "", "SkipV1 at the construction", "linespoints pt 5 lw 2", ""});
  f.series.push_back({"a", "c_a", "", "c_a", "linespoints pt 9 lw 2", ""});
  f.series.push_back({"a", "C", "", "C", "lines dt 2", ""});
  return f;
}

std::string theory_text(const Theory& t, const PriorMeanName& w0) {
  std::string o;
  appendf(o, "icl theory: d=%d n=%d sigma=%g W_0=%s (||W_0||_F=%.4g) prompts=%ld seed=%llu\n", t.task.d, t.task.n,
          t.task.sigma, w0.w0 == "zero" ? "0" : (w0.w0 + " x " + std::to_string(w0.scale)).c_str(),
          t.task.prior_mean().norm(), t.options.prompts, static_cast<unsigned long long>(t.options.seed));
  appendf(o, "C          %s\nC_3        %s\nE|W_D|^2   %s\nE|LYX^T|^2 %s\n", pm(t.C).c_str(), pm(t.C3).c_str(),
          pm(t.W_hat_sq).c_str(), pm(t.LambdaB_sq).c_str());
  for (int i = 0; i < t.task.d && i < 8; ++i) appendf(o, "lambda_%-3d %s\n", i + 1, pm(t.lambda[std::size_t(i)]).c_str());
  for (const auto& [name, f] : {std::pair{"posterior mean: ", &t.posterior}, {"ridge form:     ", &t.ridge}})
    appendf(o, "%sresidual |E[(Ux-y)x^T]| = %.3g (noise floor %.2g, chi2 %.1f on %d dof), loss %s\n", name,
            f->residual.value, f->residual.se, f->residual_chi2, t.task.d * t.task.d, pm(f->loss).c_str());
  appendf(o, "%3s  %-24s %-24s %-24s %-24s\n", "a", "c_a", "MHA bound", "SkipV1 value", "gap (bound - SkipV1)");
  for (int k = 0; k <= t.task.d; ++k) {
    const auto i = std::size_t(k);
    appendf(o, "%3d  %-24s %-24s %-24s %-24s\n", k, pm(t.c_a[i]).c_str(), pm(t.mha_bound[i]).c_str(),
            pm(t.skipv1_value[i]).c_str(), pm(t.gap[i]).c_str());
  }
  if (!mha_bound_holds(t.task))
    appendf(o, "MHA bound: the formula C + C_3 + c_a (C + E|W_D|^2 at a = d), not a lower bound here: W_0 != 0, where\n"
               "the proof's Lemmas 2-4 fail (icl lemmas)\n");
  appendf(o, "%.3g s wall, %.3g s CPU, %.3g prompts/s (two passes)\n", t.wall_seconds, t.cpu_seconds,
          2.0 * double(t.options.prompts) / t.wall_seconds);
  return o;
}

results::Value theory_json(const Theory& t, const PriorMeanName& w0, const std::string& command_line) {
  auto form = [&](const FormReport& f) {
    Value v = Value::object();
    v.set("residual_norm", f.residual.value);
    v.set("residual_norm_se", f.residual.se);
    v.set("residual_chi2", f.residual_chi2);
    v.set("residual_dof", t.task.d * t.task.d);
    set_estimate(v, "loss", f.loss);
    return v;
  };
  const std::string line = "\n ";
  Value o = Value::object();
  o.set("d", t.task.d);
  o.set("n", t.task.n);
  o.set("sigma", t.task.sigma);
  o.set("w0", w0.w0);
  o.set("w0_scale", w0.scale);
  o.set("w0_norm", t.task.prior_mean().norm());
  o.set("w0_sigma_min", Eigen::JacobiSVD<MatD>(t.task.prior_mean()).singularValues().minCoeff());
  o.set("prompts", std::int64_t(t.options.prompts));
  o.set("seed", t.options.seed);
  o.set("device", "cpu");  // the JSON contract keeps the field: the passes run on the CPU only
  set_theory_fields(o, t, line);
  o.set("posterior_mean", form(t.posterior), line);
  o.set("ridge", form(t.ridge), line);
  o.set("wall_seconds", t.wall_seconds, line);
  o.set("cpu_seconds", t.cpu_seconds);
  o.set("prompts_per_second", double(t.options.prompts) / t.wall_seconds);
  o.set("command_line", command_line);
  return o;
}

// ---- sweep

Task TheoryGrid::task(std::size_t p, bool identity_prior) const {
  const int d = int(at(p, 0));
  Task t{d, int(at(p, 1)), at(p, 2), identity_prior ? MatD(at(p, 3) * MatD::Identity(d, d)) : MatD(MatD::Zero(d, d))};
  validate(t);
  require_posterior(t);
  return t;
}

TheorySweep run_theory_sweep(const TheoryGrid& grid, bool identity_prior, const TheoryOptions& options,
                             const std::function<void(std::size_t, std::size_t)>& progress) {
  TheorySweep s{grid, identity_prior, options, {}};
  std::vector<Task> tasks;
  for (std::size_t p = 0; p < grid.size(); ++p) tasks.push_back(grid.task(p, identity_prior));
  for (std::size_t p = 0; p < tasks.size(); ++p) {
    if (progress) progress(p, tasks.size());
    s.points.push_back(estimate_theory(tasks[p], options));
  }
  if (progress) progress(tasks.size(), tasks.size());
  return s;
}

results::Table sweep_points_table(const TheorySweep& s) {
  const auto& g = s.grid;
  results::Table tab{"points", {}};
  for (std::size_t k = 0; k < 4; ++k) tab.columns.push_back({TheoryGrid::names[k], {}});
  tab.columns.push_back({"w0_norm", {}});
  for (const auto& [name, e] : point_summary(s.points[0]))
    tab.columns.push_back({name, {}}), tab.columns.push_back({name + "_se", {}});
  for (std::size_t p = 0; p < s.points.size(); ++p) {
    std::size_t c = 0;
    for (std::size_t k = 0; k < 4; ++k) tab.columns[c++].values.push_back(g.at(p, k));
    tab.columns[c++].values.push_back(s.points[p].task.prior_mean().norm());
    for (const auto& [name, e] : point_summary(s.points[p]))
      tab.columns[c++].values.push_back(e.value), tab.columns[c++].values.push_back(e.se);
  }
  return tab;
}

// One row per (point, a): the point's index and coordinates, then theory_by_a_table's columns.
results::Table sweep_by_a_table(const TheorySweep& s) {
  const auto& g = s.grid;
  results::Table tab{"by_a", {{"point", {}}}};
  for (std::size_t k = 0; k < 4; ++k) tab.columns.push_back({TheoryGrid::names[k], {}});
  for (const auto& c : theory_by_a_table(s.points[0]).columns) tab.columns.push_back({c.name, {}});
  for (std::size_t p = 0; p < s.points.size(); ++p) {
    const results::Table one = theory_by_a_table(s.points[p]);
    for (std::size_t row = 0; row < one.columns[0].values.size(); ++row) {
      tab.columns[0].values.push_back(double(p));
      for (std::size_t k = 0; k < 4; ++k) tab.columns[1 + k].values.push_back(g.at(p, k));
      for (std::size_t c = 0; c < one.columns.size(); ++c) tab.columns[5 + c].values.push_back(one.columns[c].values[row]);
    }
  }
  return tab;
}

results::Plot sweep_figure(const TheorySweep& s) {
  const auto& g = s.grid;
  std::vector<std::size_t> swept;
  for (std::size_t k = 0; k < 4; ++k)
    if (g.axes[k].size() > 1) swept.push_back(k);
  const std::size_t x = swept.empty() ? 0 : swept[0], z = swept.size() > 1 ? swept[1] : (x + 1) % 4;
  results::Table tab{"figure", {{TheoryGrid::names[x], g.axes[x]}}};
  results::Figure f{"icl theory sweep: SkipV1 at a = d (solid) against the MHA bound at a = d-1 (dashed)",
                    TheoryGrid::names[x], "loss", false, true, {}, {"set key top left"}};
  for (std::size_t j = 0; j < g.axes[z].size(); ++j) {
    std::vector<double> skip, mha;
    bool holds = true;  // every plotted point at W_0 = 0, where the MHA bound is one
    for (std::size_t i = 0; i < g.axes[x].size(); ++i) {
      std::size_t p = 0;
      for (std::size_t k = 0; k < 4; ++k) p = p * g.axes[k].size() + (k == x ? i : k == z ? j : 0);
      const auto d = std::size_t(s.points[p].task.d);
      skip.push_back(s.points[p].skipv1_value[d].value), mha.push_back(s.points[p].mha_bound[d - 1].value);
      holds = holds && mha_bound_holds(s.points[p].task);
    }
    char label[64];
    std::snprintf(label, sizeof label, "%s = %g", TheoryGrid::names[z], g.axes[z][j]);
    const std::string id = std::to_string(j), colour = " lc " + std::to_string(j + 1);
    tab.columns.push_back({"skipv1_" + id, skip});
    tab.columns.push_back({"mha_" + id, mha});
    f.series.push_back({TheoryGrid::names[x], "skipv1_" + id, "", std::string("SkipV1, ") + label, "linespoints pt 7" + colour, ""});
    f.series.push_back({TheoryGrid::names[x], "mha_" + id, "",
                        std::string(holds ? "MHA bound, " : "MHA bound formula (not a bound at W_0 != 0), ") + label,
                        "linespoints dt 2 pt 6" + colour, ""});
  }
  return {tab, f};
}

std::string sweep_text(const TheorySweep& s) {
  std::string o;
  appendf(o, "icl theory sweep: %zu points, W_0 = %s, prompts=%ld seed=%llu (same seed at every point); value +- SE\n",
          s.points.size(), s.identity_prior ? "w0_scale x I" : "0", s.options.prompts,
          static_cast<unsigned long long>(s.options.seed));
  appendf(o, "%3s %5s %6s %7s %7s", "d", "n", "sigma", "w0scl", "|W0|");
  for (const char* h : {"C", "C_3", "mean lambda", "c_a a=d/2", "c_a a=d-1", "MHA bnd a=d-1", "MHA bnd a=d", "SkipV1 a=d"})
    appendf(o, "  %-20s", h);
  o += "\n";
  double wall = 0, cpu = 0;
  bool all_hold = true;
  for (std::size_t p = 0; p < s.points.size(); ++p) {
    const Theory& t = s.points[p];
    appendf(o, "%3d %5d %6g %7g %7.4g", t.task.d, t.task.n, t.task.sigma, s.grid.at(p, 3), t.task.prior_mean().norm());
    for (const auto& [name, e] : point_summary(t)) appendf(o, "  %-20s", pm(e).c_str());
    o += "\n";
    wall += t.wall_seconds, cpu += t.cpu_seconds;
    all_hold = all_hold && mha_bound_holds(t.task);
  }
  if (!all_hold)
    appendf(o, "MHA bnd at the rows with w0scl != 0: the formula C + C_3 + c_a (C + E|W_D|^2 at a = d), not a lower bound:\n"
               "W_0 != 0, where the proof's Lemmas 2-4 fail (icl lemmas)\n");
  appendf(o, "%.3g s wall, %.3g s CPU in the estimates\n", wall, cpu);
  return o;
}

results::Value sweep_json(const TheorySweep& s, const std::string& command_line) {
  Value o = Value::object();
  o.set("command", "icl theory");
  o.set("w0", s.identity_prior ? "identity" : "zero");
  o.set("prompts", std::int64_t(s.options.prompts));
  o.set("seed", s.options.seed);
  o.set("device", "cpu");
  o.set("command_line", command_line);
  Value points = Value::array();
  for (std::size_t p = 0; p < s.points.size(); ++p) {
    const Theory& t = s.points[p];
    Value v = Value::object();
    v.set("d", t.task.d);
    v.set("n", t.task.n);
    v.set("sigma", t.task.sigma);
    v.set("w0_scale", s.grid.at(p, 3));
    v.set("w0_norm", t.task.prior_mean().norm());
    set_theory_fields(v, t, "");
    v.set("wall_seconds", t.wall_seconds);
    v.set("cpu_seconds", t.cpu_seconds);
    points.push(std::move(v));
  }
  o.set("points", std::move(points.break_items("\n  ")), "\n ");
  return o;
}

}  // namespace qkvlab::icl
