// theory/: every registered claim at a small configuration and every
// precision (its identity holds to the budget, its controls fail by a wide
// margin, its error tracks u down the precision ladder), the statistical
// claim, and the verify runner (selection, validation, reproducibility).
#include "core/errors.hpp"
#include "core/head_freedoms.hpp"
#include "core/random_matrix.hpp"
#include "core/reparametrize.hpp"
#include "engine/kernels/rope.hpp"
#include "theory/attention_freedoms.hpp"
#include "theory/claims.hpp"
#include "theory/verify.hpp"
#include "scratch_dir.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace qkvlab::theory {
namespace {

constexpr std::uint64_t kSeed = 2024;

const Claim& claim_by_id(const std::string& id) {
  for (const auto& c : all_claims())
    if (c.id == id) return c;
  throw std::invalid_argument("no claim " + id);
}

std::vector<std::string> claim_ids(Kind kind) {
  std::vector<std::string> ids;
  for (const auto& c : all_claims())
    if (c.kind == kind) ids.push_back(c.id);
  return ids;
}

// The small configurations of a claim: d=8, 2 heads, 2 layers, 4 tokens,
// both masks where the claim distinguishes them, each of its variants.
std::vector<SweepPoint> small_configs(const Claim& claim) {
  std::vector<SweepPoint> configs;
  std::vector<Mask> masks{Mask::causal};
  if (claim.dims.mask) masks.push_back(Mask::bidirectional);
  for (Mask mask : masks) {
    SweepPoint c;
    c.d = 8, c.heads = 2, c.layers = 2, c.seq = 4, c.mask = mask;
    const auto variants = claim.variants ? claim.variants(c) : std::vector<PointVariant>(1);
    for (const auto& v : variants) {
      c.variant = v;
      configs.push_back(c);
    }
  }
  return configs;
}

// One configuration at one precision, drawing from the stream verify() uses,
// so every precision sees the same weights.
Outcome run_claim(const Claim& claim, const SweepPoint& config, Precision p) {
  Rng rng(kSeed, claim.id + "|" + describe(claim, config));
  return claim.run(config, p, rng);
}

// A control fails either by a large error or by detecting a singular basis
// (control_by_detection), in which case its error measures nothing.
bool is_detection_control(const ControlOutcome& c) {
  return c.note == "singular basis detected" || c.note.starts_with("image exit detected");
}

std::string gtest_name(std::string id) {
  std::replace(id.begin(), id.end(), '.', '_');
  return id;
}

// --- the registry ---------------------------------------------------------------------

TEST(Registry, HoldsTheClaimsOfTheSpecInLedgerOrder) {
  const std::vector<std::string> expected{"qwe.obs3.1", "qwe.lemma3.1", "qwe.prop4.1",  "qwe.prop4.2",
                                          "qwe.thm4.1", "qwe.remark4",  "qwe.lemma8.5", "qwe.thm4.2",
                                          "qwe.lemma8.6", "qwe.thm4.3", "qwe.lemma8.2", "qwe.thm8.3",
                                          "qwe.remark5",  "qwe.sec8.3.1", "qwe.sec8.3.1.mp", "qwe.sec8.3.1.edge",
                                          "qwe.sec8.3.1.defect", "qwe.thm8.4", "qwe.cor8.4.1", "qwe.scale8.2",
                                          "qwe.freedom.vo", "qwe.ext.rope", "qwe.ext.gqa", "qwe.ext.qknorm",
                                          "qwe.fdim.noskip", "qwe.fdim.one", "qwe.fdim.every", "qwe.fdim.layernorm",
                                          "qwe.fdim.mlp", "skipv1.reduction", "skipv1.lemma1", "skipv1.lemma2", "skipv1.lemma3",
                                          "skipv1.lemma4", "skipv1.thm2", "resformer.eq4", "resformer.eq5"};
  std::vector<std::string> ids;
  for (const auto& c : all_claims()) ids.push_back(c.id);
  EXPECT_EQ(ids, expected);
  // Every statistical claim has its own test (below; the skipv1.* ones in icl_theory_test.cpp).
  EXPECT_EQ(claim_ids(Kind::statistical),
            (std::vector<std::string>{"qwe.sec8.3.1.mp", "qwe.sec8.3.1.edge", "qwe.sec8.3.1.defect", "qwe.scale8.2",
                                      "skipv1.lemma1", "skipv1.lemma2", "skipv1.lemma3", "skipv1.lemma4",
                                      "skipv1.thm2"}));
  EXPECT_EQ(claim_ids(Kind::count), (std::vector<std::string>{"qwe.fdim.noskip", "qwe.fdim.one", "qwe.fdim.every",
                                                              "qwe.fdim.layernorm", "qwe.fdim.mlp"}));
}

// --- every identity claim ----------------------------------------------------------------

class IdentityClaim : public ::testing::TestWithParam<std::string> {
 protected:
  const Claim& claim() const { return claim_by_id(GetParam()); }
};

TEST_P(IdentityClaim, HoldsWithinBudgetAndEveryControlFails) {
  for (const SweepPoint& config : small_configs(claim())) {
    for (Precision p : all_precisions) {
      const std::string where = describe(claim(), config) + " [" + std::string(precision_name(p)) + "]";
      const Outcome o = run_claim(claim(), config, p);
      EXPECT_FALSE(o.singular) << where;
      const auto e = normalized_error(o.rel_err, unit_roundoff(p), o.kappa);
      ASSERT_TRUE(e.has_value()) << where << " rel_err " << o.rel_err << " kappa " << o.kappa;
      EXPECT_LE(*e, claim().budget) << where << " rel_err " << o.rel_err << " kappa " << o.kappa;
      ASSERT_FALSE(o.controls.empty()) << where;
      for (const auto& c : o.controls) {
        EXPECT_TRUE(c.failed_as_expected) << where << " control '" << c.name << "' " << c.note;
        if (is_detection_control(c)) continue;
        ASSERT_TRUE(c.rel_err.has_value()) << where << " control '" << c.name << "'";
        EXPECT_GE(*c.rel_err, control_threshold) << where << " control '" << c.name << "'";
      }
    }
  }
}

// A claim's configurations of width d over `heads` (those its Dims allow), both masks where it has
// them, every variant, at n = 2 and L = `layers`, over `trials` draws in double: every check must pass
// (the control of the test: the controls fail because they break a hypothesis, on draws where the claim
// holds); returns how many runs there were, and adds a failure for each control that did not fail.
int expect_controls_fail_in_every_draw(const Claim& claim, int d, const std::vector<int>& heads, int layers,
                                       int trials) {
  int failures = 0, runs = 0;
  for (int h : heads)
    for (Mask mask : {Mask::causal, Mask::bidirectional}) {
      const int width = d / h;
      if ((!claim.dims.heads && h > 1) || (!claim.dims.mask && mask != Mask::causal) || d % h != 0 ||
          width < claim.dims.min_head_width || (claim.dims.even_head_width && width % 2 != 0))
        continue;
      SweepPoint c{.d = d, .heads = h, .layers = layers, .seq = 2, .mask = mask, .variant = {}, .trial = 0};
      const auto variants = claim.variants ? claim.variants(c) : std::vector<PointVariant>(1);
      for (const auto& v : variants)
        for (int trial = 0; trial < trials; ++trial) {
          c.variant = v, c.trial = trial;
          const Outcome o = run_claim(claim, c, Precision::f64);
          const auto e = normalized_error(o.rel_err, unit_roundoff(Precision::f64), o.kappa);
          EXPECT_TRUE(e && *e <= claim.budget) << describe(claim, c) << " rel_err " << o.rel_err;
          ++runs;
          for (const auto& control : o.controls)
            if (!control.failed_as_expected) {
              ++failures;
              ADD_FAILURE() << describe(claim, c) << " control '" << control.name << "' rel_err "
                            << control.rel_err.value_or(-1);
            }
        }
    }
  EXPECT_EQ(failures, 0) << claim.id << " d=" << d << " over " << runs << " runs";
  return runs;
}

// Review r16: at the least sizes (d <= 4, n = 2) controls passed by chance and turned true claims into
// FAILs: those perturbing only the attention scores act through one softmax row there (qwe.lemma3.1 71
// of 24000 controls at d = 2 over 1000 draws, qwe.prop4.1 34/2000, qwe.prop4.2 100/6000, qwe.obs3.1
// 12/6000 at d = 4, H = 2), qwe.sec8.3.1's through an input near Sigma's top direction or a Gaussian M
// keeping its length (8 and 1 in 300). Now every control fails in 300 draws of each least size.
// Control: every check passes on the same draws, so the controls fail because they break a hypothesis.
TEST(Controls, FailAtTheLeastSizesInEveryDraw) {
  const std::vector<std::pair<std::string, int>> least{
      {"qwe.obs3.1", 4}, {"qwe.lemma3.1", 2}, {"qwe.lemma3.1", 4}, {"qwe.prop4.1", 2},
      {"qwe.prop4.1", 4}, {"qwe.prop4.2", 2}, {"qwe.prop4.2", 4}, {"qwe.sec8.3.1", 2}};
  for (const auto& [id, d] : least) EXPECT_GT(expect_controls_fail_in_every_draw(claim_by_id(id), d, {1, 2}, 1, 300), 0) << id;
}

// Review r21: qwe.thm4.3's control (it changes only the scores of layers 2..L) ran on the claim's n and
// passed by chance at n = 2 (seed 1, --precision double: 8/500 at d = 8, 38/600 at d = 2); the score-only
// controls of qwe.ext.gqa, ext.rope, ext.qknorm passed by chance at n = 2 (gqa 61/2700 at d = 4, rope
// 13/4200, qknorm 9/1200) and gqa also at n = 8 (5/1800 at d = 4, H = 4: a Gaussian d_h = 1 block is one
// number near 1 by chance); qwe.freedom.vo's full-N control (it acts through the heads' score differences)
// came within 1.1e-3 of passing. Now they run on 8 positions (control_input) with wrong blocks whose gains
// are on [2, 8], or that mix QK-norm's levels by pi/4, by construction; qwe.freedom.vo needs d/H >= 2
// (RobustVerify covers the skip). Control: every check passes on the same draws.
TEST(Controls, ExtensionAndSharedLayerControlsFailAtTheLeastSizesInEveryDraw) {
  EXPECT_GT(expect_controls_fail_in_every_draw(claim_by_id("qwe.thm4.3"), 2, {1, 2}, 2, 300), 0);
  EXPECT_GT(expect_controls_fail_in_every_draw(claim_by_id("qwe.thm4.3"), 8, {1}, 2, 300), 0);
  for (int d : {2, 4}) EXPECT_GT(expect_controls_fail_in_every_draw(claim_by_id("qwe.freedom.vo"), d, {1, 2}, 1, 300), 0);
  for (const char* id : {"qwe.ext.gqa", "qwe.ext.rope", "qwe.ext.qknorm"})
    for (int d : {2, 4}) {
      const Claim& claim = claim_by_id(id);
      const int runs = expect_controls_fail_in_every_draw(claim, d, {1, 2, 4}, 1, 300);
      if (d == 4) {
        EXPECT_GT(runs, 0) << id;
      }
    }
}

// Each claim's least head width is its own (Dims::min_head_width): qwe.freedom.vo's N^-T control is the
// claim itself at d/H = 1 (a scalar N: review r21, 8/12 controls passed at d = 4, H = 4), and the claim is
// left out there with the reason; at d/H = 2 the control fails.
TEST(Controls, FreedomVoNeedsAHeadWidthOfTwo) {
  const Claim& claim = claim_by_id("qwe.freedom.vo");
  EXPECT_EQ(claim.dims.min_head_width, 2);
  EXPECT_NE(std::string(claim.dims.why_head_width).find("N^-T = N^-1"), std::string::npos);
  // What the skip guards against: at d/H = 1 the N^-T control cannot fail.
  SweepPoint c{.d = 4, .heads = 4, .layers = 1, .seq = 8, .mask = Mask::causal, .variant = {}, .trial = 0};
  const Outcome o = run_claim(claim, c, Precision::f64);
  ASSERT_EQ(o.controls.size(), 3u);
  EXPECT_FALSE(o.controls[1].failed_as_expected) << o.controls[1].name;
  c.heads = 2;  // control: at width 2 it fails
  EXPECT_TRUE(run_claim(claim, c, Precision::f64).controls[1].failed_as_expected);
  // verify skips it there with the reason, and runs it at width 2.
  for (int heads : {4, 2}) {
    VerifyOptions o;
    o.ids = {"qwe.freedom.vo"}, o.d = {4}, o.heads = {heads};
    const VerifyPlan plan = plan_verify(select_claims(o.ids), o);
    ASSERT_EQ(plan.skipped.size(), heads == 4 ? 1u : 0u) << heads;
    EXPECT_EQ(plan.configurations.empty(), heads == 4) << heads;
    if (heads == 4) {
      EXPECT_NE(plan.skipped[0].reason.find("head width d/H >= 2: a width-1 N_h is a scalar, so N^-T = N^-1"),
                std::string::npos)
          << plan.skipped[0].reason;
    }
  }
}

TEST_P(IdentityClaim, ErrorTracksUnitRoundoffDownThePrecisionLadder) {
  for (const SweepPoint& config : small_configs(claim())) {
    const std::string where = describe(claim(), config);
    std::map<Precision, double> err;
    std::vector<LadderPoint> points;
    for (Precision p : all_precisions) {
      err[p] = run_claim(claim(), config, p).rel_err;
      points.push_back({unit_roundoff(p), err[p]});
    }
    // u falls by 2^115 ≈ 4e34 from double to mp50; an exact identity's error
    // falls with it, an approximate one would plateau.
    EXPECT_LE(err[Precision::mp50], 1e-20 * err[Precision::f64]) << where;
    // Every identity computes two genuinely different sides, so its error is
    // non-zero at every precision and the slope exists.
    const auto slope = ladder_slope(points);
    ASSERT_TRUE(slope.has_value()) << where;
    EXPECT_GE(*slope, 0.8) << where;
    EXPECT_LE(*slope, 1.2) << where;
  }
}

INSTANTIATE_TEST_SUITE_P(AllClaims, IdentityClaim, ::testing::ValuesIn(claim_ids(Kind::identity)),
                         [](const auto& info) { return gtest_name(info.param); });

// --- the statistical claim --------------------------------------------------------------

TEST(Scale82, MonteCarloRatioAgreesWithTheAnalyticValue) {
  const Claim& claim = claim_by_id("qwe.scale8.2");
  SweepPoint config;
  config.d = 64, config.heads = 4;
  const Outcome o = run_claim(claim, config, Precision::f64);
  ASSERT_TRUE(o.statistic.has_value());
  const Statistic& s = *o.statistic;
  EXPECT_DOUBLE_EQ(s.expected, 1.0 / (0.02 * std::sqrt(64.0)));  // 6.25
  // The standard error must be small enough for the comparison to mean something.
  EXPECT_GT(s.std_err, 0.0);
  EXPECT_LT(s.std_err, 0.02 * s.expected);
  EXPECT_LE(std::abs(s.value - s.expected), 4 * s.std_err) << s.value << " vs " << s.expected;
  // The same z-test rejects both "nothing changes" (ratio 1) and the paper's rounded factor 2.
  EXPECT_GT(std::abs(s.value - 1.0), 4 * s.std_err);
  EXPECT_GT(std::abs(s.value - 2.0), 4 * s.std_err);
  ASSERT_EQ(o.controls.size(), 1u);
  EXPECT_TRUE(o.controls[0].failed_as_expected) << o.controls[0].name;
  ASSERT_TRUE(o.controls[0].rel_err.has_value());
  EXPECT_GE(*o.controls[0].rel_err, control_threshold);
}

// qwe.sec8.3.1.*: each passes its own rule |statistic - expected| <= budget * std_err
// at a small configuration, and each control (a wrong law, no shrinkage, the worst
// case) is rejected by the same rule.
Statistic run_statistical(const std::string& id, int d, Outcome& o) {
  SweepPoint config;
  config.d = d;
  o = run_claim(claim_by_id(id), config, Precision::f64);
  EXPECT_TRUE(o.statistic.has_value()) << id << " " << o.note;
  return o.statistic.value_or(Statistic{NAN, 0, 1});
}

void expect_controls_rejected(const Outcome& o, std::size_t count) {
  ASSERT_EQ(o.controls.size(), count);
  for (const auto& c : o.controls) {
    EXPECT_TRUE(c.failed_as_expected) << c.name << " " << c.note;
    ASSERT_TRUE(c.rel_err.has_value()) << c.name;
    EXPECT_GE(*c.rel_err, control_threshold) << c.name;
  }
}

// The moments' exact means: the Catalan numbers v^k (1, 2, 5) plus their finite-d terms, and the
// quarter-circle law's E y^2 = r^2/4; the statistic is one of the three moments, within 4 of its
// own standard errors, and the three controls (scale 2v, the quarter-circle law, entries of
// variance 1.1 v/d: a 10% error the KS rule passed at d = 64) are rejected by the same rule.
TEST(Sec831, MarchenkoPasturMomentsAreTheirFiniteDWishartMeans) {
  EXPECT_DOUBLE_EQ(wishart_moment(2, 4, 1.0), 2.25);
  EXPECT_DOUBLE_EQ(wishart_moment(3, 2, 1.0), 9.0);
  EXPECT_NEAR(quarter_circle_moment(0, 3.0), 1.0, 1e-15);
  EXPECT_NEAR(quarter_circle_moment(2, 3.0), 9.0 / 4, 1e-14);
  Outcome o;
  const Statistic s = run_statistical("qwe.sec8.3.1.mp", 64, o);
  const bool a_moment = s.expected == wishart_moment(1, 64, 0.25) || s.expected == wishart_moment(2, 64, 0.25) ||
                        s.expected == wishart_moment(3, 64, 0.25);
  EXPECT_TRUE(a_moment) << s.expected;
  EXPECT_GT(s.std_err, 0.0);
  EXPECT_LT(s.std_err, 0.01 * s.expected);
  EXPECT_LE(std::abs(s.value - s.expected), claim_by_id("qwe.sec8.3.1.mp").budget * s.std_err) << o.note;
  expect_controls_rejected(o, 3);
}

TEST(Sec831, EdgeExcessShrinksLikeDToMinusTwoThirds) {
  Outcome o;
  const Statistic s = run_statistical("qwe.sec8.3.1.edge", 512, o);
  EXPECT_DOUBLE_EQ(s.expected, -2.0 / 3);
  EXPECT_GT(s.std_err, 0.0);
  EXPECT_LT(s.std_err, 0.1);  // small enough to tell -2/3 from 0
  EXPECT_LE(std::abs(s.value - s.expected), 4 * s.std_err) << o.note;
  expect_controls_rejected(o, 1);
}

TEST(Sec831, MeanSquaredMetricDefectIsTheFrobeniusNormOverD) {
  Outcome o;
  const Statistic s = run_statistical("qwe.sec8.3.1.defect", 32, o);
  EXPECT_GT(s.std_err, 0.0);
  EXPECT_LT(s.std_err, 0.02 * s.expected);
  EXPECT_LE(std::abs(s.value - s.expected), 4 * s.std_err) << o.note;
  expect_controls_rejected(o, 1);
}

// --- the extensions' attention (core/grouped_attention.hpp) and their claims ------------------

GroupedAttention<double> plain_grouped(Rng& rng, int d, int heads, int kv_heads) {
  GroupedAttention<double> w;
  const int kv_width = d / heads * kv_heads;
  w.W_Q = rng.gaussian(d, d, 0.3), w.W_K = rng.gaussian(d, kv_width, 0.3), w.W_V = rng.gaussian(d, kv_width, 0.3);
  w.W_O = rng.gaussian(d, d, 0.3);
  w.heads = heads, w.kv_heads = kv_heads;
  return w;
}

TEST(GroupedAttention, WithoutGroupsRopeOrQkNormIsMha) {
  Rng rng(kSeed, "grouped = mha");
  const auto w = plain_grouped(rng, 8, 2, 2);
  const MatD X = rng.gaussian(5, 8);
  const MatD reference = mha<double>(X, w, Mask::causal);
  EXPECT_LE(rel_err<double>(reference, grouped_attention<double>(X, w, Mask::causal)), 1e-14);
  // Control: the same weights with RoPE are another function.
  auto rotated = w;
  rotated.rope = rope_frequencies(4, 1e4);
  EXPECT_GE(rel_err<double>(reference, grouped_attention<double>(X, rotated, Mask::causal)), 1e-2);
}

// core's RoPE is the language models' (engine/kernels/rope.hpp): rotate_half pairs, ω_i = θ^(−2i/d_h).
TEST(GroupedAttention, RopeIsTheLanguageModelsKernel) {
  Rng rng(kSeed, "rope convention");
  const int T = 7, heads = 2, dh = 8;
  for (double theta : {1e4, 500.0}) {
    const MatD Y = rng.gaussian(T, heads * dh);
    std::vector<double> row_major(std::size_t(T * heads * dh));
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < heads * dh; ++j) row_major[std::size_t(t * heads * dh + j)] = Y(t, j);
    engine::RopeFrequencies f;
    f.theta = theta;
    const auto table = engine::rope_table<double>(T, dh, f);
    auto kernel = row_major;
    engine::kernels::rope_rows<double>(0, T, T, heads, dh, heads * dh, table.data(), false, kernel.data());
    const MatD core = rope_rotate<double>(Y, rope_frequencies(dh, theta));
    double worst = 0;
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < heads * dh; ++j)
        worst = std::max(worst, std::abs(core(t, j) - kernel[std::size_t(t * heads * dh + j)]));
    EXPECT_LE(worst, 1e-15 * Y.cwiseAbs().maxCoeff()) << "theta " << theta;
    // Control: the inverse rotation is a different map.
    engine::kernels::rope_rows<double>(0, T, T, heads, dh, heads * dh, table.data(), true, row_major.data());
    EXPECT_GE(std::abs(core(T - 1, 0) - row_major[std::size_t((T - 1) * heads * dh)]), 1e-3) << "theta " << theta;
  }
}

