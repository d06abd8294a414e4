// Changes of basis and their conditioning, at any scalar precision.
//
// A ChangeOfBasis holds T, its inverse computed by partial-pivot LU at the
// working precision, and κ = cond_2(T) estimated by power iteration on TᵀT and
// on (TᵀT)⁻¹ (matrix–vector products and LU solves only: an SVD at 50 digits
// would cost a second per matrix). κ only scales an error, so a few percent is
// enough. When κ·u > 1e-3 the basis is numerically singular at that precision:
// no identity through T⁻¹ can be verified, and the status says so instead of a
// huge error being passed off as a measurement.
#pragma once

#include "core/limits.hpp"
#include "core/rng.hpp"
#include "core/types.hpp"

#include <cmath>
#include <limits>

namespace qkvlab {

enum class BasisStatus { ok, singular };

template <class S> struct ChangeOfBasis {
  Mat<S> T, T_inv;
  double kappa = 1.0;  // cond_2(T); +inf when the inverse iteration overflows
  BasisStatus status = BasisStatus::ok;
  bool singular() const { return status == BasisStatus::singular; }
};

// Largest eigenvalue of a symmetric positive semi-definite operator v ↦ apply(v),
// by power iteration from a fixed start (deterministic). +inf when an iterate
// overflows (the operator is numerically unbounded: an inverse of a singular T).
template <class S, class Apply> double top_eigenvalue(Eigen::Index d, Apply apply, int iterations = 60) {
  Vec<S> v(d);
  for (Eigen::Index i = 0; i < d; ++i) v(i) = S(1) + S(i % 7) / S(10);  // not orthogonal to generic eigenvectors
  v.normalize();
  double lambda = 0;
  for (int it = 0; it < iterations; ++it) {
    Vec<S> w = apply(v);
    const double norm = to_double(S(w.norm()));
    if (!std::isfinite(norm)) return std::numeric_limits<double>::infinity();
    lambda = to_double(S(v.dot(w)));
    if (norm == 0) return lambda;
    v = w / S(norm);
  }
  return lambda;
}

// κ = cond_2(T) ≥ 1; +inf when the inverse iteration overflows.
template <class S> double condition_number(const Mat<S>& T, const Eigen::PartialPivLU<Mat<S>>& lu) {
  const Eigen::Index d = T.rows();
  const double smax2 = top_eigenvalue<S>(d, [&](const Vec<S>& v) { return Vec<S>(T.transpose() * (T * v)); });
  const double inv_smin2 = top_eigenvalue<S>(d, [&](const Vec<S>& v) {
    return Vec<S>(lu.solve(Vec<S>(lu.transpose().solve(v))));
  });
  const double kappa = std::sqrt(smax2) * std::sqrt(inv_smin2);
  return std::isfinite(kappa) ? std::max(1.0, kappa) : std::numeric_limits<double>::infinity();
}

// The threshold on κ·u beyond which a change of basis counts as singular.
inline constexpr double singular_threshold = 1e-3;

// Weights that serve as a change of basis are drawn conditioned on
// cond_2 ≤ 1/(1e3 u_float) ≈ 1.7e4, the largest κ at which an identity through
// T⁻¹ is still verifiable in float. A Gaussian d×d matrix exceeds it with
// probability about 2d/1.7e4 (under 1% at d = 64); the near-singular case has
// its own negative control. cond_2 here is exact (Jacobi SVD in double).
inline const double max_basis_condition = singular_threshold / unit_roundoff<float>();

// Bounded (core/limits.hpp): a SamplingLimit after default_max_attempts draws.
inline MatD draw_basis(Rng& rng, Eigen::Index d, double stddev) {
  return draw_until(
      default_max_attempts, "cond_2(T) <= 1.7e4 for a " + std::to_string(d) + "x" + std::to_string(d) + " Gaussian T",
      [&] { return rng.gaussian(d, d, stddev); },
      [&](const MatD& m) {
        const auto sv = Eigen::JacobiSVD<MatD>(m).singularValues();
        return sv(d - 1) > 0 && sv(0) / sv(d - 1) <= max_basis_condition;
      });
}

template <class S> ChangeOfBasis<S> change_of_basis(const Mat<S>& T) {
  ChangeOfBasis<S> b;
  b.T = T;
  Eigen::PartialPivLU<Mat<S>> lu(T);
  b.T_inv = lu.inverse();
  b.kappa = condition_number<S>(T, lu);
  if (!b.T_inv.allFinite() || !(b.kappa * unit_roundoff<S>() <= singular_threshold))
    b.status = BasisStatus::singular;
  return b;
}

// ‖a − b‖_F / ‖a‖_F, evaluated at the working precision and reported in double: 0 when a = b (both
// zero included), +inf when a = 0 ≠ b, NaN when either holds a NaN.
template <class S, class A, class B> double rel_err(const A& a, const B& b) {
  const S num = (a - b).norm();
  const S den = a.norm();
  if (num == S(0)) return 0.0;
  if (den == S(0)) return std::numeric_limits<double>::infinity();
  return to_double(S(num / den));
}

// Block-diagonal matrix diag(B_1, …, B_H) from H square blocks.
template <class S> Mat<S> block_diagonal(const std::vector<Mat<S>>& blocks) {
  Eigen::Index d = 0;
  for (const auto& b : blocks) d += b.rows();
  Mat<S> m = Mat<S>::Zero(d, d);
  Eigen::Index at = 0;
  for (const auto& b : blocks) {
    m.block(at, at, b.rows(), b.cols()) = b;
    at += b.rows();
  }
  return m;
}

}  // namespace qkvlab

namespace qkvlab {

// The orthogonal factor of G = Q R at the working precision, with the signs
// fixed so that R has a positive diagonal (Haar-distributed when G is Gaussian).
// Orthogonal to rounding at S, which a matrix drawn in double and cast is not.
template <class S> Mat<S> orthogonal_factor(const Mat<S>& G) {
  Eigen::HouseholderQR<Mat<S>> qr(G);
  Mat<S> q = qr.householderQ();
  for (Eigen::Index j = 0; j < G.cols(); ++j)
    if (qr.matrixQR()(j, j) < S(0)) q.col(j) = -q.col(j);
  return q;
}

// Instantiated once per scalar in core/instances_*.cpp (P: extern here, nothing there).
#define QKVLAB_LINALG_INSTANCES(P, S)                             \
  P template ChangeOfBasis<S> change_of_basis<S>(const Mat<S>&); \
  P template Mat<S> orthogonal_factor<S>(const Mat<S>&);
#define QKVLAB_LINALG_EXTERN(S) QKVLAB_LINALG_INSTANCES(extern, S)
QKVLAB_EXTERN_INSTANCES(QKVLAB_LINALG_EXTERN)

}  // namespace qkvlab
