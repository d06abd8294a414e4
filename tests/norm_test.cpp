// core/normalize.hpp: the normalizers' image facts and inverses, the Lemma 8.2
// construction, and the status reports (δ_i = 0, points outside the image).
// Column-vector convention: points are columns.
#include "core/normalize.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace qkvlab {
namespace {

constexpr double eps = 1e-5;

template <class S> double max_abs(const Mat<S>& m) { return to_double(S(m.cwiseAbs().maxCoeff())); }

// Columns of norms 1e-3 … 1e3 with a non-zero mean.
MatD inputs(Rng& rng, int d, int n) {
  MatD X = rng.gaussian(d, n);
  for (int j = 0; j < n; ++j)
    X.col(j) = (X.col(j).array() + 0.7).matrix() * (std::pow(10.0, -3.0 + 6.0 * j / (n - 1)) / X.col(j).norm());
  return X;
}

TEST(LayerNorm, SquaredNormIsDSigma2OverSigma2PlusEps) {
  Rng rng(7, "norm");
  const int d = 12;
  const MatD X = inputs(rng, d, 9);
  const MatD N = layer_norm<double>(X, eps);
  for (int j = 0; j < X.cols(); ++j) {
    const VecD c = X.col(j).array() - X.col(j).mean();
    const double var = c.squaredNorm() / d;
    EXPECT_NEAR(N.col(j).squaredNorm(), d * var / (var + eps), 1e-13 * d) << j;
    // The image: zero mean, inside the open ball of radius √d.
    EXPECT_NEAR(N.col(j).sum(), 0.0, 1e-13 * std::sqrt(d)) << j;
    EXPECT_LT(N.col(j).squaredNorm(), d) << j;
  }
}

TEST(LayerNorm, IsInvariantToMeanShifts) {
  Rng rng(8, "shift");
  const MatD X = inputs(rng, 10, 7);
  MatD shifted = X;
  for (int j = 0; j < X.cols(); ++j) shifted.col(j).array() += 3.0 * X.col(j).norm() * (j % 2 ? 1 : -1);
  EXPECT_LE(max_abs<double>(MatD(layer_norm<double>(X, eps) - layer_norm<double>(shifted, eps))), 1e-13);
}

template <class S> void check_inverse_identities(double tol) {
  Rng rng(9, "inverse");
  const int d = 10;
  // N⁻¹(N(x)) = x − μ1 where the scale survives N (σ² ≲ ε).
  MatD X = rng.gaussian(d, 3) * std::sqrt(eps);
  X.array() += 0.5 * std::sqrt(eps);
  const Mat<S> Xs = cast<S>(X);
  const auto back = inverse_layer_norm<S>(layer_norm<S>(Xs, eps), eps);
  ASSERT_TRUE(back.ok());
  for (int j = 0; j < 3; ++j) {
    const Vec<S> centred = Xs.col(j).array() - S(Xs.col(j).mean());
    EXPECT_LE(rel_err<S>(centred, back.x.col(j)), tol) << j;
  }
  // N(N⁻¹(y)) = y on the image, up to r² = 0.999999.
  const Mat<S> Q = zero_mean_basis<S>(d);
  Mat<S> Y = Q * cast<S>(rng.gaussian(d - 1, 3));
  const double r2[] = {0.3, 0.99, 0.999999};
  for (int j = 0; j < 3; ++j) Y.col(j) *= S(std::sqrt(r2[j] * d)) / Y.col(j).norm();
  const auto pre = inverse_layer_norm<S>(Y, eps);
  ASSERT_TRUE(pre.ok());
  for (int j = 0; j < 3; ++j) EXPECT_LE(rel_err<S>(Y.col(j), layer_norm<S>(pre.x, eps).col(j)), tol) << j;
}

TEST(LayerNorm, InverseIdentitiesAtDouble) { check_inverse_identities<double>(1e-13); }
TEST(LayerNorm, InverseIdentitiesAtMp50) { check_inverse_identities<mp50>(1e-45); }

TEST(LayerNorm, PointsOutsideTheImageAreReportedNotReturned) {
  const int d = 6;
  const Mat<double> Q = zero_mean_basis<double>(d);
  MatD Y(d, 3);
  Y.col(0) = Q.col(0) * 0.5 * std::sqrt(d);  // inside
  Y.col(1) = Q.col(1) * 1.001 * std::sqrt(d);  // just outside
  Y.col(2) = Q.col(2) * 2.0 * std::sqrt(d);  // outside
  const auto p = inverse_layer_norm<double>(Y, eps);
  EXPECT_FALSE(p.ok());
  EXPECT_EQ(p.outside, (std::vector<Eigen::Index>{1, 2}));
  EXPECT_TRUE(p.x.col(0).allFinite());
  EXPECT_FALSE(p.x.col(2).allFinite());
}

TEST(ZeroMeanBasis, IsOrthonormalAndOrthogonalToOnes) {
  const Mat<mp50> Q = zero_mean_basis<mp50>(7);
  ASSERT_EQ(Q.cols(), 6);
  EXPECT_LE(max_abs<mp50>(Mat<mp50>(Q.transpose() * Q - Mat<mp50>::Identity(6, 6))), 1e-48);
  EXPECT_LE(max_abs<mp50>(Mat<mp50>(Mat<mp50>::Ones(1, 7) * Q)), 1e-48);
}

TEST(SpectralNorm, MatchesTheSvdAtDoubleAndConvergesAtMp50) {
  Rng rng(10, "spectral");
  const MatD B = rng.gaussian(9, 7);
  const double exact = Eigen::JacobiSVD<MatD>(B).singularValues()(0);
  const auto s = spectral_norm<double>(B);
  EXPECT_NEAR(s.norm, exact, 1e-14 * exact);
  EXPECT_NEAR(s.right.norm(), 1.0, 1e-15);
  // At 50 digits: ‖B v‖ = ‖B‖ is stationary, so ‖BᵀB v − ‖B‖² v‖ measures convergence.
  const Mat<mp50> Bm = cast<mp50>(B);
  const auto m = spectral_norm<mp50>(Bm);
  const Vec<mp50> residual = Bm.transpose() * (Bm * m.right) - m.norm * m.norm * m.right;
  EXPECT_LE(to_double(mp50(residual.norm())), 1e-45);
}

template <class S> void check_construction(double tol) {
  Rng rng(11, "lemma8.2");
  const int d = 8;
  const auto L = layer_norm_conjugacy<S>(cast<S>(draw_basis(rng, d, 1.0 / std::sqrt(d))));
  ASSERT_TRUE(L.ok());
  // δᵀT = 1ᵀ, A Z ⊆ Z, ‖A|_Z‖_2 = 1, attained at L.top ∈ Z.
  EXPECT_LE(max_abs<S>(Mat<S>(L.delta.transpose() * L.T - Mat<S>::Ones(1, d))), tol);
  EXPECT_LE(max_abs<S>(Mat<S>(Mat<S>::Ones(1, d) * L.A * L.Q_Z)), tol);
  EXPECT_NEAR(to_double(S(Eigen::JacobiSVD<Mat<S>>(Mat<S>(L.A * L.Q_Z)).singularValues()(0))), 1.0, tol);
  EXPECT_NEAR(to_double(S(L.top.norm())), 1.0, tol);
  EXPECT_NEAR(to_double(S(L.top.sum())), 0.0, tol);
  EXPECT_NEAR(to_double(S((L.A * L.top).norm())), 1.0, tol);
  // The semi-conjugacy on inputs spanning six decades.
  const Mat<S> X = cast<S>(inputs(rng, d, 7));
  const auto F = L.f(X, eps);
  ASSERT_TRUE(F.ok());
  const Mat<S> AN = L.A * layer_norm<S>(X, eps);
  for (int j = 0; j < X.cols(); ++j) EXPECT_LE(rel_err<S>(AN.col(j), layer_norm<S>(F.x, eps).col(j)), tol) << j;
}

TEST(Lemma82Construction, MapsZIntoZWithUnitNormAtDouble) { check_construction<double>(1e-12); }
TEST(Lemma82Construction, MapsZIntoZWithUnitNormAtMp50) { check_construction<mp50>(1e-45); }

TEST(Lemma82Construction, ReportsAZeroDelta) {
  // δ = (0, 1, …, 1) solves Tᵀδ = 1 when rows 2 … d of T sum to 1ᵀ.
  Rng rng(12, "zero delta");
  const int d = 6;
  MatD T = rng.gaussian(d, d);
  T.row(d - 1) = MatD::Ones(1, d) - T.middleRows(1, d - 2).colwise().sum();
  const auto L = layer_norm_conjugacy<double>(T);
  EXPECT_FALSE(L.ok());
  EXPECT_EQ(L.status, ConjugacyStatus::zero_delta);
  // Control: a generic T has no zero δ_i.
  EXPECT_TRUE(layer_norm_conjugacy<double>(MatD(rng.gaussian(d, d))).ok());
}

TEST(Lemma82Construction, ANormAboveOneIsDetectedAtTheBoundary) {
  Rng rng(13, "boundary");
  const int d = 8;
  const auto L = layer_norm_conjugacy<double>(draw_basis(rng, d, 1.0 / std::sqrt(d)));
  const MatD x = L.top * std::sqrt(d * eps * 1e3);  // ‖N(x)‖²/d = 1 − 1/1001
  const MatD AN = L.A * layer_norm<double>(x, eps);
  EXPECT_TRUE(inverse_layer_norm<double>(AN, eps).ok());
  const auto big = inverse_layer_norm<double>(MatD(1.5 * AN), eps);
  EXPECT_FALSE(big.ok());
  EXPECT_EQ(big.outside.size(), 1u);
}

TEST(RmsNorm, ImageAndInverse) {
  Rng rng(14, "rms");
  const int d = 9;
  const MatD X = inputs(rng, d, 7);
  const MatD R = rms_norm<double>(X, eps);
  for (int j = 0; j < X.cols(); ++j) {
    const double ms = X.col(j).squaredNorm() / d;
    EXPECT_NEAR(R.col(j).squaredNorm(), d * ms / (ms + eps), 1e-13 * d) << j;
  }
  const auto p = inverse_rms_norm<double>(R, eps);
  ASSERT_TRUE(p.ok());
  // R⁻¹(R(x)) = x where the scale survives; R(R⁻¹(y)) = y everywhere.
  EXPECT_LE(rel_err<double>(X.col(0), p.x.col(0)), 1e-13);
  for (int j = 0; j < X.cols(); ++j) EXPECT_LE(rel_err<double>(R.col(j), rms_norm<double>(p.x, eps).col(j)), 1e-13);
  MatD outside = VecD::Constant(d, 1.0);
  EXPECT_FALSE(inverse_rms_norm<double>(outside, eps).ok());  // ‖1‖ = √d: on the boundary
}

TEST(Dyt, ImageAndInverseAtDoubleAndMp50) {
  Rng rng(15, "dyt");
  const double alpha = 0.5;
  const MatD X = rng.gaussian(6, 4) * 2.0;
  const MatD Y = dyt<double>(X, alpha);
  EXPECT_LT(Y.cwiseAbs().maxCoeff(), 1.0);
  const auto p = inverse_dyt<double>(Y, alpha);
  ASSERT_TRUE(p.ok());
  EXPECT_LE(rel_err<double>(X, p.x), 1e-13);
  const auto pm = inverse_dyt<mp50>(dyt<mp50>(cast<mp50>(X), alpha), alpha);
  ASSERT_TRUE(pm.ok());
  EXPECT_LE(rel_err<mp50>(cast<mp50>(X), pm.x), 1e-45);
  MatD outside = Y;
  outside(2, 1) = -1.0;
  const auto q = inverse_dyt<double>(outside, alpha);
  EXPECT_EQ(q.outside, std::vector<Eigen::Index>{1});
}

}  // namespace
}  // namespace qkvlab
