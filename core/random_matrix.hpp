// The metric defect of RMSNorm and the random-matrix picture (Query-weight elimination §8.3.1;
// docs/math/qkv.md, qwe.sec8.3.1). Column-vector convention: x ↦ A x.
//
// Metric defect. R(x) = ρ(‖x‖) x with ρ(r) = (r²/d + ε)^{−1/2} (core/normalize.hpp's
// rms_norm) is radial, so for A = U Σ Vᵀ: R(A x) = U R(Σ Vᵀ x), and for u = Vᵀx
//   R(Σ u) = s(u) Σ R(u),  s(u) = ρ(‖Σu‖)/ρ(‖u‖) = sqrt((‖u‖²/d + ε) / (m(u)² ‖u‖²/d + ε)),
// with the metric defect m(u) = ‖Σu‖/‖u‖. Templated on the scalar type.
//
// Random matrices (double only: these are statistics, not identities). For A with
// i.i.d. N(0, v/d) entries, square d×d, the squared singular values follow the
// Marchenko–Pastur law with ratio 1 and scale v:
//   p(x) = sqrt((4v − x) x) / (2π v x) on [0, 4v].
// With x = 4v sin²θ, p(x) dx = (4/π) cos²θ dθ, so the distribution function is
//   F(x) = (2θ + sin 2θ)/π,  θ = asin(sqrt(x/(4v)))   (closed form, no quadrature).
// The largest singular value tends to the edge 2 sqrt(v) with fluctuations of
// order d^{−2/3} (Tracy–Widom); top_singular_value computes it by Lanczos
// (Spectra's SymEigsSolver on the operator w ↦ Aᵀ(A w), AᵀA never formed) and
// reports its status instead of returning an unconverged number.
#pragma once

#include "core/types.hpp"

#include <Spectra/SymEigsSolver.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <vector>

namespace qkvlab {

// n points from a to b (both > 0), evenly spaced in log: the abscissae of the
// metric-defect curves (qkvlab rmt, qkvlab lnorm).
inline std::vector<double> log_grid(double a, double b, int n) {
  std::vector<double> g(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) g[std::size_t(i)] = a * std::pow(b / a, n == 1 ? 0.0 : double(i) / (n - 1));
  return g;
}

// ρ(r) = (r²/d + ε)^{−1/2}, so that R(x) = ρ(‖x‖) x.
template <class S> S rms_radial(const S& r, Eigen::Index d, double eps) {
  using std::sqrt;
  return S(1) / S(sqrt(S(r * r / S(d) + S(eps))));
}

// m(u) = ‖Σu‖/‖u‖ for Σ = diag(sigma).
template <class S> S metric_defect(const Vec<S>& sigma, const Vec<S>& u) {
  return S(sigma.cwiseProduct(u).norm() / u.norm());
}

// s(u) = sqrt((‖u‖²/d + ε) / (m(u)² ‖u‖²/d + ε)), written as docs/math/qkv.md states it.
template <class S> S defect_scale(const Vec<S>& sigma, const Vec<S>& u, double eps) {
  using std::sqrt;
  const S d = S(u.rows()), n2 = u.squaredNorm(), m = metric_defect<S>(sigma, u);
  return S(sqrt(S((n2 / d + S(eps)) / (m * m * n2 / d + S(eps)))));
}

// Marchenko–Pastur, ratio 1, scale v: density and distribution function.
inline double mp_density(double x, double v) {
  if (!(x > 0) || !(x < 4 * v)) return 0;
  return std::sqrt((4 * v - x) * x) / (2 * std::numbers::pi * v * x);
}

inline double mp_cdf(double x, double v) {
  if (!(x > 0)) return 0;
  if (!(x < 4 * v)) return 1;
  const double theta = std::asin(std::sqrt(x / (4 * v)));
  return (2 * theta + std::sin(2 * theta)) / std::numbers::pi;
}

// The spectral moments m_k = (1/d) tr (AᵀA)^k of a square d×d A with i.i.d. N(0, v/d)
// entries have exact finite-d means (Wishart: for G p×n standard Gaussian,
// E tr GGᵀ = pn, E tr (GGᵀ)² = pn(p + n + 1), E tr (GGᵀ)³ = pn(p² + n² + 3pn + 3p + 3n + 4)):
//   E m_1 = v,  E m_2 = v² (2 + 1/d),  E m_3 = v³ (5 + 6/d + 4/d²),
// whose limits 1, 2, 5 (Catalan numbers) are Marchenko–Pastur's moments at ratio 1.
inline double wishart_moment(int k, int d, double v) {
  const double n = d;
  switch (k) {
    case 1: return v;
    case 2: return v * v * (2 + 1 / n);
    case 3: return v * v * v * (5 + 6 / n + 4 / (n * n));
    default: throw std::invalid_argument("wishart_moment: k must be 1, 2 or 3");
  }
}

// E y^k for y with the quarter-circle density (4/(π r²)) sqrt(r² − y²) on [0, r]:
// (2/π) r^k B((k + 1)/2, 3/2), with B(a, b) = Γ(a)Γ(b)/Γ(a + b).
inline double quarter_circle_moment(int k, double r) {
  const double a = (k + 1) / 2.0, b = 1.5;
  return 2 / std::numbers::pi * std::pow(r, k) * std::exp(std::lgamma(a) + std::lgamma(b) - std::lgamma(a + b));
}

// Kolmogorov–Smirnov distance sup_x |F_n(x) − F(x)| of the empirical
// distribution of `samples` to the distribution function F.
template <class Cdf> double ks_distance(std::vector<double> samples, Cdf F) {
  std::sort(samples.begin(), samples.end());
  const double n = double(samples.size());
  double D = 0;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const double f = F(samples[i]);
    D = std::max({D, f - double(i) / n, double(i + 1) / n - f});
  }
  return D;
}