// ResFormer Eq. 4 needs both copies of K_n masked alike: with the causal mask, query 0 sees key 0
// of both copies, and Eq. 4's 1/2 weights V_n and V_m equally.
TEST(CrossLayerAttention, FirstQueryAveragesTheFirstValueOfEachLayer) {
  Rng rng(kSeed, "cross-layer row 0");
  const MatD Q = rng.gaussian(3, 4), K = rng.gaussian(3, 4), V_n = rng.gaussian(3, 4), V_m = rng.gaussian(3, 4);
  const MatD U = cross_layer_attention<double>(Q, {K, K}, {V_n, V_m}, Mask::causal, 2.0);
  EXPECT_LE((U.row(0) - 0.5 * (V_n.row(0) + V_m.row(0))).norm(), 1e-15 * V_n.norm());
  // Control: other keys for layer m move query 0's weights off 1/2.
  const MatD U2 = cross_layer_attention<double>(Q, {K, rng.gaussian(3, 4)}, {V_n, V_m}, Mask::causal, 2.0);
  EXPECT_GE((U2.row(0) - 0.5 * (V_n.row(0) + V_m.row(0))).norm(), 1e-3 * V_n.norm());
}

// qwe.ext.gqa at H = 4: every grouping has the control "a different M for one query head of the
// group" (group size >= 2), and it fails by a wide margin.
TEST(ExtensionClaims, GqaSplitGroupControlFailsForEveryGrouping) {
  const Claim& claim = claim_by_id("qwe.ext.gqa");
  SweepPoint config;
  config.d = 16, config.heads = 4, config.seq = 6;
  std::vector<std::string> labels;
  std::vector<int> kv_heads;
  for (const auto& variant : claim.variants(config))
    labels.push_back(variant.label), kv_heads.push_back(variant.kv_heads);
  EXPECT_EQ(labels, (std::vector<std::string>{"kv=1", "kv=2"}));
  EXPECT_EQ(kv_heads, (std::vector<int>{1, 2}));
  for (const auto& variant : claim.variants(config)) {
    config.variant = variant;
    const Outcome o = run_claim(claim, config, Precision::f64);
    EXPECT_LE(*normalized_error(o.rel_err, unit_roundoff<double>(), o.kappa), claim.budget) << variant.label;
    const auto split = std::ranges::find_if(o.controls, [](const auto& c) { return c.name.starts_with("a different M"); });
    ASSERT_NE(split, o.controls.end()) << variant.label;
    EXPECT_GE(split->rel_err.value_or(0), 1e-2) << variant.label;
  }
}

