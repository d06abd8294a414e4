// core/: the shared numerics every check relies on. Each tolerance is tied to
// the unit roundoff of the precision under test, and each check that compares
// two computations is paired with a control showing the tolerance is tight
// enough to catch a wrong result.
#include "core/attention.hpp"
#include "core/error_model.hpp"
#include "core/errors.hpp"
#include "core/json_text.hpp"
#include "core/linalg.hpp"
#include "core/rng.hpp"
#include "core/types.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

namespace qkvlab {
namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

// ‖A − I‖_F at the working precision, in double.
template <class S> double distance_to_identity(const Mat<S>& A) {
  return to_double(S((A - Mat<S>::Identity(A.rows(), A.cols())).norm()));
}

// ‖QᵀQ − I‖_F.
template <class S> double orthogonality_error(const Mat<S>& Q) {
  return distance_to_identity<S>(Mat<S>(Q.transpose() * Q));
}

// A d×d Gaussian matrix (entries N(0, 1/d)) whose last column duplicates its first.
template <class S> Mat<S> duplicate_column_matrix(Rng& rng, Eigen::Index d) {
  Mat<S> T = cast<S>(rng.gaussian(d, d, 1.0 / std::sqrt(double(d))));
  T.col(d - 1) = T.col(0);
  return T;
}

// The near-singular construction of the lemma3.1 control: the last column is
// the first plus 10·u times a random column, so cond_2 ≈ 1/(10 u_S).
template <class S> Mat<S> near_singular_matrix(Rng& rng, Eigen::Index d, double perturbation) {
  Mat<S> T = cast<S>(rng.gaussian(d, d, 1.0 / std::sqrt(double(d))));
  T.col(d - 1) = T.col(0) + S(perturbation) * cast<S>(rng.gaussian(d, 1, 1.0));
  return T;
}

// --- masked softmax -----------------------------------------------------------

TEST(Softmax, RowsSumToOneForBothMasks) {
  Rng rng(1, "softmax rows");
  const MatD logits = rng.gaussian(6, 6, 3.0);
  for (Mask mask : {Mask::causal, Mask::bidirectional}) {
    const MatD p = softmax_rows<double>(logits, mask);
    for (Eigen::Index i = 0; i < p.rows(); ++i)
      EXPECT_NEAR(p.row(i).sum(), 1.0, 8 * unit_roundoff<double>()) << mask_name(mask) << " row " << i;
    EXPECT_GE(p.minCoeff(), 0.0);
  }
}

TEST(Softmax, MaskChangesEveryRowButTheLast) {
  // Control for the mask: the causal and bidirectional softmax agree only on
  // the last row, the one row that sees every position under both masks.
  Rng rng(2, "softmax masks");
  const MatD logits = rng.gaussian(5, 5, 1.0);
  const MatD causal = softmax_rows<double>(logits, Mask::causal);
  const MatD bidirectional = softmax_rows<double>(logits, Mask::bidirectional);
  const Eigen::Index last = logits.rows() - 1;
  EXPECT_EQ(causal.row(last), bidirectional.row(last));
  for (Eigen::Index i = 0; i < last; ++i)
    EXPECT_GE((causal.row(i) - bidirectional.row(i)).norm(), 1e-3) << "row " << i;
}

TEST(Softmax, CausalMaskGivesExactZerosAboveTheDiagonal) {
  Rng rng(3, "softmax causal");
  const MatD logits = rng.gaussian(7, 7, 2.0);
  const MatD p = softmax_rows<double>(logits, Mask::causal);
  for (Eigen::Index i = 0; i < p.rows(); ++i)
    for (Eigen::Index j = 0; j < p.cols(); ++j) {
      if (j > i) EXPECT_EQ(p(i, j), 0.0) << "(" << i << ", " << j << ")";
      else EXPECT_GT(p(i, j), 0.0) << "(" << i << ", " << j << ")";
    }
}

TEST(Softmax, StableForLogitsOfOrder1e4) {
  // exp(1e4) overflows every IEEE type: only the max subtraction keeps the
  // result finite.
  ASSERT_TRUE(std::isinf(std::exp(1e4)));
  ASSERT_TRUE(std::isinf(std::exp(1e4f)));
  MatD logits(3, 3);
  logits << 1e4, -1e4, 0,       //
      1e4 - 1, 1e4, -1e4,       //
      -1e4, 1e4, 1e4;
  for (Mask mask : {Mask::causal, Mask::bidirectional}) {
    const MatD p = softmax_rows<double>(logits, mask);
    ASSERT_TRUE(p.allFinite()) << mask_name(mask);
    for (Eigen::Index i = 0; i < p.rows(); ++i) EXPECT_NEAR(p.row(i).sum(), 1.0, 4 * unit_roundoff<double>());
    EXPECT_EQ(p(0, 0), 1.0);                             // exp(-1e4) underflows to 0 next to it
    EXPECT_NEAR(p(1, 1), 1.0 / (1.0 + std::exp(-1.0)), 1e-15);
  }
  const Mat<float> pf = softmax_rows<float>(logits.cast<float>(), Mask::bidirectional);
  EXPECT_TRUE(pf.allFinite());
  EXPECT_NEAR(pf(2, 1), 0.5f, 1e-6f);  // a tie between two logits of 1e4
}

// --- Rng ------------------------------------------------------------------------

TEST(Rng, SameSeedAndStreamGiveIdenticalDraws) {
  Rng a(42, "qwe.lemma3.1|d=8"), b(42, "qwe.lemma3.1|d=8");
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.next_u64(), b.next_u64()) << "draw " << i;
  EXPECT_EQ(a.gaussian(4, 5), b.gaussian(4, 5));  // bitwise: Eigen's == compares exactly
}

