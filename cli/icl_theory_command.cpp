// `qkvlab icl theory` and `qkvlab icl lemmas`: the SkipV1 theorem's closed-form
// quantities by Monte Carlo (synthetic/icl/theory.hpp) and the Appendix A
// statements as statistical checks under two priors (theory/skipv1_lemmas.hpp).
// No numerics here: options, validation, output. A sweep (any of --d-list,
// --n-list, --sigma-list, --w0-scale-list) runs the grid product; every point
// uses --seed exactly as a single run does (common random numbers), so a point
// equals `icl theory` at its (d, n, sigma, w0_scale), whatever the order or --threads.
#include "cli/commands.hpp"
#include "cli/device_option.hpp"
#include "cli/matrix_argument.hpp"
#include "cli/plot_common.hpp"
#include "cli/threads_option.hpp"
#include "cli/validators.hpp"
#include "core/errors.hpp"
#include "core/json_text.hpp"
#include "core/limits.hpp"
#include "results/figure.hpp"
#include "theory/skipv1_lemmas.hpp"
#include "synthetic/icl/theory.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

namespace qkvlab::cli {
namespace {

std::string json_values(const std::vector<qkvlab::Estimate>& v, bool se) {
  std::string s = "[";
  for (std::size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + json_number(se ? v[k].se : v[k].value);
  return s + "]";
}

std::string pm(const qkvlab::Estimate& e) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.6g +- %.2g", e.value, e.se);
  return buf;
}

struct TaskArgs {
  int d = 4, n = 16;
  double sigma = 0.5;
  long prompts = 0;
  std::uint64_t seed = 1;
  int threads = 0;
  std::string format = "table";
};

void add_task_options(CLI::App* cmd, TaskArgs& a) {
  cmd->add_option("--d", a.d, "Dimension d of x, y and every weight")->check(integer_in(1, 4096))->capture_default_str();
  cmd->add_option("--n", a.n, "In-context examples n per prompt")->check(integer_in(1, 1 << 20))->capture_default_str();
  cmd->add_option("--sigma", a.sigma, "Noise standard deviation sigma (>= 0)")
      ->check(non_negative_real)
      ->capture_default_str();
  cmd->add_option("--prompts", a.prompts, "Monte Carlo prompts")
      ->check(integer64_in(2, 1000000000000LL))
      ->capture_default_str();
  cmd->add_option("--seed", a.seed, "Seed of every random draw (recorded in the output)")
      ->check(seed_value)
      ->capture_default_str();
  add_threads_option(cmd, a.threads);
  cmd->add_option("--format", a.format, "Output on stdout")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
}

icl::Task make_task(const TaskArgs& a, const MatD& W0) {
  if (!(a.sigma >= 0) || !std::isfinite(a.sigma)) throw UsageError("--sigma: must be a non-negative number");
  if (a.prompts < 2) throw UsageError("--prompts: must be at least 2, got " + std::to_string(a.prompts));
  icl::Task t{a.d, a.n, a.sigma, W0};
  icl::validate(t);
  return t;
}

// ---- icl theory ---------------------------------------------------------

struct TheoryArgs : TaskArgs {
  std::string w0 = "zero", out, csv, figure;
  double w0_scale = 1.0;
  Device device = Device::cpu;
  std::vector<int> d_list, n_list;
  std::vector<double> sigma_list, w0_scale_list;
  std::array<const CLI::Option*, 4> list_options{};  // --d-list, --n-list, --sigma-list, --w0-scale-list
  bool given(std::size_t k) const { return list_options[k]->count() > 0; }
  bool sweep() const { return given(0) || given(1) || given(2) || given(3); }
};

icl::TheoryOptions theory_options(const TheoryArgs& a) {
  icl::TheoryOptions o{a.prompts, a.seed, a.threads};
  o.cuda = a.device == Device::cuda;
  return o;
}

// Refuses, before anything is allocated, sizes whose Monte Carlo would not fit the memory budget.
void require_theory_memory(const TheoryArgs& a) {
  const icl::Task sizes{a.d, a.n, 0.0, {}};
  require_memory("--d " + std::to_string(a.d) + " --n " + std::to_string(a.n) + " --prompts " +
                     std::to_string(a.prompts),
                 icl::theory_memory_bytes(sizes, theory_options(a)));
}

MatD prior_mean(const TheoryArgs& a) {
  if (!std::isfinite(a.w0_scale)) throw UsageError("--w0-scale: must be a finite number");
  if (a.w0 == "zero") return MatD::Zero(a.d, a.d);
  if (a.w0 == "identity") return a.w0_scale * MatD::Identity(a.d, a.d);
  const MatD m = read_matrix_argument(a.w0).data;
  if (m.rows() != a.d || m.cols() != a.d)
    throw UsageError("--w0: " + a.w0 + " is " + std::to_string(m.rows()) + "x" + std::to_string(m.cols()) +
                     ", expected " + std::to_string(a.d) + "x" + std::to_string(a.d) + " (--d)");
  return a.w0_scale * m;
}

results::Table by_a_table(const icl::Theory& t) {
  results::Table tab{"by_a", {}};
  std::vector<double> a;
  for (int k = 0; k <= t.task.d; ++k) a.push_back(k);
  tab.columns.push_back({"a", a});
  auto add = [&](const std::string& name, const std::vector<qkvlab::Estimate>& v) {
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
  auto constant = [&](const std::string& name, const qkvlab::Estimate& e) {
    tab.columns.push_back({name, std::vector<double>(rows, e.value)});
    tab.columns.push_back({name + "_se", std::vector<double>(rows, e.se)});
  };
  constant("C", t.C);
  constant("C3", t.C3);
  return tab;
}

results::Table scalar_table(const icl::Theory& t) {
  results::Table tab{"scalars", {}};
  auto add = [&](const std::string& name, const qkvlab::Estimate& e) {
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

std::string est_json(const char* name, const qkvlab::Estimate& e) {
  return std::string("\"") + name + "\": " + json_number(e.value) + ", \"" + name + "_se\": " + json_number(e.se);
}

// lambda, C, C3, W_hat_sq, LambdaYX_sq and the per-a arrays, each with *_se; `sep` between groups.
std::string theory_fields_json(const icl::Theory& t, const std::string& sep) {
  auto arr = [](const char* name, const std::vector<qkvlab::Estimate>& v) {
    return std::string("\"") + name + "\": " + json_values(v, false) + ", \"" + name + "_se\": " + json_values(v, true);
  };
  return arr("lambda", t.lambda) + sep + est_json("C", t.C) + ", " + est_json("C3", t.C3) + ", " +
         est_json("W_hat_sq", t.W_hat_sq) + ", " + est_json("LambdaYX_sq", t.LambdaB_sq) + sep + arr("c_a", t.c_a) +
         sep + arr("skipv1_value", t.skipv1_value) + sep + arr("mha_bound", t.mha_bound) + sep + arr("gap", t.gap);
}

void print_theory_json(const icl::Theory& t, const TheoryArgs& a, const std::string& command_line) {
  auto form = [&](const icl::FormReport& f) {
    return "{\"residual_norm\": " + json_number(f.residual.value) + ", \"residual_norm_se\": " +
           json_number(f.residual.se) + ", \"residual_chi2\": " + json_number(f.residual_chi2) +
           ", \"residual_dof\": " + std::to_string(t.task.d * t.task.d) + ", " + est_json("loss", f.loss) + "}";
  };
  std::cout << "{\"d\": " << t.task.d << ", \"n\": " << t.task.n << ", \"sigma\": " << json_number(t.task.sigma)
            << ", \"w0\": " << json_quote(a.w0) << ", \"w0_scale\": " << json_number(a.w0_scale)
            << ", \"w0_norm\": " << json_number(t.task.prior_mean().norm())
            << ", \"w0_sigma_min\": " << json_number(Eigen::JacobiSVD<MatD>(t.task.prior_mean()).singularValues().minCoeff())
            << ", \"prompts\": " << t.options.prompts << ", \"seed\": " << t.options.seed
            << ", \"device\": " << (t.options.cuda ? "\"cuda\"" : "\"cpu\"")
            << ",\n " << theory_fields_json(t, ",\n ") << ",\n \"posterior_mean\": " << form(t.posterior) << ",\n \"ridge\": " << form(t.ridge)
            << ",\n \"wall_seconds\": " << json_number(t.wall_seconds)
            << ", \"cpu_seconds\": " << json_number(t.cpu_seconds)
            << ", \"prompts_per_second\": " << json_number(double(t.options.prompts) / t.wall_seconds)
            << ", \"command_line\": " << json_quote(command_line) << "}\n";
}

void print_theory_table(const icl::Theory& t, const TheoryArgs& a) {
  std::printf("icl theory: d=%d n=%d sigma=%g W_0=%s (||W_0||_F=%.4g) prompts=%ld seed=%llu\n", t.task.d, t.task.n,
              t.task.sigma, a.w0 == "zero" ? "0" : (a.w0 + " x " + std::to_string(a.w0_scale)).c_str(),
              t.task.prior_mean().norm(), t.options.prompts, static_cast<unsigned long long>(t.options.seed));
  std::printf("C          %s\nC_3        %s\nE|W_D|^2   %s\nE|LYX^T|^2 %s\n", pm(t.C).c_str(), pm(t.C3).c_str(),
              pm(t.W_hat_sq).c_str(), pm(t.LambdaB_sq).c_str());
  for (int i = 0; i < t.task.d && i < 8; ++i) std::printf("lambda_%-3d %s\n", i + 1, pm(t.lambda[std::size_t(i)]).c_str());
  std::printf("posterior mean: residual |E[(Ux-y)x^T]| = %.3g (noise floor %.2g, chi2 %.1f on %d dof), loss %s\n",
              t.posterior.residual.value, t.posterior.residual.se, t.posterior.residual_chi2, t.task.d * t.task.d,
              pm(t.posterior.loss).c_str());
  std::printf("ridge form:     residual |E[(Ux-y)x^T]| = %.3g (noise floor %.2g, chi2 %.1f on %d dof), loss %s\n",
              t.ridge.residual.value, t.ridge.residual.se, t.ridge.residual_chi2, t.task.d * t.task.d,
              pm(t.ridge.loss).c_str());
  std::printf("%3s  %-24s %-24s %-24s %-24s\n", "a", "c_a", "MHA bound", "SkipV1 value", "gap (bound - SkipV1)");
  for (int k = 0; k <= t.task.d; ++k) {
    const auto i = std::size_t(k);
    std::printf("%3d  %-24s %-24s %-24s %-24s\n", k, pm(t.c_a[i]).c_str(), pm(t.mha_bound[i]).c_str(),
                pm(t.skipv1_value[i]).c_str(), pm(t.gap[i]).c_str());
  }
  std::printf("%.3g s wall, %.3g s CPU, %.3g prompts/s (two passes)\n", t.wall_seconds, t.cpu_seconds,
              2.0 * double(t.options.prompts) / t.wall_seconds);
}

void stage_theory_figure(StagedFiles& files, const icl::Theory& t, const results::Table& tab, const std::string& stem) {
  results::stage_csv(files, stem + ".csv", tab);
  char title[160];
  std::snprintf(title, sizeof title, "d = %d, n = %d, sigma = %g, ||W_0||_F = %g, %ld prompts", t.task.d, t.task.n,
                t.task.sigma, t.task.prior_mean().norm(), t.options.prompts);
  results::Figure f{title,
                    "copy width a", "loss", false, false, {}, {"set key top left", "set xtics 1"}};
  f.series.push_back({"a", "mha_bound", "", "MHA lower bound", "linespoints pt 7 lw 2"});
  f.series.push_back({"a", "skipv1_value", "", "SkipV1 at the construction", "linespoints pt 5 lw 2"});
  f.series.push_back({"a", "c_a", "", "c_a", "linespoints pt 9 lw 2"});
  f.series.push_back({"a", "C", "", "C", "lines dt 2"});
  results::stage_figure(files, f, tab, stem);
}

// ---- icl theory sweep -----------------------------------------------------

// The axes d, n, sigma, w0_scale; point (i0, i1, i2, i3) has flat index ((i0 N1 + i1) N2 + i2) N3 + i3.
struct Grid {
  std::array<std::vector<double>, 4> axes;
  static constexpr std::array<const char*, 4> names{"d", "n", "sigma", "w0_scale"};
  std::size_t size() const { return axes[0].size() * axes[1].size() * axes[2].size() * axes[3].size(); }
  double at(std::size_t point, std::size_t axis) const {
    for (std::size_t k = 3; k > axis; --k) point /= axes[k].size();
    return axes[axis][point % axes[axis].size()];
  }
};

Grid sweep_grid(const TheoryArgs& a) {
  if (a.w0 != "zero" && a.w0 != "identity") throw UsageError("--w0: a sweep needs zero or identity (a FILE fixes d)");
  if (a.w0 == "zero" && a.given(3)) throw UsageError("--w0-scale-list: needs --w0 identity (W_0 = 0 has no scale)");
  const std::vector<int> ds = a.given(0) ? a.d_list : std::vector<int>{a.d}, ns = a.given(1) ? a.n_list : std::vector<int>{a.n};
  const std::vector<double> sigmas = a.given(2) ? a.sigma_list : std::vector<double>{a.sigma},
                            scales = a.given(3) ? a.w0_scale_list : std::vector<double>{a.w0_scale};
  require_each_integer_in("--d-list", ds, 1, 4096);
  require_each_integer_in("--n-list", ns, 1, 1 << 20);
  require_each_non_negative("--sigma-list", sigmas);
  require_each_finite("--w0-scale-list", scales);
  return {{std::vector<double>(ds.begin(), ds.end()), std::vector<double>(ns.begin(), ns.end()), sigmas, scales}};
}

TheoryArgs point_args(const TheoryArgs& a, const Grid& g, std::size_t p) {
  TheoryArgs q = a;
  q.d = int(g.at(p, 0)), q.n = int(g.at(p, 1)), q.sigma = g.at(p, 2), q.w0_scale = g.at(p, 3);
  return q;
}

// λ̄ = mean_i λ_i; its SE treats the λ_i as independent (sqrt(Σ se_i²)/d).
qkvlab::Estimate lambda_mean(const icl::Theory& t) {
  qkvlab::Estimate m;
  for (const auto& e : t.lambda) m.value += e.value, m.se += e.se * e.se;
  return {m.value / t.task.d, std::sqrt(m.se) / t.task.d};
}

// The per-point summary: c_a at a = floor(d/2) and a = d−1 (the latter is the separation
// mha_bound[d−1] − skipv1_value[d], per prompt), the MHA bound at a = d−1 and d, SkipV1 at a = d.
std::vector<std::pair<std::string, qkvlab::Estimate>> point_summary(const icl::Theory& t) {
  const auto d = std::size_t(t.task.d);
  return {{"C", t.C}, {"C3", t.C3}, {"lambda_mean", lambda_mean(t)}, {"c_a_half", t.c_a[d / 2]},
          {"c_a_dm1", t.c_a[d - 1]}, {"mha_bound_dm1", t.mha_bound[d - 1]}, {"mha_bound_d", t.mha_bound[d]},
          {"skipv1_value_d", t.skipv1_value[d]}};
}

results::Table points_table(const Grid& g, const std::vector<icl::Theory>& ts) {
  results::Table tab{"points", {}};
  for (std::size_t k = 0; k < 4; ++k) tab.columns.push_back({Grid::names[k], {}});
  tab.columns.push_back({"w0_norm", {}});
  for (const auto& [name, e] : point_summary(ts[0])) tab.columns.push_back({name, {}}), tab.columns.push_back({name + "_se", {}});
  for (std::size_t p = 0; p < ts.size(); ++p) {
    std::size_t c = 0;
    for (std::size_t k = 0; k < 4; ++k) tab.columns[c++].values.push_back(g.at(p, k));
    tab.columns[c++].values.push_back(ts[p].task.prior_mean().norm());
    for (const auto& [name, e] : point_summary(ts[p]))
      tab.columns[c++].values.push_back(e.value), tab.columns[c++].values.push_back(e.se);
  }
  return tab;
}

// One row per (point, a): the point's index and coordinates, then by_a_table's columns.
results::Table sweep_by_a_table(const Grid& g, const std::vector<icl::Theory>& ts) {
  results::Table tab{"by_a", {{"point", {}}}};
  for (std::size_t k = 0; k < 4; ++k) tab.columns.push_back({Grid::names[k], {}});
  for (const auto& c : by_a_table(ts[0]).columns) tab.columns.push_back({c.name, {}});
  for (std::size_t p = 0; p < ts.size(); ++p) {
    const results::Table one = by_a_table(ts[p]);
    for (std::size_t row = 0; row < one.columns[0].values.size(); ++row) {
      tab.columns[0].values.push_back(double(p));
      for (std::size_t k = 0; k < 4; ++k) tab.columns[1 + k].values.push_back(g.at(p, k));
      for (std::size_t c = 0; c < one.columns.size(); ++c) tab.columns[5 + c].values.push_back(one.columns[c].values[row]);
    }
  }
  return tab;
}

// Against the first swept axis (order d, n, sigma, w0_scale), SkipV1 at a = d (C + C_3) and the MHA
// bound at a = d−1, one pair of curves per value of the second swept axis; other axes at their first value.
void stage_sweep_figure(StagedFiles& files, const Grid& g, const std::vector<icl::Theory>& ts, const std::string& stem) {
  std::vector<std::size_t> swept;
  for (std::size_t k = 0; k < 4; ++k)
    if (g.axes[k].size() > 1) swept.push_back(k);
  const std::size_t x = swept.empty() ? 0 : swept[0], z = swept.size() > 1 ? swept[1] : (x + 1) % 4;
  results::Table tab{"figure", {{Grid::names[x], g.axes[x]}}};
  results::Figure f{"icl theory sweep: SkipV1 at a = d (solid) against the MHA bound at a = d-1 (dashed)",
                    Grid::names[x], "loss", false, true, {}, {"set key top left"}};
  for (std::size_t j = 0; j < g.axes[z].size(); ++j) {
    std::vector<double> skip, mha;
    for (std::size_t i = 0; i < g.axes[x].size(); ++i) {
      std::size_t p = 0;
      for (std::size_t k = 0; k < 4; ++k) p = p * g.axes[k].size() + (k == x ? i : k == z ? j : 0);
      const auto d = std::size_t(ts[p].task.d);
      skip.push_back(ts[p].skipv1_value[d].value), mha.push_back(ts[p].mha_bound[d - 1].value);
    }
    char label[64];
    std::snprintf(label, sizeof label, "%s = %g", Grid::names[z], g.axes[z][j]);
    const std::string id = std::to_string(j), colour = " lc " + std::to_string(j + 1);
    tab.columns.push_back({"skipv1_" + id, skip});
    tab.columns.push_back({"mha_" + id, mha});
    f.series.push_back({Grid::names[x], "skipv1_" + id, "", std::string("SkipV1, ") + label, "linespoints pt 7" + colour});
    f.series.push_back({Grid::names[x], "mha_" + id, "", std::string("MHA bound, ") + label, "linespoints dt 2 pt 6" + colour});
  }
  results::stage_csv(files, stem + ".figure.csv", tab);  // STEM.csv is left to --csv's points table
  results::stage_figure(files, f, tab, stem);
}

void print_sweep_json(const Grid& g, const std::vector<icl::Theory>& ts, const TheoryArgs& a,
                      const std::string& command_line) {
  std::cout << "{\"command\": \"icl theory\", \"w0\": " << json_quote(a.w0) << ", \"prompts\": " << a.prompts
            << ", \"seed\": " << a.seed << ", \"device\": " << (a.device == Device::cuda ? "\"cuda\"" : "\"cpu\"")
            << ", \"command_line\": " << json_quote(command_line) << ",\n \"points\": [";
  for (std::size_t p = 0; p < ts.size(); ++p) {
    const icl::Theory& t = ts[p];
    std::cout << (p ? ",\n  " : "\n  ") << "{\"d\": " << t.task.d << ", \"n\": " << t.task.n
              << ", \"sigma\": " << json_number(t.task.sigma) << ", \"w0_scale\": " << json_number(g.at(p, 3))
              << ", \"w0_norm\": " << json_number(t.task.prior_mean().norm()) << ", " << theory_fields_json(t, ", ")
              << ", \"wall_seconds\": " << json_number(t.wall_seconds) << ", \"cpu_seconds\": " << json_number(t.cpu_seconds)
              << "}";
  }
  std::cout << "]}\n";
}

void print_sweep_table(const Grid& g, const std::vector<icl::Theory>& ts, const TheoryArgs& a) {
  std::printf("icl theory sweep: %zu points, W_0 = %s, prompts=%ld seed=%llu (same seed at every point); value +- SE\n",
              ts.size(), a.w0 == "zero" ? "0" : "w0_scale x I", a.prompts, static_cast<unsigned long long>(a.seed));
  std::printf("%3s %5s %6s %7s %7s", "d", "n", "sigma", "w0scl", "|W0|");
  for (const char* h : {"C", "C_3", "mean lambda", "c_a a=d/2", "c_a a=d-1", "MHA bnd a=d-1", "MHA bnd a=d", "SkipV1 a=d"})
    std::printf("  %-20s", h);
  std::printf("\n");
  double wall = 0, cpu = 0;
  for (std::size_t p = 0; p < ts.size(); ++p) {
    std::printf("%3d %5d %6g %7g %7.4g", ts[p].task.d, ts[p].task.n, ts[p].task.sigma, g.at(p, 3),
                ts[p].task.prior_mean().norm());
    for (const auto& [name, e] : point_summary(ts[p])) std::printf("  %-20s", pm(e).c_str());
    std::printf("\n");
    wall += ts[p].wall_seconds, cpu += ts[p].cpu_seconds;
  }
  std::printf("%.3g s wall, %.3g s CPU in the estimates\n", wall, cpu);
}

int run_theory_sweep(const TheoryArgs& a, const std::string& command_line) {
  require_device(a.device);
  const Grid g = sweep_grid(a);
  std::vector<icl::Task> tasks;
  for (std::size_t p = 0; p < g.size(); ++p) {
    const TheoryArgs q = point_args(a, g, p);
    require_theory_memory(q);
    tasks.push_back(make_task(q, prior_mean(q)));
  }
  const Progress progress{"icl theory", Progress::wanted(false)};
  std::vector<icl::Theory> ts;
  for (std::size_t p = 0; p < tasks.size(); ++p) {
    progress("points", p, tasks.size());
    ts.push_back(icl::estimate_theory(tasks[p], theory_options(a)));
  }
  progress("points", tasks.size(), tasks.size());
  const results::Table points = points_table(g, ts);
  StagedFiles files;  // --out, --csv and --figure: all or none
  if (!a.out.empty()) results::stage_tables_hdf5(files, a.out, {points, sweep_by_a_table(g, ts)}, a.seed, command_line);
  if (!a.csv.empty()) results::stage_csv(files, a.csv, points);
  if (!a.figure.empty()) stage_sweep_figure(files, g, ts, a.figure);
  files.commit();
  if (a.format == "json") print_sweep_json(g, ts, a, command_line);
  else print_sweep_table(g, ts, a);
  return 0;
}

int run_theory(const TheoryArgs& a, const std::string& command_line) {
  apply_threads(a.threads, BlasUse::shared);
  if (a.sweep()) return run_theory_sweep(a, command_line);
  require_device(a.device);
  require_theory_memory(a);
  const icl::Task task = make_task(a, prior_mean(a));
  const icl::Theory t = icl::estimate_theory(task, theory_options(a));
  const results::Table by_a = by_a_table(t), scalars = scalar_table(t);
  StagedFiles files;  // --out, --csv and --figure: all or none
  if (!a.out.empty()) results::stage_tables_hdf5(files, a.out, {by_a, scalars}, a.seed, command_line);
  if (!a.csv.empty()) results::stage_csv(files, a.csv, by_a);
  if (!a.figure.empty()) stage_theory_figure(files, t, by_a, a.figure);
  files.commit();
  if (a.format == "json") print_theory_json(t, a, command_line);
  else print_theory_table(t, a);
  return 0;
}

// ---- icl lemmas ---------------------------------------------------------

struct LemmaArgs : TaskArgs {
  double w0_scale = -1;  // < 0: the theorem's scale (icl::theorem_w0_scale)
  int a = -1;
  icl::Form form = icl::Form::posterior_mean;
};

std::string lemma_json(const icl::LemmaResult& r) {
  return "{\"residual\": " + json_number(r.residual.value) + ", \"residual_se\": " + json_number(r.residual.se) +
         ", \"z\": " + json_number(r.z) + ", \"holds\": " + (r.holds ? "true" : "false") +
         ", \"note\": " + json_quote(r.note) + "}";
}

int run_lemmas(const LemmaArgs& a, const std::string& command_line) {
  apply_threads(a.threads, BlasUse::shared);
  require_memory("--d " + std::to_string(a.d) + " --n " + std::to_string(a.n) + " --prompts " +
                     std::to_string(a.prompts),
                 icl::lemmas_memory_bytes(icl::Task{a.d, a.n, 0.0, {}}, icl::LemmaOptions{a.prompts, a.seed, a.threads}));
  const icl::Task zero = make_task(a, MatD::Zero(a.d, a.d));
  const double c = a.w0_scale >= 0 ? a.w0_scale : icl::theorem_w0_scale(zero);
  if (!std::isfinite(c)) throw UsageError("--w0-scale: must be a finite number");
  const icl::Task scaled = make_task(a, c * MatD::Identity(a.d, a.d));
  if (a.a > a.d) throw UsageError("--a: must be at most d = " + std::to_string(a.d));
  const icl::LemmaOptions o{a.prompts, a.seed, a.threads, a.a, a.form};
  const auto r0 = icl::check_all_lemmas(zero, o), r1 = icl::check_all_lemmas(scaled, o);
  const bool condition = c > 2 * std::sqrt(double(a.d)) * a.sigma;
  if (a.format == "json") {
    std::cout << "{\"d\": " << a.d << ", \"n\": " << a.n << ", \"sigma\": " << json_number(a.sigma)
              << ", \"prompts\": " << a.prompts << ", \"seed\": " << a.seed << ", \"budget\": "
              << json_number(icl::lemma_budget) << ", \"w0_scale\": " << json_number(c)
              << ", \"theorem_condition_holds\": " << (condition ? "true" : "false")
              << ", \"form\": " << json_quote(icl::form_name(a.form))
              << ", \"command_line\": " << json_quote(command_line) << ",\n \"checks\": [";
    for (std::size_t k = 0; k < r0.size(); ++k)
      std::cout << (k ? ",\n  " : "\n  ") << "{\"id\": " << json_quote(r0[k].id) << ", \"variant\": "
                << json_quote(r0[k].variant) << ", \"statement\": " << json_quote(r0[k].statement)
                << ", \"w0_zero\": " << lemma_json(r0[k]) << ", \"w0_scaled\": " << lemma_json(r1[k]) << "}";
    std::cout << "]}\n";
    return 0;
  }
  std::printf("icl lemmas: d=%d n=%d sigma=%g prompts=%ld seed=%llu; a statement holds when |mean| <= %g SE\n",
              a.d, a.n, a.sigma, a.prompts, static_cast<unsigned long long>(a.seed), icl::lemma_budget);
  std::printf("W_0 = c I with c = %g: sigma_d(W_0) %s 2 sqrt(d) sigma = %g; W_D: %s\n", c, condition ? ">" : "<=",
              2 * std::sqrt(double(a.d)) * a.sigma, icl::form_name(a.form));
  char head0[64], head1[64];
  std::snprintf(head0, sizeof head0, "W_0 = 0");
  std::snprintf(head1, sizeof head1, "W_0 = %g I", c);
  std::printf("%-15s %-13s  %-32s  %-32s\n", "statement", "variant", head0, head1);
  auto cell = [](const icl::LemmaResult& r) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%10.3g +- %-8.2g %-12s", r.residual.value, r.residual.se,
                  r.holds ? "holds" : "DOES NOT");
    return std::string(buf);
  };
  for (std::size_t k = 0; k < r0.size(); ++k)
    std::printf("%-15s %-13s  %-32s  %-32s\n", r0[k].id.c_str(), r0[k].variant.c_str(), cell(r0[k]).c_str(),
                cell(r1[k]).c_str());
  return 0;
}

}  // namespace

std::vector<Command> add_icl_theory_commands(CLI::App& icl, const std::string& command_line) {
  auto t = std::make_shared<TheoryArgs>();
  t->prompts = 200000;
  auto* theory = icl.add_subcommand("theory", "Monte Carlo estimates of the theorem's quantities (C, Lambda, C_3, c_a, bounds)");
  add_task_options(theory, *t);
  theory->add_option("--w0", t->w0, "Prior mean W_0: zero, identity, or a d x d matrix FILE.npy (or FILE.h5:DATASET)")
      ->capture_default_str();
  theory->add_option("--w0-scale", t->w0_scale, "c of the prior mean: W_0 = c I (--w0 identity) or c times the --w0 matrix; no effect with --w0 zero")
      ->check(finite_real)
      ->capture_default_str();
  add_device_option(theory, t->device);
  theory->add_option("--out", t->out, "Write the tables by_a and scalars to this HDF5 file");
  theory->add_option("--csv", t->csv, "Write the per-a table (c_a, bounds, SkipV1 value, gap, C, C3) to this CSV");
  theory->add_option("--figure", t->figure, "Write STEM.csv, STEM.svg, STEM.png: c_a, bound and SkipV1 value against a");
  t->list_options = {theory->add_option("--d-list", t->d_list, "Sweep: values of d (else --d), comma-separated")->delimiter(','),
                     theory->add_option("--n-list", t->n_list, "Sweep: values of n (else --n), comma-separated")->delimiter(','),
                     theory->add_option("--sigma-list", t->sigma_list, "Sweep: values of sigma (else --sigma), comma-separated")->delimiter(','),
                     theory->add_option("--w0-scale-list", t->w0_scale_list, "Sweep: values of --w0-scale (--w0 identity), comma-separated")->delimiter(',')};
  theory->footer(
      "Prompts: W* ~ N(W_0, I), x ~ N(0, I), y = W* x + eps, eps ~ N(0, sigma^2 I); tokens are columns.\n"
      "Each value is a Monte Carlo mean over --prompts prompts with its standard error (*_se): C = E c(D),\n"
      "c(D) = d sigma^2 (1 + tr (XX^T + sigma^2 I)^-1); lambda_i; C3 = E|W_D|^2 - E|Lambda Y X^T|^2;\n"
      "c_a = E|Lambda YX^T - R_a(Lambda YX^T)|^2; mha_bound[a] = C + C3 + c_a for a < d and C + E|W_D|^2 at a = d;\n"
      "skipv1_value[a] = L_2 at the paper's construction (W^1 = -Lambda/2, W^2 = Lambda, W_K^T W_Q = I) on the copying\n"
      "layer A = [I_a 0], B = [0 I_(d-a)]: the paper's point at a = d (= C + C3); for a < d an achieved value\n"
      "(the paper gives none), so an upper bound on min L_2 at that a; gap = mha_bound - skipv1_value.\n"
      "The MHA bound's derivation (Lemmas 2-4) holds under W_0 = 0; 'qkvlab icl lemmas' measures it under both priors.\n"
      "W_D is the posterior mean (sigma^2 W_0 + YX^T)(XX^T + sigma^2 I)^-1; the ridge form YX^T(...)^-1 is\n"
      "reported beside it (first-order residual E[(Ux - y)x^T] and loss). --device cuda: the per-prompt work on a CUDA device\n"
      "(prompts drawn on the host as for cpu; numbers agree with cpu's to rounding; d <= 64).\n"
      "Defaults: d 4, n 16, sigma 0.5, W_0 zero, 200000 prompts, seed 1. Same seed => same numbers for any --threads.\n"
      "Sweep: any --*-list runs the grid product of the lists (a list not given: its single option's value), every\n"
      "point with --seed as a single run would use it (so a point equals that run); --w0 zero or identity. Table and\n"
      "--csv: one row per point (C, C3, mean lambda, c_a at a = floor(d/2) and d-1, mha_bound at a = d-1 and d,\n"
      "skipv1_value at a = d, each with _se); --format json: \"points\" with the full per-a arrays; --out: tables\n"
      "points and by_a (one row per point and a); --figure: SkipV1 at a = d and the MHA bound at a = d-1 against\n"
      "the first swept of d, n, sigma, w0_scale, one pair of curves per value of the second (data: STEM.figure.csv).\n"
      "Exit status: 0 success, 2 usage error (one line, nothing written), 3 a numerical failure.");

  auto l = std::make_shared<LemmaArgs>();
  l->prompts = 20000;
  auto* lemmas = icl.add_subcommand("lemmas", "Lemmas 1-4 and Theorem 2 of Appendix A as Monte Carlo checks, two priors");
  add_task_options(lemmas, *l);
  lemmas->add_option("--w0-scale", l->w0_scale,
                     "c >= 0 of the second prior's mean W_0 = c I, run beside W_0 = 0 (default 3 sqrt(d) sigma, so sigma_d(W_0) > 2 sqrt(d) sigma)")
      ->check(non_negative_real);
  lemmas->add_option("--form", l->form, "W_D used: posterior (the Bayes posterior mean), ridge (the paper's), ridge-sigma-typo (sigma I)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, icl::Form>{{"posterior", icl::Form::posterior_mean},
                                                                           {"ridge", icl::Form::ridge},
                                                                           {"ridge-sigma-typo", icl::Form::ridge_sigma_typo}}))
      ->capture_default_str();
  lemmas->add_option("--a", l->a, "Copy width a of the random weights (default floor(d/2))")->check(integer_in(0, 4096));
  lemmas->footer(
      "Each row is a per-prompt statistic whose mean is 0 when the statement holds (theory/skipv1_lemmas.hpp):\n"
      "mean +- standard error, and 'holds' when |mean| <= 4 SE. Columns: W_0 = 0 and W_0 = c I.\n"
      "The checks use the posterior mean W_D unless --form says otherwise; the same ids run in 'qkvlab verify skipv1' with negative controls.\n"
      "Defaults: d 4, n 16, sigma 0.5, 20000 prompts per check, seed 1.\n"
      "Exit status: 0 when the checks ran (the table reports; it does not assume the paper is right),\n"
      "2 usage error, 3 a numerical failure.");
  return {{theory, [t, command_line] { return run_theory(*t, command_line); }},
          {lemmas, [l, command_line] { return run_lemmas(*l, command_line); }}};
}

}  // namespace qkvlab::cli