// qwe.ext.qknorm: only the product of the gains must commute with M: an orthogonal M_h that
// commutes with diag(γ_Q γ_K) but not with diag(γ_Q) keeps attention; one that mixes coordinates
// of different products does not.
TEST(ExtensionClaims, QkNormFreedomNeedsOnlyTheGainProductToCommute) {
  Rng rng(kSeed, "qk-norm gains");
  auto w = plain_grouped(rng, 4, 1, 1);
  w.q_gain = VecD::LinSpaced(4, 0.5, 2.0);                 // distinct: M does not commute with diag(γ_Q)
  w.k_gain = VecD(4);
  w.k_gain << 1.0 / 0.5, 1.0 / 1.0, 3.0 / 1.5, 3.0 / 2.0;  // γ_Q γ_K = (1, 1, 3, 3)
  const MatD X = rng.gaussian(5, 4);
  const MatD O1 = orthogonal_factor<double>(rng.gaussian(2, 2)), O2 = orthogonal_factor<double>(rng.gaussian(2, 2));
  const auto M = change_of_basis<double>(block_diagonal<double>({O1, O2}));
  const AttentionProbe<double> probe(X, w, Mask::causal);
  EXPECT_LE(qk_freedom_deviation<double>(probe, {M}).rel_err, 1e-14);
  const auto mixing = change_of_basis<double>(orthogonal_factor<double>(rng.gaussian(4, 4)));
  EXPECT_GE(qk_freedom_deviation<double>(probe, {mixing}).rel_err, 1e-2);
}

