#include "synthetic/lnorm.hpp"

#include "core/normalize.hpp"
#include "core/random_matrix.hpp"
#include "core/rng.hpp"

#include <cmath>
#include <stdexcept>

namespace qkvlab::synthetic {
namespace {

constexpr double kNormEps = 1e-5;

results::Figure lnorm_figure(int d) {
  results::Figure fig{"Linearity defect of f = N^-1(A N(x)), d = " + std::to_string(d) + ", eps = 1e-5",
                      "s / sqrt(d eps)   (x = s g, g ~ N(0, I))", "relative error of the best linear fit", true, true,
                      {}, {"set key top left"}};
  fig.series.push_back({"r", "rel_err_held_out", "", "held-out samples", "linespoints pt 7 lw 2", {}});
  fig.series.push_back({"r", "rel_err_in_sample", "", "fit samples", "lines dt 2 lw 2", {}});
  return fig;
}

}  // namespace

double lnorm_memory_bytes(int d) { return 8.0 * 160 * double(d) * d; }

LnormCurve lnorm_curve(std::uint64_t seed, int d, const LnormProgress& progress) {
  const int n = 16 * d;
  Rng rng(seed, "lnorm/T");
  const auto L = layer_norm_conjugacy<double>(rng.gaussian(d, d, 1 / std::sqrt(double(d))));
  if (!L.ok()) throw std::runtime_error("Lemma 8.2: some delta_i is zero for this T (seed " + std::to_string(seed) + ")");

  const auto r = log_grid(1e-3, 1e3, 49);
  std::vector<double> scale, held_out, in_sample, outside;
  for (std::size_t i = 0; i < r.size(); ++i) {
    const double s = r[i] * std::sqrt(d * kNormEps);
    Rng draw(seed, "lnorm/x/" + std::to_string(i));
    const MatD X_fit = draw.gaussian(d, n, s), X_test = draw.gaussian(d, n, s);
    const auto F_fit = L.f(X_fit, kNormEps), F_test = L.f(X_test, kNormEps);
    // W minimizes ‖W X − F‖_F: Xᵀ Wᵀ = Fᵀ in the least-squares sense.
    const MatD W = X_fit.transpose().colPivHouseholderQr().solve(F_fit.x.transpose()).transpose();
    scale.push_back(s);
    in_sample.push_back((W * X_fit - F_fit.x).norm() / F_fit.x.norm());
    held_out.push_back((W * X_test - F_test.x).norm() / F_test.x.norm());
    outside.push_back(double(F_fit.outside.size() + F_test.outside.size()));
    if (progress) progress("scales", i + 1, r.size());
  }
  results::Table t{"lnorm",
                   {{"r", r},
                    {"s", scale},
                    {"rel_err_held_out", held_out},
                    {"rel_err_in_sample", in_sample},
                    {"points_outside_image", outside}}};
  results::Table params{
      "parameters", {{"d", {double(d)}}, {"eps", {kNormEps}}, {"samples_fit", {double(n)}}, {"samples_test", {double(n)}}}};
  return {{std::move(t), lnorm_figure(d)}, std::move(params)};
}

}  // namespace qkvlab::synthetic
