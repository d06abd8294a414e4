#include "synthetic/rmt.hpp"

#include "core/random_matrix.hpp"
#include "core/rng.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace qkvlab::synthetic {
namespace {

constexpr double kV = 0.25;        // entry variance v·1/d: the MP edge 2√v is 1
constexpr double kDefectEps = 1e-5;  // ε of s(u); the curves depend on ‖u‖/sqrt(d ε) only
constexpr int kDefectD = 256;      // width of the s(u) panel
constexpr int kHistogramD = 1024;  // width of the MP panel
constexpr int kBins = 50;
constexpr int kSphereSamples = 400;  // u per d for the spread of m(u)²

int trials_for(int d) { return d <= 256 ? 32 : d <= 1024 ? 16 : 8; }

results::Table defect_scale_table(std::uint64_t seed) {
  Rng rng(seed, "rmt/defect_scale");
  const int d = kDefectD;
  std::vector<VecD> spectra;
  spectra.push_back(VecD::LinSpaced(d, std::log(0.125), 0.0).array().exp().matrix());
  spectra.push_back(VecD::LinSpaced(d, std::log(0.5), 0.0).array().exp().matrix());
  {
    const auto sq = squared_singular_values(rng.gaussian(d, d, std::sqrt(kV / d)));
    VecD s(d);
    for (int i = 0; i < d; ++i) s(i) = std::sqrt(std::max(0.0, sq[std::size_t(i)]));
    spectra.push_back(s);
  }
  VecD u0 = rng.gaussian(d, 1);
  u0.normalize();
  const auto r = log_grid(1e-2, 1e3, 101);
  results::Table t{"defect_scale", {{"r", r}}};
  const char* names[3] = {"loglin_0.125_1", "loglin_0.5_1", "mp_draw"};
  for (int k = 0; k < 3; ++k) {
    std::vector<double> s, inv_m;
    const double m = metric_defect<double>(spectra[std::size_t(k)], u0);
    for (double ri : r) {
      const VecD u = u0 * (ri * std::sqrt(d * kDefectEps));
      s.push_back(defect_scale<double>(spectra[std::size_t(k)], u, kDefectEps));
      inv_m.push_back(1 / m);
    }
    t.columns.push_back({std::string("s_") + names[k], s});
    t.columns.push_back({std::string("inv_m_") + names[k], inv_m});
  }
  return t;
}

results::Table mp_histogram_table(std::uint64_t seed, double& ks) {
  Rng rng(seed, "rmt/mp_histogram");
  const int d = kHistogramD;
  const auto x = squared_singular_values(rng.gaussian(d, d, std::sqrt(kV / d)));
  ks = ks_distance(x, [](double t) { return mp_cdf(t, kV); });
  const double hi = 4 * kV * 1.04, w = hi / kBins;
  std::vector<double> centre(kBins), empirical(kBins, 0.0), mp_bin(kBins), mp_at_centre(kBins);
  for (double xi : x) {
    const int b = std::clamp(int(xi / w), 0, kBins - 1);
    empirical[std::size_t(b)] += 1.0 / (double(d) * w);
  }
  for (int b = 0; b < kBins; ++b) {
    centre[std::size_t(b)] = (b + 0.5) * w;
    mp_bin[std::size_t(b)] = (mp_cdf((b + 1) * w, kV) - mp_cdf(b * w, kV)) / w;
    mp_at_centre[std::size_t(b)] = mp_density((b + 0.5) * w, kV);
  }
  return {"mp_histogram",
          {{"x", centre}, {"density_empirical", empirical}, {"density_mp_bin_mean", mp_bin},
           {"density_mp_at_centre", mp_at_centre}}};
}

// Edge excess and spread of m(u)², sharing the matrices of each d.
void sweep_tables(std::uint64_t seed, int d_max, const RmtProgress& progress, results::Table& edge, results::Table& spread) {
  std::vector<int> ds;
  for (int d = 64; d <= d_max; d *= 2) ds.push_back(d);
  std::size_t total = 0, done = 0;
  for (int d : ds) total += std::size_t(trials_for(d));
  std::vector<double> dcol, mean_abs, se_abs, mean_signed, reference, trials_col;
  std::vector<double> d2, mean_m2, expected_m2, std_m2, scaled;
  for (int d : ds) {
    Rng rng(seed, "rmt/sweep/d=" + std::to_string(d));
    const int trials = trials_for(d);
    std::vector<double> abs_excess, signed_excess;
    for (int t = 0; t < trials; ++t) {
      const MatD A = rng.gaussian(d, d, std::sqrt(kV / d));
      const auto top = top_singular_value(A);
      if (!top.ok) throw std::runtime_error("Lanczos did not converge at d = " + std::to_string(d));
      signed_excess.push_back(top.sigma - 2 * std::sqrt(kV));
      abs_excess.push_back(std::abs(signed_excess.back()));
      if (t == 0) {  // the spread of m(u)² over u uniform on the sphere, for this A
        const MatD U = rng.unit_rows(kSphereSamples, d).transpose();
        const VecD m2 = (A * U).colwise().squaredNorm().transpose();
        const double mean = m2.mean();
        const double var = (m2.array() - mean).square().sum() / (kSphereSamples - 1);
        d2.push_back(d), mean_m2.push_back(mean), expected_m2.push_back(A.squaredNorm() / d);
        std_m2.push_back(std::sqrt(var)), scaled.push_back(std::sqrt(var * d));
      }
      ++done;
      if (progress) progress("d = " + std::to_string(d) + ", matrices", done, total);
    }
    const double n = trials, m = std::accumulate(abs_excess.begin(), abs_excess.end(), 0.0) / n;
    double var = 0;
    for (double e : abs_excess) var += (e - m) * (e - m);
    dcol.push_back(d), trials_col.push_back(trials), mean_abs.push_back(m);
    se_abs.push_back(std::sqrt(var / (n - 1) / n));
    mean_signed.push_back(std::accumulate(signed_excess.begin(), signed_excess.end(), 0.0) / n);
  }
  // d^{−2/3} through the first point.
  for (double d : dcol) reference.push_back(mean_abs.front() * std::pow(d / dcol.front(), -2.0 / 3));
  edge = {"edge_excess",
          {{"d", dcol}, {"trials", trials_col}, {"mean_abs_excess", mean_abs}, {"std_err", se_abs},
           {"mean_signed_excess", mean_signed}, {"reference_d_pow_minus_2_3", reference}}};
  spread = {"m2_spread",
            {{"d", d2}, {"mean_m2", mean_m2}, {"frobenius2_over_d", expected_m2}, {"std_m2", std_m2},
             {"std_m2_sqrt_d", scaled}}};
}

// The figure of each panel, in the order of RmtCurves::panels.
std::vector<results::Figure> figures(double ks) {
  results::Figure f1{"s(u) against |u|/sqrt(d eps), d = " + std::to_string(kDefectD) + " (dashed: 1/m(u))",
                     "|u| / sqrt(d eps)", "s(u)", true, false, {}, {"set key bottom left"}};
  const char* names[3] = {"loglin_0.125_1", "loglin_0.5_1", "mp_draw"};
  const char* titles[3] = {"Sigma log-spaced in [1/8, 1]", "Sigma log-spaced in [1/2, 1]",
                           "Sigma = MP draw, v = 1/4"};
  for (int k = 0; k < 3; ++k) {
    f1.series.push_back({"r", std::string("s_") + names[k], "", titles[k], "lines lw 2 lc " + std::to_string(k + 1), ""});
    f1.series.push_back({"r", std::string("inv_m_") + names[k], "", "", "lines dt 2 lc " + std::to_string(k + 1), ""});
  }
  f1.series.push_back({"", "", "1", "limit 1 (linear regime)", "lines dt 3 lc rgb 'black'", ""});
  results::Figure f2{"Squared singular values, d = 1024, v = 1/4 (KS distance " + std::to_string(ks).substr(0, 6) +
                         ")",
                     "x = sigma^2", "density", false, false, {},
                     {"set style fill solid 0.4 border", "set yrange [0:*]", "set key top right"}};
  f2.series.push_back({"x", "density_empirical", "", "empirical histogram", "boxes lc rgb '#7090c0'", ""});
  f2.series.push_back({"", "", "(x > 0 && x < 1) ? sqrt((1 - x) * x) / (2 * pi * 0.25 * x) : 1/0",
                       "Marchenko-Pastur density", "lines lw 2 lc rgb '#c03020'", ""});
  f2.extra.push_back("set xrange [0:1.04]");
  results::Figure f3{"Mean edge excess |sigma_max - 2 sqrt(v)|, v = 1/4", "d", "mean |sigma_max - 1|", true, true,
                     {}, {"set key bottom left"}};
  f3.series.push_back({"d", "mean_abs_excess", "", "mean over trials", "linespoints pt 7 lw 2", ""});
  f3.series.push_back({"d", "reference_d_pow_minus_2_3", "", "d^(-2/3) through the first point", "lines dt 2", ""});
  results::Figure f4{"Spread of m(u)^2 over u uniform on the sphere", "d", "std(m(u)^2) * sqrt(d)", true, false, {},
                     {"set yrange [0:*]", "set key bottom right"}};
  f4.series.push_back({"d", "std_m2_sqrt_d", "", "std(m^2) sqrt(d), 400 samples of u", "linespoints pt 7 lw 2", ""});
  return {f1, f2, f3, f4};
}

}  // namespace