// --- a singular basis is reported, not measured ----------------------------------------

TEST(SingularBasis, Lemma31WithAnExactlySingularQueryWeightIsFlagged) {
  Rng rng(kSeed, "singular W_Q");
  auto w = random_attention<double>(rng, 8, 2);
  const MatD X = rng.gaussian(4, 8);
  w.W_Q.col(7) = w.W_Q.col(3);  // rank 7
  const auto T = change_of_basis<double>(w.W_Q);
  EXPECT_TRUE(T.singular());
  // The reparametrized MHA through T⁻¹ is garbage: an error that would be
  // reported as a failure of Lemma 3.1 if singularity went undetected ...
  const double err = rel_err<double>(mha<double>(X, w, Mask::causal), mha<double>(X * T.T, reparametrize<double>(w, T),
                                                                                   Mask::causal));
  EXPECT_FALSE(err < control_threshold) << err;
  // ... so no normalized error exists to compare with the budget.
  EXPECT_FALSE(normalized_error(err, unit_roundoff<double>(), T.kappa).has_value()) << "kappa " << T.kappa;

  // Control: the same weights with an invertible W_Q give a measurement that passes.
  const auto w_ok = random_attention<double>(rng, 8, 2);
  const auto T_ok = change_of_basis<double>(w_ok.W_Q);
  ASSERT_FALSE(T_ok.singular());
  const double ok_err = rel_err<double>(mha<double>(X, w_ok, Mask::causal),
                                        mha<double>(X * T_ok.T, reparametrize<double>(w_ok, T_ok), Mask::causal));
  const auto e = normalized_error(ok_err, unit_roundoff<double>(), T_ok.kappa);
  ASSERT_TRUE(e.has_value());
  EXPECT_LE(*e, default_budget);
}

