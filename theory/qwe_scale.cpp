// qwe.scale8.2 (Query-weight elimination §8.2; docs/math/qkv.md): attention scaling at initialization.
// Inputs with unit-norm rows, weights N(0, σ_w²), σ_w = 0.02. Baseline score
// q·k/sqrt(d_h) has std σ_w²; with W_Q = I the query of head h is the input's
// h-th slice and the score has std σ_w/sqrt(d). Analytic ratio reduced/baseline
// = 1/(σ_w sqrt(d)); the paper rounds it to 2 (scale 1/(2 sqrt(d_h))).
// Monte Carlo: B independent weight draws, n tokens each, every head and token
// pair; standard error of the ratio by the delta method over the B batches.
#include "theory/claims.hpp"

#include <cmath>

namespace qkvlab::theory {
namespace {

constexpr double sigma_w = 0.02;
constexpr int batches = 100, tokens = 32;
constexpr double z_budget = 4;

struct BatchMoments {
  double baseline = 0, reduced = 0;  // mean squared score
};

BatchMoments score_moments(Rng& rng, int d, int heads) {
  const MatD X = rng.unit_rows(tokens, d), W_Q = rng.gaussian(d, d, sigma_w), W_K = rng.gaussian(d, d, sigma_w);
  const int dh = d / heads;
  const double s = std::sqrt(double(dh));
  const MatD Q = X * W_Q, K = X * W_K;
  BatchMoments m;
  for (int h = 0; h < heads; ++h) {
    const MatD Kh = K.middleCols(h * dh, dh);
    m.baseline += (Q.middleCols(h * dh, dh) * Kh.transpose() / s).squaredNorm();
    m.reduced += (X.middleCols(h * dh, dh) * Kh.transpose() / s).squaredNorm();
  }
  const double pairs = double(heads) * tokens * tokens;
  return {m.baseline / pairs, m.reduced / pairs};
}

// ratio = sqrt(R/M) and its delta-method standard error from batch moments.
Statistic score_ratio(const std::vector<BatchMoments>& b, double expected) {
  const double n = double(b.size());
  double M = 0, R = 0;
  for (const auto& x : b) M += x.baseline / n, R += x.reduced / n;
  double vM = 0, vR = 0, cRM = 0;
  for (const auto& x : b) {
    vM += (x.baseline - M) * (x.baseline - M) / (n - 1);
    vR += (x.reduced - R) * (x.reduced - R) / (n - 1);
    cRM += (x.baseline - M) * (x.reduced - R) / (n - 1);
  }
  const double ratio = std::sqrt(R / M);
  const double var_log = 0.25 * (vR / (R * R) + vM / (M * M) - 2 * cRM / (R * M)) / n;
  return {ratio, expected, ratio * std::sqrt(var_log)};
}

Outcome attention_scaling(const SweepPoint& c, Precision, Rng& rng) {
  std::vector<BatchMoments> b;
  for (int i = 0; i < batches; ++i) b.push_back(score_moments(rng, c.d, c.heads));
  const double expected = 1.0 / (sigma_w * std::sqrt(double(c.d)));
  Outcome o;
  o.statistic = score_ratio(b, expected);
  o.rel_err = std::abs(o.statistic->value - expected) / expected;
  o.note = "paper's rounded factor 2; analytic " + std::to_string(expected);
  o.controls.push_back(control_by_rejection("score scale unchanged by removing W_Q (ratio 1)", o.statistic->value,
                                            1.0, o.statistic->std_err, z_budget));
  return o;
}

}  // namespace

void register_scale_claims(std::vector<Claim>& claims) {
  claims.push_back({.id = "qwe.scale8.2",
                    .statement = "with W_Q = I, score std at init is larger by 1/(sigma_w sqrt(d)) (paper: 2); "
                                 "Monte Carlo vs analytic",
                    .kind = Kind::statistical,
                    .dims = Dims{.heads = true, .layers = false, .seq = false, .mask = false},
                    .budget = z_budget,
                    .defaults = {.d = {64, 256, 768}, .heads = {1, 4}},
                    .run = attention_scaling});
}

}  // namespace qkvlab::theory