TEST(Rng, DifferentStreamsAndSeedsDiffer) {
  const MatD base = Rng(42, "stream a").gaussian(8, 8);
  const MatD other_stream = Rng(42, "stream b").gaussian(8, 8);
  const MatD other_seed = Rng(43, "stream a").gaussian(8, 8);
  // Independent N(0,1) matrices: ‖A − B‖_F ≈ sqrt(2·64) ≈ 11, nowhere near 0.
  EXPECT_GT((base - other_stream).norm(), 1.0);
  EXPECT_GT((base - other_seed).norm(), 1.0);
  EXPECT_NE(stream_hash("stream a"), stream_hash("stream b"));
}

TEST(Rng, GaussianMomentsMatchTheRequestedScale) {
  // n = 250 000 draws of N(0, σ²): the sample mean has standard deviation
  // σ/sqrt(n) and the sample variance σ²·sqrt(2/n). Five standard deviations
  // bound the deviation of a correct generator with probability 1 − 6e-7;
  // the fixed seed makes the outcome deterministic.
  constexpr double sigma = 0.37;
  constexpr Eigen::Index rows = 500, cols = 500;
  const double n = double(rows * cols);
  const MatD x = Rng(7, "moments").gaussian(rows, cols, sigma);
  const double mean = x.mean();
  const double var = (x.array() - mean).square().sum() / (n - 1);
  EXPECT_LE(std::abs(mean), 5 * sigma / std::sqrt(n));
  EXPECT_LE(std::abs(var - sigma * sigma), 5 * sigma * sigma * std::sqrt(2 / n));
  // Control: the same tolerance tells σ from a 1% larger scale.
  EXPECT_GT(std::abs(var - 1.01 * 1.01 * sigma * sigma), 5 * sigma * sigma * std::sqrt(2 / n));
}

TEST(Rng, UnitRowsHaveUnitNorm) {
  const MatD x = Rng(8, "unit rows").unit_rows(20, 16);
  for (Eigen::Index i = 0; i < x.rows(); ++i) EXPECT_NEAR(x.row(i).norm(), 1.0, 4 * unit_roundoff<double>());
}

// --- change_of_basis ----------------------------------------------------------------