TEST(SingularBasis, VerifyReportsTheNearSingularControlAsDetected) {
  VerifyOptions o;
  o.ids = {"qwe.lemma3.1"};
  o.seed = kSeed;
  o.d = {8};
  o.heads = {2};
  o.seq = {4};
  const auto report = verify(o);
  std::size_t detected = 0;
  for (const auto& c : report.controls)
    if (c.name.find("near-singular") != std::string::npos) {
      EXPECT_TRUE(c.failed_as_expected) << c.config << " [" << c.precision << "]";
      EXPECT_EQ(c.note, "singular basis detected") << c.config << " [" << c.precision << "]";
      ++detected;
    }
  // 2 masks × 3 eliminated weights × 4 precisions.
  EXPECT_EQ(detected, 24u);
}

// --- verify(): selection and validation ----------------------------------------------------

std::vector<std::string> selected_ids(const std::vector<std::string>& args) {
  std::vector<std::string> ids;
  for (const Claim* c : select_claims(args)) ids.push_back(c->id);
  return ids;
}

TEST(SelectClaims, PrefixesSelectTheirFamilies) {
  EXPECT_EQ(selected_ids({"qwe.thm4"}), (std::vector<std::string>{"qwe.thm4.1", "qwe.thm4.2", "qwe.thm4.3"}));
  EXPECT_EQ(selected_ids({"qwe.lemma8"}),
            (std::vector<std::string>{"qwe.lemma8.5", "qwe.lemma8.6", "qwe.lemma8.2"}));
  EXPECT_EQ(selected_ids({"qwe.remark4"}), std::vector<std::string>{"qwe.remark4"});
  // Registry order, each claim once, whatever the order of the arguments.
  EXPECT_EQ(selected_ids({"qwe.thm4.3", "qwe.obs", "qwe.thm4"}),
            (std::vector<std::string>{"qwe.obs3.1", "qwe.thm4.1", "qwe.thm4.2", "qwe.thm4.3"}));
  EXPECT_EQ(selected_ids({}).size(), all_claims().size());
}