// The squared singular values of A (eigenvalues of AᵀA, ascending), by a dense
// symmetric eigensolver: their absolute error is u ‖A‖², enough for a distribution.
inline std::vector<double> squared_singular_values(const MatD& A) {
  const MatD G = A.transpose() * A;
  const VecD ev = Eigen::SelfAdjointEigenSolver<MatD>(G, Eigen::EigenvaluesOnly).eigenvalues();
  return std::vector<double>(ev.data(), ev.data() + ev.size());
}

// The k largest eigenvalues of AᵀA, descending, by Lanczos (Spectra) on the
// operator w ↦ Aᵀ(A w): AᵀA is never formed. ok is false when Spectra did not
// converge; small problems (fewer than k + 2 columns) take a dense solver.
struct TopGramEigenvalues {
  std::vector<double> values;
  bool ok = false;
  Eigen::Index matvecs = 0;  // products with AᵀA
};

// The operator w ↦ Aᵀ(A w) in Spectra's interface (Scalar, rows, cols, perform_op),
// counting its products.
template <class Matrix> struct GramOperator {
  using Scalar = double;
  const Matrix& A;
  mutable Eigen::Index count = 0;
  Eigen::Index rows() const { return A.cols(); }
  Eigen::Index cols() const { return A.cols(); }
  void perform_op(const double* x, double* y) const {
    ++count;
    Eigen::Map<VecD>(y, A.cols()) = A.transpose() * (A * Eigen::Map<const VecD>(x, A.cols()));
  }
};

template <class Matrix>
TopGramEigenvalues top_gram_eigenvalues(const Matrix& A, int k, double tol = 1e-12) {
  using GramOp = GramOperator<Matrix>;
  const Eigen::Index d = A.cols();
  TopGramEigenvalues r;
  if (d < k + 2) {  // Spectra needs nev < ncv ≤ n
    const MatD G = A.transpose() * A;
    const VecD ev = Eigen::SelfAdjointEigenSolver<MatD>(G, Eigen::EigenvaluesOnly).eigenvalues();
    for (Eigen::Index i = ev.size() - 1; i >= 0 && Eigen::Index(r.values.size()) < k; --i) r.values.push_back(ev(i));
    r.ok = true;
    return r;
  }
  GramOp op{A};
  Spectra::SymEigsSolver<GramOp> eigs(op, k, std::min<Eigen::Index>(d, std::max(2 * k + 1, 24)));
  eigs.init();
  eigs.compute(Spectra::SortRule::LargestAlge, 1000, tol);
  r.matvecs = op.count;
  if (eigs.info() != Spectra::CompInfo::Successful) return r;
  const VecD ev = eigs.eigenvalues();  // returned by value: keep one copy
  r.values.assign(ev.data(), ev.data() + ev.size());
  r.ok = true;
  return r;
}

// σ_max(A) by Lanczos on w ↦ Aᵀ(A w). ok is false when Spectra did not converge.
struct TopSingularValue {
  double sigma = NAN;
  bool ok = false;
  Eigen::Index matvecs = 0;  // products with AᵀA
};

inline TopSingularValue top_singular_value(const MatD& A, double tol = 1e-12) {
  const TopGramEigenvalues top = top_gram_eigenvalues(A, 1, tol);
  TopSingularValue r;
  r.matvecs = top.matvecs, r.ok = top.ok;
  if (top.ok) r.sigma = std::sqrt(std::max(0.0, top.values[0]));
  return r;
}

}  // namespace qkvlab
