// results/verdict.hpp: each decision rule on synthetic replicates. A clear effect agrees or
// disagrees, an effect inside the noise is inconclusive, one seed is inconclusive whatever its
// value, and the quantity's verdict combines its elements (one disagreeing element decides).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "results/verdict.hpp"

using namespace qkvlab::results;

namespace {

// n replicates of a normal effect with standard deviation sd (a fixed stream: the test is exact).
std::vector<double> draws(double effect, double sd, int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, sd);
  std::vector<double> x;
  for (int i = 0; i < n; ++i) x.push_back(effect + noise(rng));
  return x;
}

Claim claim(Sense sense, double reference = 0, double tolerance = 0) { return {"synthetic", "x", sense, reference, tolerance}; }

std::string verdict(Sense sense, const std::vector<double>& x, double reference = 0, double tolerance = 0) {
  return judge(claim(sense, reference, tolerance), Rule{}, {over_replicates("x", x)}).verdict;
}

}  // namespace

TEST(Verdict, ClearEffectAgreesOrDisagreesByItsSign) {
  const auto up = draws(1.0, 0.1, 5, 1), down = draws(-1.0, 0.1, 5, 2);
  EXPECT_EQ(verdict(Sense::greater, up), "agrees");
  EXPECT_EQ(verdict(Sense::greater, down), "disagrees");
  EXPECT_EQ(verdict(Sense::less, down), "agrees");
  EXPECT_EQ(verdict(Sense::less, up), "disagrees");
  // Against a reference other than 0: 1 ± 0.05 is above 0.5 and below 1.5.
  EXPECT_EQ(verdict(Sense::greater, up, 0.5), "agrees");
  EXPECT_EQ(verdict(Sense::greater, up, 1.5), "disagrees");
}

TEST(Verdict, EffectInsideTheNoiseIsInconclusive) {
  const auto noisy = draws(0.05, 1.0, 5, 3);  // se ≈ 0.45, mean within 2 se of 0
  const Element e = over_replicates("x", noisy);
  ASSERT_LT(std::abs(e.value), 2 * e.se);
  EXPECT_EQ(verdict(Sense::greater, noisy), "inconclusive");
  EXPECT_EQ(verdict(Sense::less, noisy), "inconclusive");
  // Control: the same draws shifted by 10 se decide.
  std::vector<double> shifted = noisy;
  for (double& x : shifted) x += 10 * e.se;
  EXPECT_EQ(verdict(Sense::greater, shifted), "agrees");
}

// Identical replicates give se 0: no spread was measured, so a difference of 1e-9 is inconclusive
// (the margin z·0 let it agree). Control: the same element marked exact (a count, no randomness)
// is judged by its value, with any number of replicates, one included under a rule asking two.
TEST(Verdict, IdenticalReplicatesAreInconclusiveAndExactCountsAreJudgedByValue) {
  EXPECT_EQ(judge(claim(Sense::greater), Rule{}, {over_replicates("x", {1e-9, 1e-9})}).verdict, "inconclusive");
  EXPECT_EQ(judge(claim(Sense::greater), Rule{}, {{"x", 1e-9, 0, -1, 0}}).verdict, "inconclusive");
  EXPECT_EQ(judge(claim(Sense::greater), Rule{}, {{"x", 1e-9, 0, 2, 0, true}}).verdict, "agrees");
  EXPECT_EQ(judge(claim(Sense::greater), Rule{}, {{"x", -1e-9, 0, 1, 0, true}}).verdict, "disagrees");
  EXPECT_EQ(judge(claim(Sense::within, 0, 2), Rule{}, {{"x", 1.5, 0, 1, 0, true}}).verdict, "agrees");
  // The JSON and the rule say which elements were judged by value: z 0 and "exact" true for them;
  // control: a verdict without exact elements has no "exact" list and says nothing of them.
  const Verdict mixed = judge(claim(Sense::greater), Rule{}, {{"c", 1, 0, 3, 0, true}, {"t", 5, 1, 3, 0}});
  const std::string json = mixed.to_value().json_compact();
  EXPECT_NE(json.find("\"z\":[0, 4.30"), std::string::npos) << json;
  EXPECT_NE(json.find("\"exact\":[true, false]"), std::string::npos) << json;
  EXPECT_NE(mixed.rule_text().find("judged by its value alone"), std::string::npos);
  const Verdict plain = judge(claim(Sense::greater), Rule{}, {{"t", 5, 1, 3, 0}});
  EXPECT_EQ(plain.to_value().json_compact().find("\"exact\""), std::string::npos);
  EXPECT_EQ(plain.rule_text().find("judged by its value alone"), std::string::npos);
}