TEST(SelectClaims, UnknownIdIsAUsageError) {
  EXPECT_THROW(select_claims({"qwe.thm9"}), UsageError);
  EXPECT_THROW(select_claims({"qwe.thm4.1", "nonsense"}), UsageError);
  VerifyOptions o;
  o.ids = {"qwe.nope"};
  EXPECT_THROW(verify(o), UsageError);
}

VerifyOptions small_options() {
  VerifyOptions o;
  o.seed = kSeed;
  o.d = {8};
  o.heads = {2};
  o.layers = {2};
  o.seq = {4};
  o.threads = 2;
  return o;
}

// The plan verify() runs, made from the options as verify() makes it.
VerifyPlan plan(const VerifyOptions& o) { return plan_verify(select_claims(o.ids), o); }

// Review r21: a control on control_input's 8 fresh positions (n < 8) was recorded under the check's n
// with an empty note (JSON, JUnit, HDF5). Now its note gives the n it ran at, JUnit carries the note as
// <system-out> and the tables name the claim. Control: at n = 8 the control runs on X, and says nothing.
TEST(VerifyRecords, AControlOnFreshPositionsSaysSoInJsonTableAndJunit) {
  for (int n : {2, 8}) {
    VerifyOptions o;
    o.ids = {"qwe.prop4.1"}, o.d = {4}, o.seq = {n}, o.precisions = {Precision::f64}, o.threads = 1;
    const results::Report report = verify(o);
    ASSERT_EQ(report.controls.size(), 2u);  // both masks
    const bool fresh = n < 8;
    const std::string note = "ran on 8 fresh positions (n=8), not on the check's n=2";
    for (const auto& control : report.controls) {
      EXPECT_EQ(control.positions, fresh ? 8 : 0) << n;
      EXPECT_EQ(control.note, fresh ? note : "") << n;
    }
    std::ostringstream json, table, claims;
    results::write_json(json, report);
    results::print_table(table, report);
    results::print_claims(claims, report);
    EXPECT_EQ(json.str().find("\"note\": \"" + note + "\"") != std::string::npos, fresh) << json.str();
    const std::string line = "controls of qwe.prop4.1 ran on 8 fresh positions (n=8)";
    EXPECT_EQ(table.str().find(line) != std::string::npos, fresh) << table.str();
    EXPECT_EQ(claims.str().find(line) != std::string::npos, fresh) << claims.str();
    test_support::ScratchDir dir;
    results::write_junit((dir / "r.xml").string(), report);
    std::ifstream in(dir / "r.xml");
    const std::string xml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(xml.find("<system-out>ran on 8 fresh positions (n=8), not on the check&apos;s n=2</system-out>") !=
                  std::string::npos,
              fresh)
        << xml;
  }
}

TEST(Validate, AcceptsASmallSweep) { EXPECT_NO_THROW(plan(small_options())); }

TEST(Validate, RejectsBadOptionsWithUsageError) {
  struct Case {
    const char* what;
    void (*change)(VerifyOptions&);
  };
  const Case cases[] = {
      {"d not divisible by heads", [](VerifyOptions& o) { o.d = {10}, o.heads = {4}; }},
      {"one d of several not divisible", [](VerifyOptions& o) { o.d = {8, 12}, o.heads = {8}; }},
      {"d = 0", [](VerifyOptions& o) { o.d = {0}; }},
      {"d < 0", [](VerifyOptions& o) { o.d = {-8}; }},
      {"heads = 0", [](VerifyOptions& o) { o.heads = {0}; }},
      {"layers = 0", [](VerifyOptions& o) { o.layers = {0}; }},
      {"layers < 0", [](VerifyOptions& o) { o.layers = {-1}; }},
      {"seq = 0", [](VerifyOptions& o) { o.seq = {0}; }},
      {"seq < 0", [](VerifyOptions& o) { o.seq = {4, -4}; }},
      {"empty d list", [](VerifyOptions& o) { o.d = std::vector<int>{}; }},
      {"trials = 0", [](VerifyOptions& o) { o.trials = 0; }},
      {"trials < 0", [](VerifyOptions& o) { o.trials = -2; }},
      {"no precision", [](VerifyOptions& o) { o.precisions.clear(); }},
      {"unknown id", [](VerifyOptions& o) { o.ids = {"qwe.unknown"}; }},
  };
  for (const Case& c : cases) {
    VerifyOptions o = small_options();
    c.change(o);
    EXPECT_THROW(plan(o), UsageError) << c.what;
    EXPECT_THROW(verify(o), UsageError) << c.what;
  }
}

TEST(Validate, RejectsDOfOneForEveryClaim) {
  // d = 1 leaves nothing to check: one 1×1 head. qwe.prop4.1's control runs
  // H = d heads for odd d, so at d = 1 it compares a computation with itself
  // and cannot fail.
  for (const auto& claim : all_claims()) {
    VerifyOptions o = small_options();
    o.ids = {claim.id};
    o.d = {1};
    o.heads = {1};
    EXPECT_THROW(plan(o), UsageError) << claim.id;
  }
}