std::vector<results::Table> RmtCurves::tables() const {
  std::vector<results::Table> t;
  for (const auto& p : panels) t.push_back(p.table);
  t.push_back(summary);
  return t;
}

double rmt_memory_bytes(int d_max) { return 8.0 * 4 * double(d_max) * d_max; }

RmtCurves rmt_curves(std::uint64_t seed, int d_max, const RmtProgress& progress) {
  if (progress) progress("s(u) and MP spectrum", 0, 2);
  results::Table defect = defect_scale_table(seed);
  double ks = 0;
  results::Table histogram = mp_histogram_table(seed, ks);
  if (progress) progress("s(u) and MP spectrum", 2, 2);
  results::Table edge, spread;
  sweep_tables(seed, d_max, progress, edge, spread);
  const std::vector<results::Figure> f = figures(ks);
  RmtCurves curves{{{defect, f[0]}, {histogram, f[1]}, {edge, f[2]}, {spread, f[3]}},
                   {"mp_summary", {{"d", {double(kHistogramD)}}, {"v", {kV}}, {"ks_distance", {ks}}}}};
  for (std::size_t i = 0; i < curves.panels.size(); ++i) curves.panels[i].table.name = kRmtPanels.at(i);  // the command checks these files
  return curves;
}

}  // namespace qkvlab::synthetic