// The multiple of the standard error is Student's t quantile 0.975 at n − 1 degrees of freedom: a mean
// 3 se from 0 over 3 seeds is inside the noise (4.30 se needed), 5 se decides; over 2 seeds 12.71 se
// are needed; where the count is not recorded (many), the normal's 1.96 (control: 1.9 se is not enough).
TEST(Verdict, StudentsTAtTheReplicatesDegreesOfFreedom) {
  auto at = [](double value, double se, std::int64_t n) {
    return judge(claim(Sense::greater), Rule{}, {{"x", value, se, n, 0}}).verdict;
  };
  EXPECT_EQ(at(3, 1, 3), "inconclusive");
  EXPECT_EQ(at(5, 1, 3), "agrees");
  EXPECT_EQ(at(-5, 1, 3), "disagrees");
  EXPECT_EQ(at(12, 1, 2), "inconclusive");
  EXPECT_EQ(at(13, 1, 2), "agrees");
  EXPECT_EQ(at(2.0, 1, 30), "inconclusive");  // t(29) = 2.045
  EXPECT_EQ(at(2.1, 1, 30), "agrees");
  EXPECT_EQ(at(1.97, 1, -1), "agrees");
  EXPECT_EQ(at(1.9, 1, -1), "inconclusive");
  EXPECT_NEAR(se_multiple(Rule{}, 2), 12.706204736174698, 1e-9);
  EXPECT_NEAR(se_multiple(Rule{}, -1), 1.959963984540054, 1e-12);
}

TEST(Verdict, OneSeedIsInconclusiveUnlessTheRuleSaysOtherwise) {
  EXPECT_EQ(verdict(Sense::greater, {100.0}), "inconclusive");
  EXPECT_EQ(verdict(Sense::less, {100.0}), "inconclusive");
  const Element one = over_replicates("x", {100.0});
  EXPECT_EQ(one.replicates, 1);
  EXPECT_TRUE(std::isnan(one.se));
  // An exact quantity (se 0, one evaluation, marked exact) under a rule that asks for one replicate
  // decides; the same value with se 0 not marked exact is no measured spread: inconclusive.
  const Rule exact{0.975, "exact evaluations", 1, ""};
  EXPECT_EQ(judge(claim(Sense::greater), exact, {{"x", 100.0, 0.0, 1, 0, true}}).verdict, "agrees");
  EXPECT_EQ(judge(claim(Sense::greater), exact, {{"x", -100.0, 0.0, 1, 0, true}}).verdict, "disagrees");
  EXPECT_EQ(judge(claim(Sense::greater), exact, {{"x", 100.0, 0.0, 1, 0}}).verdict, "inconclusive");
}

TEST(Verdict, WithinAndNotBelow) {
  const auto near = draws(0.002, 0.001, 8, 4), far = draws(0.05, 0.001, 8, 5);
  EXPECT_EQ(verdict(Sense::within, near, 0, 0.01), "agrees");
  EXPECT_EQ(verdict(Sense::within, far, 0, 0.01), "disagrees");
  EXPECT_EQ(verdict(Sense::within, draws(0.01, 0.02, 5, 6), 0, 0.01), "inconclusive");
  // Non-inferiority within a margin (0.2): shown when the mean clears −margin by z se, refuted when
  // it is below −margin by z se; a spread too wide for either is inconclusive, not agreement.
  EXPECT_EQ(verdict(Sense::not_below, draws(-1.0, 0.1, 5, 7), 0, 0.2), "disagrees");
  EXPECT_EQ(verdict(Sense::not_below, draws(0.0, 0.01, 5, 8), 0, 0.2), "agrees");
  EXPECT_EQ(verdict(Sense::not_below, draws(0.0, 1.0, 5, 8), 0, 0.2), "inconclusive");
}