// A configuration below a claim's least sizes (Dims) is not one of its configurations, and a sweep
// with none skips the claim with the reason: at n = 1 a position attends only to itself, so the
// attention claims' controls could not fail; RoPE needs even head widths, per-head QK-norm widths
// of at least 2. Controls: n = 2, an even width, width 2 run them.
TEST(Validate, ConfigurationsBelowAClaimsLeastSizesAreLeftOutAndTheirClaimSkipped) {
  const auto skipped = [](std::vector<std::string> ids, std::vector<int> d, std::vector<int> heads, std::vector<int> seq) {
    VerifyOptions o = small_options();
    o.ids = std::move(ids), o.d = std::move(d), o.heads = std::move(heads), o.seq = std::move(seq);
    const VerifyPlan p = plan(o);
    std::map<std::string, std::string> why;
    for (const auto& s : p.skipped) why[s.id] = s.reason;
    std::map<std::string, int> configurations;
    for (const auto& [claim, config] : p.configurations) ++configurations[claim->id];
    return std::pair{why, configurations};
  };
  const std::vector<std::string> attention{"qwe.obs3.1", "qwe.lemma3.1", "qwe.prop4.1", "qwe.prop4.2", "qwe.thm4.3",
                                           "qwe.freedom.vo", "qwe.ext.rope", "qwe.ext.gqa", "qwe.ext.qknorm"};
  const auto [one_position, none] = skipped(attention, {8}, {2}, {1});
  for (const auto& id : attention) {
    EXPECT_NE(one_position.at(id).find("n >= 2 positions"), std::string::npos) << id;
    EXPECT_EQ(none.count(id), 0u) << id;
  }
  const auto [two_positions, run] = skipped(attention, {8}, {2}, {1, 2});
  EXPECT_TRUE(two_positions.empty());
  for (const auto& id : attention) EXPECT_GT(run.at(id), 0) << id;  // control: n = 2 of the same sweep runs

  const auto [odd, odd_runs] = skipped({"qwe.ext.rope", "qwe.ext.gqa"}, {6}, {2}, {4});
  EXPECT_NE(odd.at("qwe.ext.rope").find("even head width"), std::string::npos);
  EXPECT_EQ(odd.count("qwe.ext.gqa"), 0u);  // control: an odd head width is one of GQA's
  const auto [mixed, mixed_runs] = skipped({"qwe.ext.rope"}, {6, 8}, {2}, {4});
  EXPECT_TRUE(mixed.empty());
  EXPECT_EQ(mixed_runs.at("qwe.ext.rope"), skipped({"qwe.ext.rope"}, {8}, {2}, {4}).second.at("qwe.ext.rope"));  // d = 8's

  const auto [narrow, narrow_runs] = skipped({"qwe.ext.qknorm", "qwe.ext.gqa"}, {4}, {4}, {4});
  EXPECT_NE(narrow.at("qwe.ext.qknorm").find("head width d/H >= 2"), std::string::npos);
  EXPECT_EQ(narrow.count("qwe.ext.gqa"), 0u);
  const auto [wide, wide_runs] = skipped({"qwe.ext.qknorm"}, {4}, {2}, {4});
  EXPECT_TRUE(wide.empty());
}

// verify --help's least sizes are generated from the claims' Dims (theory::least_sizes). Each group
// "ids: requirement" it states is true: one size below the requirement skips every claim named, and the
// requirement itself runs them (the control). A size with no claim named leaves every claim run.
TEST(Validate, TheHelpsLeastSizesAreTheSizesBelowWhichEachClaimNamedIsSkipped) {
  const auto ran = [](const std::string& id, int d, int heads, int layers, int seq) {
    VerifyOptions o = small_options();
    o.ids = {id}, o.d = {d}, o.heads = {heads}, o.layers = {layers}, o.seq = {seq};
    return plan(o).skipped.empty();
  };
  std::istringstream groups(least_sizes());
  std::string group;
  int stated = 0;
  while (std::getline(groups, group, ';')) {
    const auto colon = group.find(": ");
    ASSERT_NE(colon, std::string::npos) << group;
    const std::string requirement = group.substr(colon + 2);
    std::istringstream ids(group.substr(0, colon));
    for (std::string id; std::getline(ids >> std::ws, id, ',');) {
      ++stated;
      if (requirement == "d >= 4") EXPECT_TRUE(!ran(id, 3, 1, 2, 4) && ran(id, 4, 1, 2, 4)) << id;
      else if (requirement == "L >= 2") EXPECT_TRUE(!ran(id, 8, 2, 1, 4) && ran(id, 8, 2, 2, 4)) << id;
      else if (requirement == "n >= 2") EXPECT_TRUE(!ran(id, 8, 2, 2, 1) && ran(id, 8, 2, 2, 2)) << id;
      else if (requirement == "head width d/H >= 2") EXPECT_TRUE(!ran(id, 8, 8, 2, 4) && ran(id, 8, 4, 2, 4)) << id;
      else if (requirement == "an even head width d/H") EXPECT_TRUE(!ran(id, 6, 2, 2, 4) && ran(id, 8, 2, 2, 4)) << id;
      else ADD_FAILURE() << "a requirement this test does not know: " << requirement;
    }
  }
  EXPECT_GE(stated, 14);
  const std::string text = least_sizes();
  for (const char* id : {"qwe.lemma8.5", "qwe.thm8.4", "skipv1.lemma1", "resformer.eq4"})  // control: no least size
    EXPECT_EQ(text.find(std::string(id) + ":"), std::string::npos) << id;
  for (const char* id : {"qwe.lemma8.5", "resformer.eq4"}) EXPECT_TRUE(ran(id, 6, 6, 1, 1)) << id;
}