TEST(ChangeOfBasis, KappaIsWithinAFewPercentOfTheExactCondition) {
  // Reference: cond_2 from the singular values of Eigen's Jacobi SVD in double.
  for (Eigen::Index d : {8, 16}) {
    for (int trial = 0; trial < 10; ++trial) {
      Rng rng(trial, "kappa d=" + std::to_string(d));
      const MatD T = rng.gaussian(d, d, 1.0 / std::sqrt(double(d)));
      const auto sv = Eigen::JacobiSVD<MatD>(T).singularValues();
      const double exact = sv(0) / sv(d - 1);
      const double estimate = change_of_basis<double>(T).kappa;
      const double estimate_mp = change_of_basis<mp50>(cast<mp50>(T)).kappa;
      EXPECT_NEAR(estimate, exact, 0.05 * exact) << "d=" << d << " trial=" << trial;
      EXPECT_NEAR(estimate_mp, exact, 0.05 * exact) << "d=" << d << " trial=" << trial;
      // Control: the cruder bound ‖T‖_F ‖T⁻¹‖_F falls outside the tolerance.
      const double frobenius_bound = T.norm() * T.inverse().norm();
      EXPECT_GT(frobenius_bound, 1.2 * exact) << "d=" << d << " trial=" << trial;
    }
  }
}

template <class S> void expect_inverse_is_correct(double tolerance_in_u) {
  Rng rng(11, "inverse");
  const Eigen::Index d = 12;
  const Mat<S> T = cast<S>(draw_basis(rng, d, 1.0 / std::sqrt(double(d))));
  const auto b = change_of_basis<S>(T);
  ASSERT_FALSE(b.singular());
  const double bound = tolerance_in_u * b.kappa * unit_roundoff<S>();
  EXPECT_LE(distance_to_identity<S>(Mat<S>(b.T * b.T_inv)), bound);
  EXPECT_LE(distance_to_identity<S>(Mat<S>(b.T_inv * b.T)), bound);
  // Control: the inverse of T rounded to float does not meet the bound.
  const Mat<S> float_inverse = cast<S>(to_double<S>(T).template cast<float>().inverse().template cast<double>());
  EXPECT_GT(distance_to_identity<S>(Mat<S>(b.T * float_inverse)), 1e3 * bound);
}

TEST(ChangeOfBasis, InverseIsCorrectAtDouble) { expect_inverse_is_correct<double>(100); }
TEST(ChangeOfBasis, InverseIsCorrectAtMp50) { expect_inverse_is_correct<mp50>(100); }

template <class S> void expect_singular_matrices_flagged(int trials) {
  for (int trial = 0; trial < trials; ++trial) {
    Rng rng(trial, "singular");
    const auto exact = change_of_basis<S>(duplicate_column_matrix<S>(rng, 8));
    EXPECT_TRUE(exact.singular()) << "duplicate column, trial " << trial << ", kappa " << exact.kappa;
    EXPECT_GE(exact.kappa, 1.0) << "cond_2 is at least 1; trial " << trial;
    EXPECT_GT(exact.kappa * unit_roundoff<S>(), singular_threshold) << "trial " << trial;
    const auto near = change_of_basis<S>(near_singular_matrix<S>(rng, 8, 10 * unit_roundoff<S>()));
    EXPECT_TRUE(near.singular()) << "near singular, trial " << trial << ", kappa " << near.kappa;
    // Control: a well-conditioned draw from the same stream is not flagged.
    EXPECT_FALSE(change_of_basis<S>(cast<S>(draw_basis(rng, 8, 0.35))).singular()) << "trial " << trial;
  }
}

// Many draws: rounding in the LU of an exactly singular matrix usually leaves a
// tiny non-zero pivot rather than a zero one, and its size varies by draw.
TEST(ChangeOfBasis, SingularAndNearSingularFlaggedAtDouble) { expect_singular_matrices_flagged<double>(200); }
TEST(ChangeOfBasis, SingularAndNearSingularFlaggedAtMp50) { expect_singular_matrices_flagged<mp50>(20); }
TEST(ChangeOfBasis, SingularAndNearSingularFlaggedAtFloat) { expect_singular_matrices_flagged<float>(200); }

