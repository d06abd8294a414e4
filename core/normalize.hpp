// LayerNorm, RMSNorm and Dynamic Tanh without gain, their inverses on their
// images, and the semi-conjugacy construction of Lemma 8.2 (Query-weight elimination §8.3;
// docs/math/qkv.md, "Normalizers").
//
// Column-vector convention, as Query-weight elimination's §8.3: a point is a column x ∈ R^d, a
// matrix X ∈ R^{d×n} holds n points as its columns, and linear maps act as x ↦ A x.
// 1 is the all-ones vector, Z = {z : 1ᵀz = 0} the zero-mean subspace.
//
//   N(x)   = (x − μ(x)1) / sqrt(σ²(x) + ε)   μ the mean, σ² the population variance
//   N⁻¹(y) = sqrt(ε) y / sqrt(1 − ‖y‖²/d)    on the image {y ∈ Z : ‖y‖ < √d}
//   LN_G(x) = G N(x)                          G a positive diagonal gain
//   R(x)   = x / sqrt(‖x‖²/d + ε)             image {‖y‖ < √d}, the same inverse formula
//   Y(x)   = tanh(α x)                        image (−1, 1)^d, Y⁻¹(y) = atanh(y)/α
//
// The inverses report the points outside the image (Preimage::outside) and
// leave those columns NaN: a caller must read the status before the numbers.
// N⁻¹ checks the ball only: membership in Z is a question of rounding
// tolerance, so off Z it returns the formula's value (N of it is the centred,
// rescaled y, not y).
//
// Lemma 8.2: for T ∈ GL(d), δ = T^{−T}1, D_0 = diag(δ) makes D_0 T map Z into Z;
// c = 1/‖D_0 T Q_Z‖_2 and A = D T with D = c D_0 give ‖A|_Z‖_2 = 1, so A maps the
// image of N into itself and f(x) = N⁻¹(A N(x)) satisfies N(f(x)) = A N(x).
// ‖·‖_2 is computed at the working precision by power iteration (top_eigenvalue
// of core/linalg.hpp) on a repeatedly squared Gram matrix: an SVD at 50 digits
// would cost ~0.1–1 s per matrix.
#pragma once

#include "core/linalg.hpp"
#include "core/types.hpp"

#include <cmath>
#include <limits>
#include <vector>

