// qkvlab fdim (fdim/): closed forms of the functional dimension, saturation, certificates and
// controls. Each configuration is small enough that its MPFI certificate takes well under a second.
#include "fdim/count.hpp"

#include <gtest/gtest.h>

using namespace qkvlab::fdim;

namespace {

Config bare(int d, int heads, int head_dim) {
  Config c;
  c.layers = 0;
  c.d = d;
  c.heads = heads;
  c.head_dim = head_dim;
  c.seq = 3;
  c.inputs = 4;
  return c;
}

// One attention layer (d = 4, H = 2, d_h = 2) without skips or ends.
Config attention_layer() {
  Config c = bare(4, 2, 2);
  c.layers = 1;
  c.skips = Skips::none;
  c.inputs = 8;
  return c;
}

// L layers (d = 4, H = 2, d_h = 2) between a linear embedding and a linear readout.
Config stack(int layers) {
  Config c = bare(4, 2, 2);
  c.layers = layers;
  c.embed = Embed::linear;
  c.readout = Readout::linear;
  return c;
}

long long deficiency(const Count& n) { return n.parameters - n.rank.rank; }

}  // namespace

// A single linear layer X ↦ X E has rank d_in·d_out; with too few rows of inputs (control) it does not.
TEST(Fdim, SingleLinearLayerHasFullRank) {
  Config c = bare(4, 1, 4);
  c.embed = Embed::linear;
  c.din = 3;
  const Count n = count(c, true);
  EXPECT_EQ(n.parameters, 12);
  EXPECT_EQ(n.rank.rank, 12);
  EXPECT_TRUE(n.certified);
  c.seq = 2;
  c.inputs = 1;  // X has 2 rows: rank 2·4
  EXPECT_EQ(count(c, false).rank.rank, 8);
}

// X ↦ X E D: deficiency r² (GL(r) at the junction), certified; with r > d_in, d_out (control) the
// junction's directions are dependent and the prediction r² fails.
TEST(Fdim, ProductOfTwoLinearMapsHasDeficiencyRSquared) {
  Config c = bare(3, 1, 3);
  c.embed = Embed::linear;
  c.din = 5;
  c.readout = Readout::linear;
  c.dout = 4;
  const Count n = count(c, true);
  EXPECT_EQ(n.parameters, 27);
  EXPECT_EQ(deficiency(n), 9);
  EXPECT_EQ(predicted_deficiency(n), 9);
  EXPECT_TRUE(n.certified);
  c.d = 6;
  const Count wide = count(c, true);
  EXPECT_EQ(wide.rank.rank, 20);  // 5 × 4 matrices
  EXPECT_NE(deficiency(wide), predicted_deficiency(wide));
  EXPECT_FALSE(wide.upper.holds);
  EXPECT_FALSE(wide.certified);
}

// One attention layer without skips: exactly Lemma 3.1's d_h² per (W_Q, W_K) and per (W_V, W_O) pair.
TEST(Fdim, OneAttentionLayerHasLemma31Deficiency) {
  const Count n = count(attention_layer(), true);
  EXPECT_EQ(n.parameters, 2 * 4 * 4 * 2);
  EXPECT_EQ(deficiency(n), 2 * 2 * 2 * 2);
  EXPECT_EQ(predicted_deficiency(n), deficiency(n));
  EXPECT_TRUE(n.certified);
  EXPECT_TRUE(n.saturated);
}

// Saturation: doubling the inputs beyond the reported N does not raise the rank.
TEST(Fdim, RankSaturatesInInputs) {
  Config c = stack(2);
  c.mlp = Mlp::gelu;
  c.ffn = 4;
  c.inputs = 32;
  const Count n = count(c, false);
  ASSERT_TRUE(n.saturated);
  c.inputs *= 2;
  EXPECT_EQ(count(c, false).rank.rank, n.rank.rank);
}

