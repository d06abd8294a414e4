// `qkvlab icl theory`: the SkipV1 theorem's closed-form quantities by Monte Carlo, one run or a
// sweep over a grid (synthetic/icl/theory_report.hpp: the run, the sweep and their rendering):
// options, their validation, the output.
#include "cli/output_paths.hpp"
#include "cli/commands.hpp"
#include "cli/device_option.hpp"
#include "cli/icl_task_options.hpp"
#include "cli/matrix_argument.hpp"
#include "cli/plot_common.hpp"
#include "core/limits.hpp"
#include "synthetic/icl/theory_report.hpp"

#include <array>
#include <iostream>
#include <memory>

namespace qkvlab::cli {
namespace {

struct TheoryArgs : TaskArgs {
  std::string w0 = "zero", out, csv, figure;
  double w0_scale = 1.0;
  Device device = Device::cpu;
  std::vector<int> d_list, n_list;
  std::vector<double> sigma_list, w0_scale_list;
  std::array<const CLI::Option*, 4> list_options{};  // --d-list, --n-list, --sigma-list, --w0-scale-list
  const CLI::Option* w0_scale_option = nullptr;
  bool quiet = false;
  bool given(std::size_t k) const { return list_options[k]->count() > 0; }
  bool sweep() const { return given(0) || given(1) || given(2) || given(3); }
};

icl::TheoryOptions theory_options(const TheoryArgs& a) {
  return icl::TheoryOptions{a.prompts, a.seed, a.threads};
}

// Refuses, before anything is allocated, sizes whose Monte Carlo would not fit the memory budget.
void require_theory_memory(const TheoryArgs& a, int d, int n) {
  require_memory("--d " + std::to_string(d) + " --n " + std::to_string(n) + " --prompts " + std::to_string(a.prompts),
                 icl::theory_memory_bytes(icl::Task{d, n, 0.0, {}}, theory_options(a)));
}

MatD prior_mean(const TheoryArgs& a) {
  if (!std::isfinite(a.w0_scale)) throw UsageError("--w0-scale: must be a finite number");
  if (a.w0 == "zero") {
    if (a.w0_scale_option->count() > 0) throw UsageError("--w0-scale: needs --w0 identity or a FILE (W_0 = 0 has no scale)");
    return MatD::Zero(a.d, a.d);
  }
  if (a.w0 == "identity") return a.w0_scale * MatD::Identity(a.d, a.d);
  const MatD m = read_matrix_argument(a.w0).data;
  if (m.rows() != a.d || m.cols() != a.d)
    throw UsageError("--w0: " + a.w0 + " is " + std::to_string(m.rows()) + "x" + std::to_string(m.cols()) +
                     ", expected " + std::to_string(a.d) + "x" + std::to_string(a.d) + " (--d)");
  return a.w0_scale * m;
}

icl::TheoryGrid sweep_grid(const TheoryArgs& a) {
  if (a.w0 != "zero" && a.w0 != "identity") throw UsageError("--w0: a sweep needs zero or identity (a FILE fixes d)");
  if (a.w0 == "zero" && a.given(3)) throw UsageError("--w0-scale-list: needs --w0 identity (W_0 = 0 has no scale)");
  if (a.w0 == "zero" && a.w0_scale_option->count() > 0) throw UsageError("--w0-scale: needs --w0 identity (W_0 = 0 has no scale)");
  const std::vector<int> ds = a.given(0) ? a.d_list : std::vector<int>{a.d}, ns = a.given(1) ? a.n_list : std::vector<int>{a.n};
  const std::vector<double> sigmas = a.given(2) ? a.sigma_list : std::vector<double>{a.sigma},
                            scales = a.given(3) ? a.w0_scale_list : std::vector<double>{a.w0_scale};
  const icl::TheoryGrid g{{std::vector<double>(ds.begin(), ds.end()), std::vector<double>(ns.begin(), ns.end()), sigmas, scales}};
  for (std::size_t p = 0; p < g.size(); ++p) require_theory_memory(a, int(g.at(p, 0)), int(g.at(p, 1)));
  return g;
}

// Every file the run writes (a figure's table and drawings too) against each other and --w0's file,
// and each one's directory, before the work.
void refuse_overlapping_outputs(const TheoryArgs& a) {
  FileList outputs{{"--out", a.out}, {"--csv", a.csv}};
  if (!a.figure.empty()) {
    const std::string table = a.sweep() ? a.figure + ".figure.csv" : figure_table(a.figure);
    if (a.sweep() || a.csv.empty() || !same_file(table, a.csv)) outputs.emplace_back("--figure", table);
    for (const auto& f : results::figure_files(a.figure)) outputs.emplace_back("--figure", f.string());
  }
  const bool w0_file = a.w0 != "zero" && a.w0 != "identity";
  refuse_overlapping_files(outputs, {{"--w0", w0_file ? matrix_file(a.w0) : std::string()}});
  require_output_directories(outputs);
}

int run_theory_sweep(const TheoryArgs& a, const std::string& command_line) {
  require_device(a.device, false);
  const icl::TheoryGrid g = sweep_grid(a);
  const Progress progress{"icl theory", Progress::wanted(a.quiet)};
  const icl::TheorySweep s = icl::run_theory_sweep(g, a.w0 == "identity", theory_options(a),
                                                   [&](std::size_t done, std::size_t total) { progress("points", done, total); });
  const results::Table points = icl::sweep_points_table(s);
  StagedFiles files;  // --out, --csv and --figure: all or none
  if (!a.out.empty()) results::stage_tables_hdf5(files, a.out, {points, icl::sweep_by_a_table(s)}, a.seed, command_line);
  if (!a.csv.empty()) results::stage_csv(files, a.csv, points);
  if (!a.figure.empty()) {
    const results::Plot plot = icl::sweep_figure(s);
    results::stage_csv(files, a.figure + ".figure.csv", plot.table);  // STEM.csv is left to --csv's points table
    results::stage_figure(files, plot.figure, plot.table, a.figure);
  }
  files.commit();
  std::cout << (a.format == "json" ? icl::sweep_json(s, command_line).json_line() : icl::sweep_text(s));
  return 0;
}

int run_theory(const TheoryArgs& a, const std::string& command_line) {
  apply_threads(a.threads, BlasUse::shared);
  refuse_overlapping_outputs(a);
  if (a.sweep()) return run_theory_sweep(a, command_line);
  require_device(a.device, false);
  require_theory_memory(a, a.d, a.n);
  const icl::Theory t = icl::estimate_theory(make_task(a, prior_mean(a)), theory_options(a));
  const results::Table by_a = icl::theory_by_a_table(t);
  StagedFiles files;  // --out, --csv and --figure: all or none
  if (a.w0 != "zero" && a.w0 != "identity") files.protect(matrix_file(a.w0), "--w0");
  if (!a.out.empty()) results::stage_tables_hdf5(files, a.out, {by_a, icl::theory_scalar_table(t)}, a.seed, command_line);
  if (!a.csv.empty()) results::stage_csv(files, a.csv, by_a);
  if (!a.figure.empty()) {
    if (a.csv.empty() || !same_file(figure_table(a.figure), a.csv)) results::stage_csv(files, figure_table(a.figure), by_a);
    results::stage_figure(files, icl::theory_figure(t), by_a, a.figure);
  }
  files.commit();
  const icl::PriorMeanName w0{a.w0, a.w0_scale};
  std::cout << (a.format == "json" ? icl::theory_json(t, w0, command_line).json_line() : icl::theory_text(t, w0));
  return 0;
}

}  // namespace

std::vector<Command> add_icl_theory_commands(CLI::App& icl, const std::string& command_line) {
  auto t = std::make_shared<TheoryArgs>();
  t->prompts = icl::TheoryOptions{}.prompts;  // 200000
  auto* theory = icl.add_subcommand("theory", "Monte Carlo estimates of the theorem's quantities (C, Lambda, C_3, c_a, bounds)");
  add_task_options(theory, *t);
  theory->add_option("--w0", t->w0, "Prior mean W_0: zero, identity, or a d x d matrix FILE.npy (or FILE.h5:DATASET)")
      ->capture_default_str();
  t->w0_scale_option = theory->add_option("--w0-scale", t->w0_scale, "c of the prior mean: W_0 = c I (--w0 identity) or c times the --w0 matrix; refused with --w0 zero "
                                                              "(|W_0|_F^2 + d sigma^2 must stay below 1.8e308)")
      ->check(finite_real)
      ->capture_default_str();
  add_device_option(theory, t->device, false);
  theory->add_option("--out", t->out, "Write the tables by_a and scalars to this HDF5 file");
  theory->add_option("--csv", t->csv, "Write the per-a table (c_a, bounds, SkipV1 value, gap, C, C3) to this CSV");
  theory->add_option("--figure", t->figure, "Write STEM.csv, STEM.svg, STEM.png: c_a, bound and SkipV1 value against a");
  theory->add_flag("--quiet", t->quiet, "No progress on stderr (the sweep's points)");
  t->list_options = {add_list_option(theory, "--d-list", t->d_list, "Sweep: values of d (else --d), comma-separated", integer_in(1, 4096)),
                     add_list_option(theory, "--n-list", t->n_list, "Sweep: values of n (else --n), comma-separated", integer_in(1, 1 << 20)),
                     add_list_option(theory, "--sigma-list", t->sigma_list, "Sweep: values of sigma (else --sigma), comma-separated", non_negative_real),
                     add_list_option(theory, "--w0-scale-list", t->w0_scale_list, "Sweep: values of --w0-scale (--w0 identity), comma-separated", finite_real)};
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
      "reported beside it (first-order residual E[(Ux - y)x^T] and loss).\n"
      "Defaults: d 4, n 16, sigma 0.5, W_0 zero, 200000 prompts, seed 1. Same seed => same numbers for any --threads.\n"
      "Sweep: any --*-list runs the grid product of the lists (a list not given: its single option's value), every\n"
      "point with --seed as a single run would use it (so a point equals that run); --w0 zero or identity. Table and\n"
      "--csv: one row per point (C, C3, mean lambda, c_a at a = floor(d/2) and d-1, mha_bound at a = d-1 and d,\n"
      "skipv1_value at a = d, each with _se); --format json: \"points\" with the full per-a arrays; --out: tables\n"
      "points and by_a (one row per point and a); --figure: SkipV1 at a = d and the MHA bound at a = d-1 against\n"
      "the first swept of d, n, sigma, w0_scale, one pair of curves per value of the second (data: STEM.figure.csv).\n"
      "Exit status: 0 success, 2 usage error (one line, nothing written), 3 a numerical failure.");

  return {{theory, [t, command_line] {
             t->figure = figure_stem(t->figure);
             return run_theory(*t, command_line);
           }}};
}

}  // namespace qkvlab::cli
