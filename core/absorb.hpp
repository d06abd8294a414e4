// qwe.thm8.4 / qwe.cor8.4.1: absorbing the skip of a ReLU MLP (column-vector
// convention of docs/math/qkv.md, part 2: x ↦ x + W_2 σ(W_1 x), W_1 ∈ R^{m×d},
// W_2 ∈ R^{d×m}, σ = ReLU).
//
// Theorem (qwe.thm8.4). With pairwise non-collinear non-zero rows w_i of W_1
// and non-zero columns of W_2, x + W_2 σ(W_1 x) = W̃_2 σ(W̃_1 x) for all x for
// some W̃ of the same width m iff there is J ⊆ {1..m}, |J| ≥ d, with
// W_2 P_J W_1 = −I. Sufficiency (no hypothesis needed): W̃_1 = (I − 2P_J) W_1,
// W̃_2 = W_2, since σ(−t) = σ(t) − t gives W_2 σ(W̃_1 x) = W_2 σ(W_1 x) − W_2 P_J W_1 x.
// More generally x ↦ R x + W_2 σ(W_1 x) is skipless iff W_2 P_J W_1 = −R, with the
// same construction.
//
// The decision (qwe.cor8.4.1, decision half): Σ_{i∈J} W_2[:,i] w_iᵀ = −R is the 0/1
// linear system A z = −vec(R), A = [vec(W_2[:,i] w_iᵀ)]_i ∈ R^{d²×m}. When A has full
// column rank the real solution is unique: solve it by least squares, round to
// {0,1}, verify. Otherwise search every subset exactly (Gray code) up to
// Limits::max_exact columns, and answer "undecided" beyond it. A relaxation
// residual above tolerance is a "no" at any size (no real z, so no 0/1 z).
//
// Tolerances (Limits): with u the unit roundoff of the data (double, or float for
// float inputs), a subset J is accepted when ‖W_2 P_J W_1 + R‖_F ≤ τ,
//   τ = tol_factor · u · Σ_i ‖W_2[:,i]‖ ‖w_i‖      (tol_factor = 1e3, the verify budget),
// which bounds the rounding of the products Σ_i W_2[:,i] w_iᵀ (each rank-one term
// is computed to relative u) and of a pseudo-inverse computed at u. τ is invariant
// under the positive per-unit rescalings w_i → c w_i, W_2[:,i] → W_2[:,i]/c that
// leave the network unchanged, and so is every decision: it equals
// tol_factor·u·‖W_2‖_F‖W_1‖_F at the balanced representative (‖w_i‖ = ‖W_2[:,i]‖),
// the minimum of that product over the rescalings (Cauchy–Schwarz).
// Unit i counts as zero when ‖W_2[:,i]‖‖w_i‖ ≤ tol_factor·u·Σ_j ‖W_2[:,j]‖‖w_j‖ (its
// term is below the sum's rounding); rows i, j as collinear when the sine of their
// angle is ≤ tol_factor·u.
// Rank of A: singular values ≤ tol_factor·u·σ_max count as zero.
// All of it is computed on the balanced representative (each unit rescaled by a power of two, which
// is exact, so ‖w_i‖ ≈ ‖W_2[:,i]‖), with overflow-safe norms: a rescaling by 1e200 and 1e-200 gives the
// unscaled pair's decision and τ. Where τ itself is beyond double's range the answer is undecided
// with that reason (the decision's fields that are not numbers are NaN, never printed as numbers).
#pragma once

#include "core/types.hpp"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace qkvlab {

// ---- the construction (templated: runs at every precision) -------------------------

// W_2 P_J W_1 (J as 0-based row indices of W_1).
template <class S> Mat<S> skip_product(const Mat<S>& W_1, const Mat<S>& W_2, const std::vector<int>& J) {
  Mat<S> M = Mat<S>::Zero(W_2.rows(), W_1.cols());
  for (int i : J) M += W_2.col(i) * W_1.row(i);
  return M;
}

// x ↦ x + W_2 σ(W_1 x), applied to the columns of X (d × n).
template <class S> Mat<S> skip_relu_mlp(const Mat<S>& W_1, const Mat<S>& W_2, const Mat<S>& X) {
  const Mat<S> H = W_1 * X;
  return X + W_2 * Mat<S>(H.unaryExpr([](const S& t) { return t > S(0) ? t : S(0); }));
}

// x ↦ W_2 σ(W_1 x), applied to the columns of X.
template <class S> Mat<S> relu_mlp(const Mat<S>& W_1, const Mat<S>& W_2, const Mat<S>& X) {
  const Mat<S> H = W_1 * X;
  return W_2 * Mat<S>(H.unaryExpr([](const S& t) { return t > S(0) ? t : S(0); }));
}

template <class S> struct SkiplessMlp {
  Mat<S> W_1, W_2;  // W̃_1 ∈ R^{m×d}, W̃_2 ∈ R^{d×m}
};