// Control: biases break nothing but add gauges, b_K^h (constant over keys) and b_V^h against b_O:
// the deficiency rises by exactly 2·H·d_h, as predicted, certified.
TEST(Fdim, BiasesAddTheirPredictedGauges) {
  Config c = attention_layer();
  const Count plain = count(c, false);
  c.bias = true;
  c.inputs = 12;
  const Count biased = count(c, true);
  EXPECT_EQ(deficiency(biased) - deficiency(plain), 2 * 2 * 2);
  EXPECT_EQ(predicted_deficiency(biased), deficiency(biased));
  EXPECT_TRUE(biased.certified);
}

// Control: a learned (non-scalar) RMSNorm gain adds d per norm (absorbed by its readers' rows)
// and keeps the stream's O(d); a prediction that left the gains out is off by exactly that.
TEST(Fdim, NormGainChangesTheDeficiencyAsPredicted) {
  Config c = stack(1);
  c.norm = Norm::rmsnorm;
  c.inputs = 10;
  const Count plain = count(c, true);
  EXPECT_EQ(deficiency(plain), predicted_deficiency(plain));
  EXPECT_TRUE(plain.certified);
  c.norm_gain = true;
  const Count gained = count(c, true);
  EXPECT_EQ(deficiency(gained) - deficiency(plain), 2 * 4);  // norm 1 and the final norm
  EXPECT_EQ(deficiency(gained), predicted_deficiency(gained));
  EXPECT_TRUE(gained.certified);
}

// W_Q = I (Query-weight elimination): without skips every layer's W_Q is free to drop; with both
// skips one layer is, but every layer costs (L − 1)(d² − H·d_h²) (the residual basis shrinks to
// GL(d_h)^H). Control: a wrong prediction (0 lost with both skips in every layer) is refuted.
TEST(Fdim, IdentityQueriesLoseWhatTheGaugeCountPredicts) {
  Config c = stack(2);
  c.inputs = 16;
  auto lost = [&](Skips s, std::vector<int> layers, bool certify) {
    Config q = c;
    q.skips = s;
    q.identity_layers = std::move(layers);
    const Count n = count(q, certify);
    EXPECT_EQ(n.certified, certify);  // the certificate of the cheaper cases: `qkvlab fdim` (docs/math/fdim.md)
    EXPECT_EQ(n.free_certified, certify);
    return *n.free_rank - n.rank.rank;
  };
  EXPECT_EQ(lost(Skips::none, {1, 2}, false), 0);
  EXPECT_EQ(lost(Skips::both, {1}, false), 0);
  const long long every = lost(Skips::both, {1, 2}, true);
  EXPECT_EQ(every, (2 - 1) * (4 * 4 - 2 * 2 * 2));
  EXPECT_NE(every, 0);
}

// The gauge count alone (no Jacobian) is the count's prediction, and saturating_inputs saturates;
// control: too few inputs (two) do not.
TEST(Fdim, GaugeCountAloneAndSaturatingInputs) {
  Config c = stack(2);
  c.skips = Skips::both;
  c.norm = Norm::layernorm;
  c.inputs = saturating_inputs(c);
  const Count n = count(c, false);
  EXPECT_TRUE(n.saturated);
  EXPECT_EQ(predicted_deficiency(c), predicted_deficiency(n));
  EXPECT_EQ(deficiency(n), predicted_deficiency(c));
  c.inputs = 2;
  EXPECT_FALSE(count(c, false).saturated);
}

// The interval elimination itself: a nonsingular enclosure passes, one containing a singular
// matrix (control) fails at a pivot.
TEST(Fdim, IntervalEliminationCertifiesOnlyNonsingularEnclosures) {
  qkvlab::Mat<Interval> A(2, 2);
  A << Interval(2), Interval(1), Interval(1), Interval(1);
  EXPECT_TRUE(interval_elimination(A).nonsingular);
  A(1, 1) = Interval(0.5);  // det 0
  EXPECT_FALSE(interval_elimination(A).nonsingular);
}