TEST(ChangeOfBasis, SingularityIsJudgedAtTheWorkingPrecision) {
  // Near-singular for double (cond ≈ 1/(10 u_double) ≈ 1e15) is comfortably
  // invertible at 50 digits (κ·u ≈ 1e-36).
  Rng rng(5, "precision aware");
  const MatD T = near_singular_matrix<double>(rng, 8, 10 * unit_roundoff<double>());
  EXPECT_TRUE(change_of_basis<double>(T).singular());
  const auto at_mp50 = change_of_basis<mp50>(cast<mp50>(T));
  EXPECT_FALSE(at_mp50.singular()) << "kappa " << at_mp50.kappa;
  EXPECT_GT(at_mp50.kappa, 1e12);
}

// --- orthogonal_factor ----------------------------------------------------------------

TEST(OrthogonalFactor, OrthogonalToRoundingAtDouble) {
  const MatD Q = orthogonal_factor<double>(Rng(3, "orthogonal").gaussian(16, 16));
  EXPECT_LE(orthogonality_error<double>(Q), 100 * unit_roundoff<double>());
  // Control: the Gaussian matrix it came from is far from orthogonal.
  EXPECT_GT(orthogonality_error<double>(Rng(3, "orthogonal").gaussian(16, 16)), 1.0);
}

TEST(OrthogonalFactor, OrthogonalToRoundingAtMp50) {
  Rng rng(4, "orthogonal mp50");
  const MatD G = rng.gaussian(12, 12);
  const Mat<mp50> Q = orthogonal_factor<mp50>(cast<mp50>(G));
  EXPECT_LT(orthogonality_error<mp50>(Q), 1e-45);
  // Control: the double factor cast to mp50 is orthogonal only to double rounding.
  const Mat<mp50> from_double = cast<mp50>(orthogonal_factor<double>(G));
  EXPECT_GT(orthogonality_error<mp50>(from_double), 1e-20);
}

TEST(OrthogonalFactor, RHasPositiveDiagonal) {
  const MatD G = Rng(6, "orthogonal sign").gaussian(8, 8);
  const MatD R = orthogonal_factor<double>(G).transpose() * G;
  for (Eigen::Index j = 0; j < 8; ++j) EXPECT_GT(R(j, j), 0.0) << j;
}

// --- error model --------------------------------------------------------------------

std::vector<LadderPoint> ladder(double (*error_of)(double u)) {
  std::vector<LadderPoint> points;
  for (Precision p : all_precisions) points.push_back({unit_roundoff(p), error_of(unit_roundoff(p))});
  return points;
}

TEST(ErrorModel, LadderSlopeIsOneForErrorsProportionalToU) {
  const auto slope = ladder_slope(ladder([](double u) { return 37.5 * u; }));
  ASSERT_TRUE(slope.has_value());
  EXPECT_NEAR(*slope, 1.0, 1e-12);
}

TEST(ErrorModel, LadderSlopeIsZeroForAConstantError) {
  const auto slope = ladder_slope(ladder([](double) { return 0.04; }));
  ASSERT_TRUE(slope.has_value());
  EXPECT_NEAR(*slope, 0.0, 1e-12);
}

TEST(ErrorModel, LadderSlopeIsAbsentWithFewerThanTwoUsablePoints) {
  const double u32 = unit_roundoff<float>(), u64 = unit_roundoff<double>(), u80 = unit_roundoff<long double>();
  EXPECT_FALSE(ladder_slope({}).has_value());
  EXPECT_FALSE(ladder_slope({{u32, 1e-7}}).has_value());
  EXPECT_FALSE(ladder_slope({{u32, 1e-7}, {u64, 0.0}, {u80, 0.0}}).has_value());
  EXPECT_FALSE(ladder_slope({{u32, 1e-7}, {u64, NAN}, {u80, inf}}).has_value());
  // Control: a second usable point makes the slope defined again.
  EXPECT_TRUE(ladder_slope({{u32, 1e-7}, {u64, 1e-16}, {u80, 0.0}}).has_value());
}

