// The normalizer identities of Query-weight elimination §8.3 on given points: what the
// random-weight claims (qwe_norm.cpp) measure, written once so that their
// checkpoint forms (theory_lm/) measure the same on a model's own activations,
// ε and gains. Column-vector convention: the points are the columns of X.
#pragma once

#include "core/normalize.hpp"
#include "theory/claim.hpp"

namespace qkvlab::theory {

// T ~ N(0, 1/d), drawn (draw_basis) on cond₂(T) ≤ 1.7e4 and conditioned also on
// cond₂(D_0 T) ≤ 1.7e4: Thm 8.3 inverts A = D T, which must be verifiable in
// float too. This excludes δ_i ≈ 0 (the zero_delta status has its own test).
MatD draw_conjugacy_basis(Rng& rng, int d);

// A point along the unit direction v whose mean square ‖x‖²/d is ε(1 − s)/s, s = 1e-4,
// so that ‖R(x)‖²/d (and ‖N(x)‖²/d for v ∈ Z) is 1 − 1e-4: the probe at the image's
// boundary that the controls of norm 1.5 must push out.
inline constexpr double boundary_s = 1e-4;
template <class S> Vec<S> at_boundary(const Vec<S>& v, double eps) {
  using std::sqrt;
  return v * S(sqrt(S(double(v.rows()) * eps * (1 - boundary_s) / boundary_s)));
}

// The columns of X followed by x.
template <class S> Mat<S> with_column(const Mat<S>& X, const Vec<S>& x) {
  Mat<S> out(X.rows(), X.cols() + 1);
  out << X, x;
  return out;
}

// qwe.lemma8.2's semi-conjugacy N(f(x)) = A N(x) on the columns of X, f = N⁻¹ ∘ A ∘ N:
// outcome.rel_err the largest column error, outcome.kappa the mat-vec condition
// max_j ‖A‖ ‖N(x_j)‖/‖A N(x_j)‖; points that leave the image make rel_err NaN and
// are named in the note (then no controls). Controls: T in place of D T; c × 1.5
// (‖A|_Z‖ = 1.5: points near the boundary must be detected leaving the image).
template <class S> struct SemiConjugacy {
  Outcome outcome;
  Preimage<S> F;  // f(X)
  Mat<S> AN;      // A N(X)
};
template <class S> SemiConjugacy<S> semi_conjugacy(const LayerNormConjugacy<S>& L, const Mat<S>& X, double eps);

// qwe.thm8.3 on the columns of X: G̃ N(f(x)) = (G̃ D T G⁻¹) LN_G(x) and
// W' LN_G̃(f(x)) = W LN_G(x), W' = W G T⁻¹ D⁻¹ G̃⁻¹ (g, g_red the diagonals of G, G̃;
// W maps R^d to the next layer's inputs). κ = max(cond₂(T), cond₂(A)) · max_j
// ‖W G‖ ‖N(x_j)‖/‖W G N(x_j)‖. Controls: W' without D⁻¹; W' without G̃⁻¹.
template <class S>
Outcome change_of_basis_through_norm(const LayerNormConjugacy<S>& L, const Mat<S>& X, const Vec<S>& g,
                                     const Vec<S>& g_red, const Mat<S>& W, double eps);

// qwe.remark5's RMSNorm half on the columns of X: R(f(x)) = A R(x), A = T/‖T‖₂,
// f = R⁻¹ ∘ A ∘ R; κ = 1 (the round trip is well conditioned at any radius). Control:
// A = 1.5 T/‖T‖₂, points must be detected leaving the image. The note gives max ‖A R(x)‖/√d.
template <class S> Outcome rms_semi_conjugacy(const Mat<S>& T, const Mat<S>& X, double eps);

// Defined and instantiated for every scalar of the ladder in qwe_norm.cpp.

}  // namespace qkvlab::theory
