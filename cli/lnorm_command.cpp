// `qkvlab lnorm`: the linearity defect of Remark 6 (docs/math/qkv.md, qwe.thm8.3). The
// previous sublayer must produce f(x) = N⁻¹(A N(x)) (Lemma 8.2, core/normalize.hpp),
// which is nonlinear. For inputs x = s·g, g ~ N(0, I_d), fit the best linear map W
// by least squares on n_fit = 16 d samples and report the relative error
// ‖W X − f(X)‖_F / ‖f(X)‖_F on as many held-out samples (and in sample), against
// s / sqrt(d ε). ε = 1e-5 (PyTorch's LayerNorm default); T has i.i.d. N(0, 1/d)
// entries. Writes lnorm.h5, lnorm.csv, lnorm.svg, lnorm.png.
#include "cli/commands.hpp"
#include "cli/plot_common.hpp"
#include "core/random_matrix.hpp"
#include "cli/validators.hpp"
#include "core/limits.hpp"
#include "core/normalize.hpp"
#include "core/rng.hpp"
#include "results/figure.hpp"

#include <cmath>
#include <memory>

namespace qkvlab::cli {
namespace {

constexpr double kEps = 1e-5;

struct LnormArgs {
  std::string out_dir = "outputs/lnorm";
  std::uint64_t seed = 1;
  int d = 64;
  bool quiet = false;
};

int run_lnorm(const LnormArgs& a, bool out_given, const std::string& command_line) {
  if (a.d < 2) throw UsageError("--d: must be at least 2, got " + std::to_string(a.d));
  // 16 d samples of d: the four sample matrices, the fit's QR and its products, about 10 · 16 d² doubles.
  require_memory("--d " + std::to_string(a.d), 8.0 * 160 * double(a.d) * a.d);
  const auto dir = prepare_out_dir(a.out_dir, out_given);
  const Progress progress{"lnorm", Progress::wanted(a.quiet)};
  const int d = a.d, n = 16 * d;
  Rng rng(a.seed, "lnorm/T");
  const auto L = layer_norm_conjugacy<double>(rng.gaussian(d, d, 1 / std::sqrt(double(d))));
  if (!L.ok()) throw std::runtime_error("Lemma 8.2: some delta_i is zero for this T; try another --seed");

  const auto r = log_grid(1e-3, 1e3, 49);
  std::vector<double> scale, held_out, in_sample, outside;
  for (std::size_t i = 0; i < r.size(); ++i) {
    const double s = r[i] * std::sqrt(d * kEps);
    Rng draw(a.seed, "lnorm/x/" + std::to_string(i));
    const MatD X_fit = draw.gaussian(d, n, s), X_test = draw.gaussian(d, n, s);
    const auto F_fit = L.f(X_fit, kEps), F_test = L.f(X_test, kEps);
    // W minimizes ‖W X − F‖_F: Xᵀ Wᵀ = Fᵀ in the least-squares sense.
    const MatD Wt = X_fit.transpose().colPivHouseholderQr().solve(F_fit.x.transpose());
    const MatD W = Wt.transpose();
    scale.push_back(s);
    in_sample.push_back((W * X_fit - F_fit.x).norm() / F_fit.x.norm());
    held_out.push_back((W * X_test - F_test.x).norm() / F_test.x.norm());
    outside.push_back(double(F_fit.outside.size() + F_test.outside.size()));
    progress("scales", i + 1, r.size());
  }
  const results::Table t{"lnorm",
                         {{"r", r},
                          {"s", scale},
                          {"rel_err_held_out", held_out},
                          {"rel_err_in_sample", in_sample},
                          {"points_outside_image", outside}}};
  const results::Table params{
      "parameters", {{"d", {double(d)}}, {"eps", {kEps}}, {"samples_fit", {double(n)}}, {"samples_test", {double(n)}}}};
  StagedFiles files;  // the numbers and the figure: all or none
  results::stage_tables_hdf5(files, dir / "lnorm.h5", {t, params}, a.seed, command_line);
  results::stage_csv(files, dir / "lnorm.csv", t);
  results::Figure fig{"Linearity defect of f = N^-1(A N(x)), d = " + std::to_string(d) + ", eps = 1e-5",
                      "s / sqrt(d eps)   (x = s g, g ~ N(0, I))", "relative error of the best linear fit", true, true,
                      {}, {"set key top left"}};
  fig.series.push_back({"r", "rel_err_held_out", "", "held-out samples", "linespoints pt 7 lw 2"});
  fig.series.push_back({"r", "rel_err_in_sample", "", "fit samples", "lines dt 2 lw 2"});
  results::stage_figure(files, fig, t, dir / "lnorm");
  files.commit();
  return 0;
}

}  // namespace

Command add_lnorm_command(CLI::App& app, const std::string& command_line) {
  auto a = std::make_shared<LnormArgs>();
  auto* cmd = app.add_subcommand("lnorm", "Linearity defect of the LayerNorm conjugate f against input scale (Remark 6)");
  cmd->footer("Writes lnorm.h5, lnorm.csv, lnorm.svg and lnorm.png into --out-dir (figures need gnuplot).\n"
              "Exit 2 on a usage error.");
  auto* out = cmd->add_option("--out-dir", a->out_dir, "Existing output directory (the default is created)")
                  ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of every random draw")->check(seed_value)->capture_default_str();
  cmd->add_option("--d", a->d, "Width d (at least 2)")->check(integer_in(0, 1 << 20))->capture_default_str();
  cmd->add_flag("--quiet", a->quiet, "No progress on stderr");
  return {cmd, [a, out, command_line] { return run_lnorm(*a, out->count() > 0, command_line); }};
}

}  // namespace qkvlab::cli