TEST(ErrorModel, NormalizedErrorDividesByUTimesKappa) {
  const auto e = normalized_error(3e-14, unit_roundoff<double>(), 20.0);
  ASSERT_TRUE(e.has_value());
  EXPECT_DOUBLE_EQ(*e, 3e-14 / (20.0 * std::ldexp(1.0, -53)));
  EXPECT_FALSE(normalized_error(NAN, unit_roundoff<double>(), 1.0).has_value());
  EXPECT_FALSE(normalized_error(inf, unit_roundoff<double>(), 1.0).has_value());
  EXPECT_FALSE(normalized_error(1e-3, unit_roundoff<double>(), inf).has_value());
}

// --- precisions -------------------------------------------------------------------------

// rel_err ‖a − b‖/‖a‖ where the quotient is undefined: equal tensors (zero ones included) differ by
// 0, a zero reference against anything else by +inf, and a NaN stays NaN (a check fails on it), at
// double and mp50. Control: an ordinary pair gives its quotient.
template <class S> void expect_rel_err_edges() {
  const Mat<S> zero = Mat<S>::Zero(2, 3), ones = Mat<S>::Ones(2, 3);
  Mat<S> nan = ones;
  nan(1, 2) = S(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(rel_err<S>(zero, zero), 0.0);
  EXPECT_EQ(rel_err<S>(ones, ones), 0.0);
  EXPECT_EQ(rel_err<S>(zero, ones), std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(rel_err<S>(ones, nan)));
  EXPECT_TRUE(std::isnan(rel_err<S>(nan, ones)));
  EXPECT_NEAR(rel_err<S>(ones, Mat<S>(S(2) * ones)), 1.0, 1e-15);
}
TEST(RelErr, EqualTensorsZeroReferencesAndNaNs) {
  expect_rel_err_edges<double>();
  expect_rel_err_edges<mp50>();
}

TEST(Precision, UnitRoundoffOfEachPrecision) {
  EXPECT_EQ(unit_roundoff(Precision::f32), std::ldexp(1.0, -24));
  EXPECT_EQ(unit_roundoff(Precision::f64), std::ldexp(1.0, -53));
  EXPECT_EQ(unit_roundoff(Precision::f80), std::ldexp(1.0, -64));
  EXPECT_EQ(unit_roundoff(Precision::mp50), std::ldexp(1.0, -168));
  EXPECT_EQ(unit_roundoff<float>(), std::ldexp(1.0, -24));
  EXPECT_EQ(unit_roundoff<mp50>(), std::ldexp(1.0, -168));
}

TEST(Precision, NamesRoundTripAndAliasesParse) {
  for (Precision p : all_precisions) EXPECT_EQ(parse_precision(precision_name(p)), p);
  EXPECT_EQ(precision_name(Precision::f80), "long_double");
  EXPECT_EQ(parse_precision("f32"), Precision::f32);
  EXPECT_EQ(parse_precision("f64"), Precision::f64);
  EXPECT_EQ(parse_precision("f80"), Precision::f80);
}

TEST(Precision, UnknownNamesAreUsageErrors) {
  for (const char* name : {"quad", "", "Double", "float128", "mp100"})
    EXPECT_THROW(parse_precision(name), UsageError) << "'" << name << "'";
}

// --- multi-head attention --------------------------------------------------------------

// MHA written out with explicit loops, head by head, straight from the
// definition in docs/math/conventions.md.
MatD naive_mha(const MatD& X, const AttentionWeights<double>& w, Mask mask) {
  const Eigen::Index n = X.rows(), d = X.cols(), dh = d / w.heads;
  const double s = std::sqrt(double(dh));
  MatD concat = MatD::Zero(n, d);
  for (int h = 0; h < w.heads; ++h) {
    const Eigen::Index c0 = h * dh;
    MatD Q = MatD::Zero(n, dh), K = MatD::Zero(n, dh), V = MatD::Zero(n, dh);
    for (Eigen::Index t = 0; t < n; ++t)
      for (Eigen::Index c = 0; c < dh; ++c)
        for (Eigen::Index k = 0; k < d; ++k) {
          Q(t, c) += X(t, k) * w.W_Q(k, c0 + c);
          K(t, c) += X(t, k) * w.W_K(k, c0 + c);
          V(t, c) += X(t, k) * w.W_V(k, c0 + c);
        }
    for (Eigen::Index i = 0; i < n; ++i) {
      const Eigen::Index last = mask == Mask::causal ? i : n - 1;
      std::vector<double> logit(std::size_t(last + 1));
      double top = -inf;
      for (Eigen::Index j = 0; j <= last; ++j) {
        double dot = 0;
        for (Eigen::Index c = 0; c < dh; ++c) dot += Q(i, c) * K(j, c);
        logit[std::size_t(j)] = dot / s;
        top = std::max(top, logit[std::size_t(j)]);
      }
      double total = 0;
      for (double& l : logit) total += (l = std::exp(l - top));
      for (Eigen::Index j = 0; j <= last; ++j)
        for (Eigen::Index c = 0; c < dh; ++c) concat(i, c0 + c) += logit[std::size_t(j)] / total * V(j, c);
    }
  }
  MatD out = MatD::Zero(n, d);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index c = 0; c < d; ++c)
      for (Eigen::Index k = 0; k < d; ++k) out(i, c) += concat(i, k) * w.W_O(k, c);
  return out;
}