// qwe.ext.qknorm's control "orthogonal M_h not commuting with diag(γ_Q γ_K)" mixes the product's two
// levels, so it changes the scores by about the gap between them: the levels are kept a factor e^0.3
// apart. Drawn independently they nearly coincided at seed 29 (rel_err 6.9e-4: the control did not fail).
TEST(ExtensionClaims, QkNormMixingControlFailsAtEverySeed) {
  for (std::uint64_t seed = 20; seed < 40; ++seed) {
    VerifyOptions o;
    o.ids = {"qwe.ext.qknorm"}, o.seed = seed, o.precisions = {Precision::f64}, o.threads = 1;
    const results::Report r = verify(o);
    for (const auto& c : r.controls)
      EXPECT_TRUE(c.failed_as_expected) << "seed " << seed << ": " << c.name << ", rel_err " << c.rel_err.value_or(-1);
  }
}

// --- the counts (qwe.fdim.*) -------------------------------------------------------------

// Each count equals its prediction exactly; each control (a configuration outside the hypothesis,
// or a wrong stated loss) is rejected by the loss it measures: both skips in every layer lose
// (L−1)(d² − H·d_h²) = 8, one pre-LayerNorm layer 1.
TEST(FdimClaims, CountsEqualTheirPredictionsAndEveryControlIsRejected) {
  const std::map<std::string, double> control_gap{{"qwe.fdim.noskip", 8}, {"qwe.fdim.one", 1},
                                                  {"qwe.fdim.every", 8}, {"qwe.fdim.layernorm", 1},
                                                  {"qwe.fdim.mlp", 8}};
  for (const std::string& id : claim_ids(Kind::count)) {
    const Claim& claim = claim_by_id(id);
    SweepPoint c;
    c.d = claim.defaults.d.at(0);
    const Outcome o = run_claim(claim, c, Precision::f64);
    ASSERT_TRUE(o.statistic) << id;
    EXPECT_EQ(o.statistic->value, o.statistic->expected) << id << ": " << o.note;
    EXPECT_GT(o.statistic->value, 0) << id;
    ASSERT_EQ(o.controls.size(), 1u) << id;
    EXPECT_TRUE(o.controls[0].failed_as_expected) << id << ": " << o.controls[0].name;
    EXPECT_EQ(o.controls[0].rel_err, control_gap.at(id)) << id << ": " << o.controls[0].name;
  }
}

// The counts run at their own width whatever the sweep's --d, once, in double.
TEST(FdimClaims, RunAtTheirOwnWidthOnceInDouble) {
  VerifyOptions o = small_options();
  o.ids = {"qwe.fdim.every"};
  o.d = {16, 32};
  const results::Report r = verify(o);
  ASSERT_EQ(r.checks.size(), 1u);
  EXPECT_EQ(r.checks[0].config, "d=4 trial=0");
  EXPECT_EQ(r.checks[0].precision, "double");
  EXPECT_TRUE(r.checks[0].pass);
  EXPECT_TRUE(r.summary().ok);
}

// --- verify(): reproducibility ------------------------------------------------------------

// Every number of a report, as bit patterns (absent numbers as a marker), in order.
std::vector<std::uint64_t> report_bits(const results::Report& r) {
  std::vector<std::uint64_t> bits;
  auto add = [&](std::optional<double> x) { bits.push_back(x ? std::bit_cast<std::uint64_t>(*x) : ~0ULL); };
  for (const auto& c : r.checks) add(c.rel_err), add(c.kappa), add(c.normalized_err);
  for (const auto& c : r.controls) add(c.rel_err);
  for (const auto& l : r.ladders) add(l.slope);
  return bits;
}

std::vector<std::string> record_keys(const results::Report& r) {
  std::vector<std::string> keys;
  for (const auto& c : r.checks) keys.push_back(c.id + "|" + c.config + "|" + c.precision);
  for (const auto& c : r.controls) keys.push_back(c.id + "|" + c.name + "|" + c.config + "|" + c.precision);
  return keys;
}

class Reproducibility : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { first_ = verify(small_options()); }
  static void TearDownTestSuite() { first_.reset(); }
  static const results::Report& first() { return *first_; }

 private:
  static inline std::optional<results::Report> first_;
};

TEST_F(Reproducibility, SmallSweepOfEveryClaimPasses) {
  const auto s = first().summary();
  EXPECT_TRUE(s.ok);
  EXPECT_EQ(s.passed, s.checks);
  EXPECT_EQ(s.controls_failed_as_expected, s.controls);
  // Every claim contributes records.
  for (const auto& claim : all_claims())
    EXPECT_TRUE(std::ranges::any_of(first().checks, [&](const auto& c) { return c.id == claim.id; })) << claim.id;
}

TEST_F(Reproducibility, SameSeedGivesBitIdenticalNumbers) {
  const auto again = verify(small_options());
  EXPECT_EQ(record_keys(again), record_keys(first()));
  EXPECT_EQ(report_bits(again), report_bits(first()));
}

TEST_F(Reproducibility, ThreadCountDoesNotChangeAnyNumber) {
  auto one_thread = small_options();  // first() ran on two threads
  one_thread.threads = 1;
  const auto serial = verify(one_thread);
  EXPECT_EQ(record_keys(serial), record_keys(first()));
  EXPECT_EQ(report_bits(serial), report_bits(first()));
}

TEST_F(Reproducibility, DifferentSeedGivesDifferentNumbers) {
  auto other = small_options();
  other.seed = kSeed + 1;
  const auto report = verify(other);
  ASSERT_EQ(record_keys(report), record_keys(first()));
  const auto a = report_bits(report), b = report_bits(first());
  std::size_t same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  // A few numbers are seed-independent by construction (κ = 1 where nothing is
  // inverted, errors that are exactly 0); the rest must change.
  EXPECT_LT(same, a.size() / 4) << same << " of " << a.size() << " numbers unchanged";
  EXPECT_TRUE(report.summary().ok);
}

}  // namespace
}  // namespace qkvlab::theory