TEST(Verdict, OneDisagreeingElementDecidesAndAllMustAgree) {
  const Element yes = over_replicates("a", draws(1, 0.1, 4, 9)), no = over_replicates("b", draws(-1, 0.1, 4, 10)),
                unsure = over_replicates("c", draws(0, 1, 4, 11));
  EXPECT_EQ(judge(claim(Sense::greater), Rule{}, {yes, yes}).verdict, "agrees");
  EXPECT_EQ(judge(claim(Sense::greater), Rule{}, {yes, no, unsure}).verdict, "disagrees");
  EXPECT_EQ(judge(claim(Sense::greater), Rule{}, {yes, unsure}).verdict, "inconclusive");
  EXPECT_EQ(judge(claim(Sense::greater), Rule{}, {}).verdict, "inconclusive");
  const Verdict v = judge(claim(Sense::greater), Rule{}, {yes, no});
  EXPECT_EQ(v.outcomes, (std::vector<std::string>{"agrees", "disagrees"}));
}

TEST(Verdict, ValueCarriesRuleQuantityAndUncertainty) {
  const Verdict v = judge(claim(Sense::less), Rule{}, {over_replicates("layer 2", {4, 5, 6})}, "sequences");
  const Value j = v.to_value();
  EXPECT_EQ(j["verdict"].string(), "disagrees");
  EXPECT_EQ(j["rule"].string(), v.rule_text());
  EXPECT_NE(v.rule_text().find("fewer than 2 seeds"), std::string::npos);
  EXPECT_NE(v.rule_text().find("12.71 at 2, 4.30 at 3"), std::string::npos) << v.rule_text();
  EXPECT_EQ(j["quantity"]["claimed"].string(), "< 0");
  EXPECT_EQ(j["quantity"]["elements"].items()[0]["value"].number(), 5.0);
  EXPECT_NEAR(j["uncertainty"]["se"].items()[0].number(), 1 / std::sqrt(3.0), 1e-15);
  EXPECT_NEAR(j["uncertainty"]["z"].items()[0].number(), 4.302652729749464, 1e-12);
  EXPECT_EQ(j["uncertainty"]["confidence"].number(), 0.975);
  EXPECT_EQ(j["uncertainty"]["over"].string(), "seeds");
  EXPECT_EQ(j["uncertainty"]["within_run_over"].string(), "sequences");
}

// A negative reference (a margin below 0, as icl's trained figures use: SkipV1 − MHA < −0.01) is
// judged as mean − reference and printed as "mean + 0.01", not "mean - -0.01"; a positive one as
// "mean - 0.5". The margin decides: −0.005 ± 0.001 is resolved below 0 but inside the margin
// (disagrees), −0.02 ± 0.001 beyond it (agrees).
TEST(Verdict, NegativeReferenceIsAMarginAndReadsAsOne) {
  const Claim margin = claim(Sense::less, -0.01);
  EXPECT_EQ(judge(margin, Rule{}, {{"x", -0.005, 0.001, -1, 0}}).verdict, "disagrees");
  EXPECT_EQ(judge(margin, Rule{}, {{"x", -0.02, 0.001, -1, 0}}).verdict, "agrees");
  EXPECT_EQ(judge(claim(Sense::less), Rule{}, {{"x", -0.005, 0.001, -1, 0}}).verdict, "agrees");  // control: no margin
  const std::string text = judge(margin, Rule{}, {{"x", -0.02, 0.001, -1, 0}}).rule_text();
  EXPECT_NE(text.find("agrees when mean + 0.01 < -z se"), std::string::npos) << text;
  EXPECT_EQ(text.find("- -"), std::string::npos) << text;
  EXPECT_NE(judge(claim(Sense::greater, 0.5), Rule{}, {{"x", 1, 0.1, -1, 0}}).rule_text().find("agrees when mean - 0.5 > z se"),
            std::string::npos);
}
