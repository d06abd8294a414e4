// core/absorb.hpp: the skip-absorption construction of qwe.thm8.4 at double and mp50 and the
// decision procedure of qwe.cor8.4.1 (yes with a valid J, no, the hypotheses, undecided beyond
// the exact-search limit). The .npy reader and writer: npy_test.cpp.
#include "core/absorb.hpp"
#include "core/linalg.hpp"
#include "core/rng.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

namespace qkvlab {
namespace {

struct Drawn {
  MatD W_1, W_2;
  std::vector<int> J;
};

// W_1 (m×d, N(0, 1/d)), a random J of size k, W_2 (d×m, N(0, 1/m)); W_2's
// J-columns replaced by −(W_1[J,:])⁺ when representable.
Drawn draw_pair(std::uint64_t seed, int d, int m, int k, bool representable) {
  Rng rng(seed, "absorb_test d=" + std::to_string(d) + " m=" + std::to_string(m));
  std::vector<int> perm(std::size_t(m), 0);
  std::iota(perm.begin(), perm.end(), 0);
  for (int i = m - 1; i > 0; --i) std::swap(perm[std::size_t(i)], perm[std::size_t(rng.uniform_int(i + 1))]);
  Drawn p{rng.gaussian(m, d, 1 / std::sqrt(double(d))), rng.gaussian(d, m, 1 / std::sqrt(double(m))),
          std::vector<int>(perm.begin(), perm.begin() + k)};
  std::sort(p.J.begin(), p.J.end());
  if (representable) p.W_2 = representable_w2<double>(p.W_1, p.W_2, p.J);
  return p;
}

double tolerance(const MatD& W_1, const MatD& W_2) { return 1e3 * unit_roundoff<double>() * W_2.norm() * W_1.norm(); }

// --- the construction ------------------------------------------------------------------

template <class S> void expect_construction_exact(std::uint64_t seed, int d, int m, int k) {
  const Drawn p = draw_pair(seed, d, m, k, false);
  const Mat<S> W_1 = cast<S>(p.W_1);
  const Mat<S> W_2 = representable_w2<S>(W_1, cast<S>(p.W_2), p.J);
  Rng rng(seed, "inputs");
  const Mat<S> X = cast<S>(rng.gaussian(d, 10));
  const Mat<S> ref = skip_relu_mlp<S>(W_1, W_2, X);
  const auto a = absorb_skip<S>(W_1, W_2, p.J);
  std::vector<int> perm(std::size_t(m), 0);
  std::iota(perm.rbegin(), perm.rend(), 0);
  std::vector<S> scale;
  for (int i = 0; i < m; ++i) scale.push_back(S(0.5 + 0.1 * i));
  const auto b = permute_and_rescale<S>(a, perm, scale);
  MatD rows(k, d);
  for (int i = 0; i < k; ++i) rows.row(i) = p.W_1.row(p.J[std::size_t(i)]);
  const auto sv = Eigen::JacobiSVD<MatD>(rows).singularValues();
  const double kappa = sv(0) / sv(sv.size() - 1);
  const double bound = 1e3 * unit_roundoff<S>() * kappa;
  EXPECT_LE(rel_err<S>(ref, relu_mlp<S>(a.W_1, a.W_2, X)), bound);
  EXPECT_LE(rel_err<S>(ref, relu_mlp<S>(b.W_1, b.W_2, X)), bound);
  EXPECT_GT(rel_err<S>(ref, relu_mlp<S>(a.W_1, a.W_2, X)), 0.0);  // two genuinely different computations
  // The construction on a generic W_2 changes the map by O(1).
  const Mat<S> W_2g = cast<S>(p.W_2);
  const auto g = absorb_skip<S>(W_1, W_2g, p.J);
  EXPECT_GT(rel_err<S>(skip_relu_mlp<S>(W_1, W_2g, X), relu_mlp<S>(g.W_1, g.W_2, X)), 0.1);
}

TEST(AbsorbConstruction, ExactAtDouble) {
  for (std::uint64_t seed : {1, 2, 3}) {
    expect_construction_exact<double>(seed, 8, 16, 8);
    expect_construction_exact<double>(seed, 8, 16, 12);
  }
}

TEST(AbsorbConstruction, ExactAtMp50) { expect_construction_exact<mp50>(1, 8, 16, 12); }

// --- the decision ----------------------------------------------------------------------

TEST(DecideAbsorption, YesOnRepresentablePairsWithAValidJ) {
  struct Case {
    int d, m, k;
  };
  // (2, 6, *): m > d², dependent rank-one matrices, decided by exhaustive search.
  for (const Case c : {Case{2, 6, 2}, Case{2, 6, 4}, Case{4, 8, 4}, Case{4, 8, 6}, Case{8, 16, 8}, Case{8, 12, 10},
                       Case{16, 32, 24}})
    for (std::uint64_t seed : {1, 2, 3}) {
      const Drawn p = draw_pair(seed, c.d, c.m, c.k, true);
      const auto dec = decide_absorption(p.W_1, p.W_2);
      const std::string where = "d=" + std::to_string(c.d) + " m=" + std::to_string(c.m) + " |J|=" +
                                std::to_string(c.k) + " seed=" + std::to_string(seed);
      ASSERT_EQ(dec.verdict, Verdict::yes) << where << ": " << dec.reason;
      EXPECT_TRUE(dec.hypotheses_hold) << where;
      EXPECT_EQ(dec.independent, c.m <= c.d * c.d) << where;
      EXPECT_GE(int(dec.J.size()), c.d) << where;
      const MatD I = MatD::Identity(c.d, c.d);
      EXPECT_LE((skip_product<double>(p.W_1, p.W_2, dec.J) + I).norm(), tolerance(p.W_1, p.W_2)) << where;
      if (dec.independent) {
        EXPECT_EQ(dec.J, p.J) << where;  // the unique solution
      }
      EXPECT_LE(dec.residual, dec.tolerance) << where;
      ASSERT_TRUE(dec.absorbed.has_value());
      Rng rng(seed, "x");
      const MatD X = rng.gaussian(c.d, 20);
      EXPECT_LE(rel_err<double>(skip_relu_mlp<double>(p.W_1, p.W_2, X),
                                relu_mlp<double>(dec.absorbed->W_1, dec.absorbed->W_2, X)),
                1e-10)
          << where;
    }
}

TEST(DecideAbsorption, NoOnGenericPairs) {
  for (std::uint64_t seed : {1, 2, 3}) {
    for (auto [d, m] : {std::pair{4, 8}, std::pair{8, 16}, std::pair{16, 32}}) {
      const Drawn p = draw_pair(seed, d, m, d, false);
      const auto dec = decide_absorption(p.W_1, p.W_2);
      EXPECT_EQ(dec.verdict, Verdict::no) << dec.reason;
      EXPECT_TRUE(dec.independent);
      EXPECT_GE(dec.relaxation_residual, 1e-3);
      EXPECT_TRUE(dec.J.empty());
      EXPECT_FALSE(dec.absorbed.has_value());
    }
    // Dependent (m > d²) but m within the exact limit: every subset searched.
    const Drawn p = draw_pair(seed, 2, 6, 2, false);
    const auto dec = decide_absorption(p.W_1, p.W_2);
    EXPECT_EQ(dec.verdict, Verdict::no) << dec.reason;
    EXPECT_FALSE(dec.independent);
    EXPECT_EQ(dec.subsets_searched, 63u);
  }
}

TEST(DecideAbsorption, NoForAGenericSkipMatrixR) {
  const Drawn p = draw_pair(4, 8, 16, 12, true);
  Rng rng(4, "R");
  const MatD R = draw_basis(rng, 8, 1 / std::sqrt(8.0));
  const auto dec = decide_absorption(p.W_1, p.W_2, R, AbsorbLimits{});
  EXPECT_EQ(dec.verdict, Verdict::no) << dec.reason;
  EXPECT_GE(dec.relaxation_residual, 1e-3);
  // ... while R = I is absorbable, and so is R = −W_2 P_J W_1 for any J.
  EXPECT_EQ(decide_absorption(p.W_1, p.W_2).verdict, Verdict::yes);
  const std::vector<int> K{0, 3, 5, 7, 9, 11, 13, 15};
  EXPECT_EQ(decide_absorption(p.W_1, p.W_2, MatD(-skip_product<double>(p.W_1, p.W_2, K)), AbsorbLimits{}).J, K);
}

TEST(DecideAbsorption, ReportsCollinearRowsAndZeroColumns) {
  Drawn p = draw_pair(5, 4, 8, 4, false);
  p.W_1.row(6) = -2.5 * p.W_1.row(2);
  auto dec = decide_absorption(p.W_1, p.W_2);
  EXPECT_FALSE(dec.hypotheses_hold);
  EXPECT_NE(dec.hypothesis_failure.find("rows 2 and 6 of W_1 are collinear"), std::string::npos)
      << dec.hypothesis_failure;
  EXPECT_EQ(dec.verdict, Verdict::undecided) << "no without the hypotheses would be a guess";
  EXPECT_NE(dec.reason.find("collinear"), std::string::npos) << dec.reason;

  Drawn q = draw_pair(5, 4, 8, 4, false);
  q.W_2.col(3).setZero();
  dec = decide_absorption(q.W_1, q.W_2);
  EXPECT_EQ(dec.hypothesis_failure, "column 3 of W_2 is zero");
  q.W_1.row(1).setZero();
  EXPECT_EQ(*absorption_hypothesis_failure(q.W_1, q.W_2, AbsorbLimits{}), "row 1 of W_1 is zero");

  // Sufficiency needs no hypothesis: a representable pair with collinear rows outside J is still yes.
  Drawn r = draw_pair(6, 4, 8, 4, true);
  int outside = 0;
  while (std::count(r.J.begin(), r.J.end(), outside)) ++outside;
  r.W_1.row(outside) = 3 * r.W_1.row(r.J[0]);
  dec = decide_absorption(r.W_1, r.W_2);
  EXPECT_FALSE(dec.hypotheses_hold);
  EXPECT_EQ(dec.verdict, Verdict::yes) << dec.reason;
}

TEST(DecideAbsorption, UndecidedBeyondTheExactSearchLimit) {
  // m = 22 > d² = 4: the rank-one matrices are dependent and the relaxation is feasible.
  const Drawn p = draw_pair(7, 2, 22, 2, false);
  auto dec = decide_absorption(p.W_1, p.W_2);
  EXPECT_EQ(dec.verdict, Verdict::undecided) << dec.reason;
  EXPECT_FALSE(dec.independent);
  EXPECT_LE(dec.relaxation_residual, dec.tolerance);
  EXPECT_NE(dec.reason.find("m <= 20"), std::string::npos) << dec.reason;
  EXPECT_EQ(dec.subsets_searched, 0u);
  // A representable pair of the same shape is undecided too: no guess either way.
  EXPECT_EQ(decide_absorption(draw_pair(7, 2, 22, 3, true).W_1, draw_pair(7, 2, 22, 3, true).W_2).verdict,
            Verdict::undecided);
  // A lower limit turns a searchable case into undecided.
  AbsorbLimits low;
  low.max_exact = 5;
  EXPECT_EQ(decide_absorption(draw_pair(1, 2, 6, 2, true).W_1, draw_pair(1, 2, 6, 2, true).W_2, low).verdict,
            Verdict::undecided);
}

// README's absorbable example (W_1 rows e1, e2, e1 + e2, e1 − e2) with unit 0 rescaled by c and 1/c: the
// same network, so the same decision (yes, J = {0, 1}) and the same finite tolerance, for c up to 1e300
// and down to 1e-300. Control: the rescaling does push the plain norms out of double's range (the
// product of ‖w_0‖ and ‖W_2[:,0]‖ taken as norm() · norm() is not finite), which the decision used to
// meet with a NaN tolerance and a "row 1 of W_1 is zero" it invented.
TEST(DecideAbsorption, ExtremeUnitRescalingsKeepTheDecision) {
  MatD W_1(4, 2), W_2(2, 4);
  W_1 << 1, 0, 0, 1, 1, 1, 1, -1;
  W_2 << -1, 0, 0.5, -0.3, 0, -1, 0.25, 0.7;
  const AbsorbDecision plain = decide_absorption(W_1, W_2);
  ASSERT_EQ(plain.verdict, Verdict::yes) << plain.reason;
  ASSERT_EQ(plain.J, (std::vector<int>{0, 1}));
  for (double c : {1e200, 1e-200, 1e300, 1e-300}) {
    MatD V_1 = W_1, V_2 = W_2;
    V_1.row(0) *= c, V_2.col(0) /= c;
    const AbsorbDecision dec = decide_absorption(V_1, V_2);
    EXPECT_FALSE(std::isfinite(V_1.row(0).norm() * V_2.col(0).norm())) << c << ": the control exercises no overflow";
    EXPECT_EQ(dec.verdict, Verdict::yes) << c << ": " << dec.reason;
    EXPECT_EQ(dec.J, plain.J) << c;
    EXPECT_TRUE(dec.hypotheses_hold) << c << ": " << dec.hypothesis_failure;
    ASSERT_TRUE(std::isfinite(dec.tolerance)) << c;
    EXPECT_NEAR(dec.tolerance, plain.tolerance, 1e-12 * plain.tolerance) << c;
    EXPECT_LE(dec.relaxation_residual, dec.tolerance) << c;
    // The absorbed weights are the rescaled network's own (rows in J negated), exactly.
    ASSERT_TRUE(dec.absorbed);
    EXPECT_TRUE(dec.absorbed->W_1 == absorb_skip<double>(V_1, V_2, dec.J).W_1) << c;
  }
  EXPECT_TRUE(std::isfinite(W_1.row(0).norm() * W_2.col(0).norm()));  // the control's control: unscaled, finite
}

// A pair whose terms are beyond double's range has no finite tolerance: undecided, said so, with
// no NaN in the reason. Control: the same pair scaled into range is decided.
TEST(DecideAbsorption, ATermBeyondDoublesRangeIsUndecidedInWords) {
  MatD W_1(4, 2), W_2(2, 4);
  W_1 << 1, 0, 0, 1, 1, 1, 1, -1;
  W_2 << -1, 0, 0.5, -0.3, 0, -1, 0.25, 0.7;
  const AbsorbDecision huge = decide_absorption(MatD(1e300 * W_1), MatD(1e300 * W_2));
  EXPECT_EQ(huge.verdict, Verdict::undecided);
  EXPECT_NE(huge.reason.find("beyond double's range"), std::string::npos) << huge.reason;
  EXPECT_EQ(huge.reason.find("nan"), std::string::npos) << huge.reason;
  EXPECT_NE(decide_absorption(MatD(1e100 * W_1), MatD(1e-100 * W_2)).verdict, Verdict::undecided);
  // Out of range, no unit is called zero (every one was: its term against an infinite sum); what is out of
  // range is named: one unit's term (w_0 = [1e200, 0], W_2[:,0] = [-1e200, 0]), or the sum of finite
  // terms (two of 1e308).
  const auto expect_named = [](double a, double b, const std::string& named) {
    MatD W_1(3, 2), W_2(2, 3);
    W_1 << a, 0, 0, b, 1, 1;
    W_2 << -a, 0, 0.5, 0, -b, 0.25;
    const AbsorbDecision d = decide_absorption(W_1, W_2);
    EXPECT_EQ(d.verdict, Verdict::undecided) << named;
    EXPECT_EQ(d.hypothesis_failure.find("is zero"), std::string::npos) << d.hypothesis_failure;
    EXPECT_NE(d.hypothesis_failure.find(named), std::string::npos) << d.hypothesis_failure;
  };
  expect_named(1e200, 1, "the term of unit 0");
  expect_named(1e154, 1e154, "the sum of the units' terms");
}

TEST(DecideAbsorption, RejectsShapesThatDoNotFit) {
  EXPECT_THROW(decide_absorption(MatD::Ones(4, 2), MatD::Ones(2, 3)), std::invalid_argument);
  EXPECT_THROW(decide_absorption(MatD::Ones(4, 2), MatD::Ones(4, 2)), std::invalid_argument);
}

}  // namespace
}  // namespace qkvlab