TEST(Attention, MhaMatchesANaiveLoopImplementation) {
  const Eigen::Index d = 8, n = 5;
  for (int heads : {1, 2, 4}) {
    for (Mask mask : {Mask::causal, Mask::bidirectional}) {
      Rng rng(9, "naive mha H=" + std::to_string(heads));
      const auto w = random_attention<double>(rng, d, heads);
      const MatD X = rng.gaussian(n, d);
      const MatD reference = naive_mha(X, w, mask);
      const std::string where = "H=" + std::to_string(heads) + " mask=" + mask_name(mask);
      EXPECT_LE(rel_err<double>(reference, mha<double>(X, w, mask)), 1e3 * unit_roundoff<double>()) << where;
      // Controls: the other mask, and (with several heads) one head over all of d.
      const Mask other = mask == Mask::causal ? Mask::bidirectional : Mask::causal;
      EXPECT_GE(rel_err<double>(reference, mha<double>(X, w, other)), 1e-3) << where;
      if (heads > 1) {
        auto one_head = w;
        one_head.heads = 1;
        EXPECT_GE(rel_err<double>(reference, mha<double>(X, one_head, mask)), 1e-3) << where;
      }
    }
  }
}

TEST(Attention, SelfAttentionFromProjectionsMatchesNaiveConcatenation) {
  // F(XW_Q, XW_K, XW_V) followed by W_O is the same MHA, through the naive loops.
  Rng rng(10, "projections");
  const auto w = random_attention<double>(rng, 8, 2);
  const MatD X = rng.gaussian(4, 8);
  const MatD from_projections =
      attention_from_projections<double>(X * w.W_Q, X * w.W_K, X * w.W_V, 2, Mask::causal, w.scale()) * w.W_O;
  EXPECT_LE(rel_err<double>(naive_mha(X, w, Mask::causal), from_projections), 1e3 * unit_roundoff<double>());
  // Control: queries and keys swapped.
  const MatD swapped =
      attention_from_projections<double>(X * w.W_K, X * w.W_Q, X * w.W_V, 2, Mask::causal, w.scale()) * w.W_O;
  EXPECT_GE(rel_err<double>(naive_mha(X, w, Mask::causal), swapped), 1e-3);
}

}  // namespace
}  // namespace qkvlab

TEST(JsonText, NumbersRoundTripAndNonFiniteValuesAreNull) {
  for (const double x : {0.1, -1.0 / 3.0, 6.02214076e23, 5e-324, 1.0})
    EXPECT_EQ(std::strtod(qkvlab::json_number(x).c_str(), nullptr), x) << qkvlab::json_number(x);
  EXPECT_EQ(qkvlab::json_number(1.0), "1");
  EXPECT_EQ(qkvlab::json_number(std::numeric_limits<double>::quiet_NaN()), "null");
  EXPECT_EQ(qkvlab::json_number(-std::numeric_limits<double>::infinity()), "null");
}