namespace qkvlab {

// Points of Y outside the image of a normalizer have no preimage.
template <class S> struct Preimage {
  Mat<S> x;                           // columns of points outside the image are NaN
  std::vector<Eigen::Index> outside;  // their column indices
  bool ok() const { return outside.empty(); }
};

namespace detail {
template <class S> S nan() { return S(std::numeric_limits<double>::quiet_NaN()); }

// sqrt(ε) y / sqrt(1 − ‖y‖²/d) column by column; outside when ‖y‖²/d ≥ 1.
template <class S> Preimage<S> inverse_ball(const Mat<S>& Y, double eps) {
  using std::sqrt;
  const S d = S(Y.rows()), sqrt_eps = sqrt(S(eps));
  Preimage<S> p{Mat<S>(Y.rows(), Y.cols()), {}};
  for (Eigen::Index j = 0; j < Y.cols(); ++j) {
    const S q = Y.col(j).squaredNorm() / d;
    if (!(q < S(1))) {
      p.outside.push_back(j);
      p.x.col(j).setConstant(nan<S>());
      continue;
    }
    p.x.col(j) = Y.col(j) * S(sqrt_eps / sqrt(S(1) - q));
  }
  return p;
}
}  // namespace detail

// N(x), column by column.
template <class S> Mat<S> layer_norm(const Mat<S>& X, double eps) {
  using std::sqrt;
  const S d = S(X.rows());
  Mat<S> Y(X.rows(), X.cols());
  for (Eigen::Index j = 0; j < X.cols(); ++j) {
    const Vec<S> centred = X.col(j).array() - S(X.col(j).sum() / d);
    Y.col(j) = centred / S(sqrt(S(centred.squaredNorm() / d + S(eps))));
  }
  return Y;
}

// LN_G(x) = G N(x), G = diag(gain).
template <class S> Mat<S> layer_norm(const Mat<S>& X, const Vec<S>& gain, double eps) {
  return gain.asDiagonal() * layer_norm<S>(X, eps);
}

// N⁻¹ on {y ∈ Z : ‖y‖ < √d}.
template <class S> Preimage<S> inverse_layer_norm(const Mat<S>& Y, double eps) {
  return detail::inverse_ball<S>(Y, eps);
}

// R(x) = x / sqrt(‖x‖²/d + ε), column by column.
template <class S> Mat<S> rms_norm(const Mat<S>& X, double eps) {
  using std::sqrt;
  const S d = S(X.rows());
  Mat<S> Y(X.rows(), X.cols());
  for (Eigen::Index j = 0; j < X.cols(); ++j)
    Y.col(j) = X.col(j) / S(sqrt(S(X.col(j).squaredNorm() / d + S(eps))));
  return Y;
}

// R⁻¹ on {‖y‖ < √d}.
template <class S> Preimage<S> inverse_rms_norm(const Mat<S>& Y, double eps) {
  return detail::inverse_ball<S>(Y, eps);
}

// Y(x) = tanh(α x), elementwise (scalar tanh: Eigen's vectorized one approximates).
template <class S> Mat<S> dyt(const Mat<S>& X, double alpha) {
  return X.unaryExpr([a = S(alpha)](const S& v) -> S {
    using std::tanh;
    return tanh(S(a * v));
  });
}

// Y⁻¹(y) = atanh(y)/α on (−1, 1)^d.
template <class S> Preimage<S> inverse_dyt(const Mat<S>& Y, double alpha) {
  using std::abs;
  using std::atanh;
  Preimage<S> p{Mat<S>(Y.rows(), Y.cols()), {}};
  for (Eigen::Index j = 0; j < Y.cols(); ++j) {
    if (!(Y.col(j).cwiseAbs().maxCoeff() < S(1))) {
      p.outside.push_back(j);
      p.x.col(j).setConstant(detail::nan<S>());
      continue;
    }
    for (Eigen::Index i = 0; i < Y.rows(); ++i) p.x(i, j) = S(atanh(Y(i, j)) / S(alpha));
  }
  return p;
}

// An orthonormal basis Q_Z ∈ R^{d×(d−1)} of Z at the working precision: the
// last d − 1 columns of the Householder reflection that maps 1 to a multiple of e_1.
template <class S> Mat<S> zero_mean_basis(Eigen::Index d) {
  const Mat<S> ones = Mat<S>::Ones(d, 1);
  Eigen::HouseholderQR<Mat<S>> qr(ones);
  const Mat<S> Q = qr.householderQ();
  return Q.rightCols(d - 1);
}

// ‖B‖_2 and a unit right singular vector v (‖B v‖ = ‖B‖_2), at the working
// precision. Power iteration on P = (BᵀB)^(2^squarings) (rescaled after each
// squaring): its eigenvalue ratio is (σ_2/σ_1)^(2^(squarings+1)), so 30 steps of
// top_eigenvalue reach 50 digits unless σ_2/σ_1 > 0.995. The norm is then ‖B v‖,
// whose error is second order in v's.
template <class S> struct SpectralNorm {
  S norm;
  Vec<S> right;
};

template <class S> SpectralNorm<S> spectral_norm(const Mat<S>& B, int squarings = 8) {
  using std::abs;
  Mat<S> P = B.transpose() * B;
  for (int k = 0; k < squarings; ++k) {
    P = (P * P).eval();
    const S scale = P.cwiseAbs().maxCoeff();
    if (scale > S(0)) P /= scale;
  }
  // The operator sees each iterate of the power iteration; the last one is the eigenvector estimate.
  Vec<S> v;
  top_eigenvalue<S>(P.rows(), [&](const Vec<S>& w) {
    v = w;
    return Vec<S>(P * w);
  }, 30);
  v.normalize();
  return {S((B * v).norm()), v};
}

// The Lemma 8.2 construction for T ∈ GL(d).
enum class ConjugacyStatus { ok, zero_delta };

template <class S> struct LayerNormConjugacy {
  Mat<S> T;
  Vec<S> delta;    // δ = T^{−T} 1
  S c;             // 1 / ‖D_0 T Q_Z‖_2
  Mat<S> Q_Z;      // orthonormal basis of Z
  Mat<S> A;        // D T, D = c diag(δ)
  Vec<S> top;      // unit z ∈ Z with ‖A z‖ = ‖A|_Z‖_2 (= 1)
  ConjugacyStatus status = ConjugacyStatus::ok;
  bool ok() const { return status == ConjugacyStatus::ok; }
  Vec<S> D() const { return c * delta; }
  // f(X) = N⁻¹(A N(X)), column by column.
  Preimage<S> f(const Mat<S>& X, double eps) const {
    return inverse_layer_norm<S>(Mat<S>(A * layer_norm<S>(X, eps)), eps);
  }
};

// Some δ_i = 0 (zero_delta) when |δ_i| ≤ 1e3 u ‖δ‖_∞: D is then singular at the
// working precision by the rule of core/linalg.hpp (cond(D)·u > 1e-3). A is still
// built (it maps Z into Z), but D⁻¹ (Thm 8.3) does not exist.
template <class S> LayerNormConjugacy<S> layer_norm_conjugacy(const Mat<S>& T) {
  using std::abs;
  const Eigen::Index d = T.rows();
  LayerNormConjugacy<S> L;
  L.T = T;
  L.delta = Eigen::PartialPivLU<Mat<S>>(Mat<S>(T.transpose())).solve(Vec<S>::Ones(d));
  const S largest = L.delta.cwiseAbs().maxCoeff();
  const S zero_tol = S(unit_roundoff<S>() / singular_threshold) * largest;
  for (Eigen::Index i = 0; i < d; ++i)
    if (!(abs(L.delta(i)) > zero_tol)) L.status = ConjugacyStatus::zero_delta;
  L.Q_Z = zero_mean_basis<S>(d);
  const Mat<S> D0T = L.delta.asDiagonal() * T;
  const auto norm = spectral_norm<S>(Mat<S>(D0T * L.Q_Z));
  L.c = S(1) / norm.norm;
  L.A = L.c * D0T;
  L.top = L.Q_Z * norm.right;
  return L;
}

// Instantiated once per scalar in core/instances_*.cpp (P: extern here, nothing there).
#define QKVLAB_NORMALIZE_INSTANCES(P, S)                                                 \
  P template Mat<S> layer_norm<S>(const Mat<S>&, double);                               \
  P template Mat<S> layer_norm<S>(const Mat<S>&, const Vec<S>&, double);                \
  P template Preimage<S> inverse_layer_norm<S>(const Mat<S>&, double);                  \
  P template Mat<S> rms_norm<S>(const Mat<S>&, double);                                 \
  P template Preimage<S> inverse_rms_norm<S>(const Mat<S>&, double);                    \
  P template Mat<S> dyt<S>(const Mat<S>&, double);                                      \
  P template Preimage<S> inverse_dyt<S>(const Mat<S>&, double);                         \
  P template Mat<S> zero_mean_basis<S>(Eigen::Index);                                   \
  P template SpectralNorm<S> spectral_norm<S>(const Mat<S>&, int);                      \
  P template LayerNormConjugacy<S> layer_norm_conjugacy<S>(const Mat<S>&);
#define QKVLAB_NORMALIZE_EXTERN(S) QKVLAB_NORMALIZE_INSTANCES(extern, S)
QKVLAB_EXTERN_INSTANCES(QKVLAB_NORMALIZE_EXTERN)

}  // namespace qkvlab