// Sufficiency: W̃_1 = (I − 2P_J) W_1 (rows in J negated, exact), W̃_2 = W_2.
template <class S> SkiplessMlp<S> absorb_skip(const Mat<S>& W_1, const Mat<S>& W_2, const std::vector<int>& J) {
  SkiplessMlp<S> r{W_1, W_2};
  for (int i : J) r.W_1.row(i) = -W_1.row(i);
  return r;
}

// Another representation of the same skipless map: W̃_1' = D Π W̃_1, W̃_2' = W̃_2 Πᵀ D⁻¹,
// Π the permutation sending unit i to perm[i], D = diag(scale) with POSITIVE entries.
// Theorem 8.4's necessity statement (docs/math/qkv.md) allows any non-zero D (with |D|⁻¹): there the signs
// of D are what turn a skip network's rows into its absorbed ones (they encode J).
// Applied to an already skipless network, only a positive D keeps the map: ReLU is
// positively homogeneous, σ(c t) = c σ(t) for c > 0 and σ commutes with Π, whereas a
// negative entry adds the linear term σ(−t) = σ(t) − t. scale must be positive.
template <class S>
SkiplessMlp<S> permute_and_rescale(const SkiplessMlp<S>& w, const std::vector<int>& perm, const std::vector<S>& scale) {
  SkiplessMlp<S> r{Mat<S>(w.W_1.rows(), w.W_1.cols()), Mat<S>(w.W_2.rows(), w.W_2.cols())};
  for (std::size_t i = 0; i < perm.size(); ++i) {
    r.W_1.row(perm[i]) = scale[perm[i]] * w.W_1.row(Eigen::Index(i));
    r.W_2.col(perm[i]) = w.W_2.col(Eigen::Index(i)) / scale[perm[i]];
  }
  return r;
}

// A representable pair: W_2 with its J-columns replaced by −(W_1[J,:])⁺, the
// pseudo-inverse computed at S (complete orthogonal decomposition). When W_1[J,:]
// has full column rank (|J| ≥ d) this gives W_2 P_J W_1 = −I to rounding, an error
// of order u·cond(W_1[J,:]). With |J| < d it gives −(projector onto the row space
// of W_1[J,:]), and ‖W_2 P_J W_1 + I‖_2 = 1: no J that small can work (rank).
template <class S> Mat<S> representable_w2(const Mat<S>& W_1, Mat<S> W_2, const std::vector<int>& J) {
  Mat<S> rows(Eigen::Index(J.size()), W_1.cols());
  for (std::size_t k = 0; k < J.size(); ++k) rows.row(Eigen::Index(k)) = W_1.row(J[k]);
  const Mat<S> pinv = Eigen::CompleteOrthogonalDecomposition<Mat<S>>(rows).pseudoInverse();
  for (std::size_t k = 0; k < J.size(); ++k) W_2.col(J[k]) = -pinv.col(Eigen::Index(k));
  return W_2;
}

// ---- the decision (double) ----------------------------------------------------------

struct AbsorbLimits {
  double unit_roundoff = std::ldexp(1.0, -53);  // of the data: 2^-24 for float inputs
  double tol_factor = 1e3;
  int max_exact = 20;  // exhaustive search over at most 2^max_exact subsets
};

enum class Verdict { yes, no, undecided };
const char* verdict_name(Verdict v);

struct AbsorbDecision {
  Verdict verdict = Verdict::undecided;
  std::vector<int> J;         // 0-based rows of W_1; set when yes
  std::string reason;         // one line
  bool hypotheses_hold = false;
  std::string hypothesis_failure;  // which hypothesis fails, when one does
  bool independent = false;   // the m rank-one matrices are linearly independent
  double relaxation_residual = NAN;  // min_z∈R^m ‖A z + vec(R)‖ / ‖R‖_F
  double residual = NAN;      // ‖W_2 P_J W_1 + R‖_F / ‖R‖_F for the J found (yes)
  double tolerance = NAN;     // τ / ‖R‖_F, on the same scale as the residuals
  std::uint64_t subsets_searched = 0;
  std::optional<SkiplessMlp<double>> absorbed;  // when yes
};

// Checks the hypotheses of qwe.thm8.4; returns the first failure, or nothing.
std::optional<std::string> absorption_hypothesis_failure(const MatD& W_1, const MatD& W_2, const AbsorbLimits& limits);

// Is x ↦ R x + W_2 σ(W_1 x) a skipless ReLU MLP of width m? R = I by default.
// Throws std::invalid_argument on shapes that do not fit (W_1 m×d, W_2 d×m, R d×d).
AbsorbDecision decide_absorption(const MatD& W_1, const MatD& W_2, const AbsorbLimits& limits = {});
AbsorbDecision decide_absorption(const MatD& W_1, const MatD& W_2, const MatD& R, const AbsorbLimits& limits);

}  // namespace qkvlab
