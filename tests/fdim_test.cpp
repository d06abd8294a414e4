// qkvlab fdim (fdim/): closed forms of the functional dimension, saturation, certificates and
// controls. Each configuration is small enough that its MPFI certificate takes well under a second.
#include "core/errors.hpp"
#include "fdim/count.hpp"
#include "fdim/network.hpp"
#include "run_command.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>

using namespace qkvlab::fdim;
using qkvlab::test_support::lines;
using qkvlab::test_support::run_qkvlab;

namespace {

Network bare(int d, int heads, int head_dim) {
  Network c;
  c.layers = 0;
  c.d = d;
  c.heads = heads;
  c.head_dim = head_dim;
  c.seq = 3;
  c.inputs = 4;
  return c;
}

// One attention layer (d = 4, H = 2, d_h = 2) without skips or ends.
Network attention_layer() {
  Network c = bare(4, 2, 2);
  c.layers = 1;
  c.skips = Skips::none;
  c.inputs = 8;
  return c;
}

// L layers (d = 4, H = 2, d_h = 2) between a linear embedding and a linear readout.
Network stack(int layers) {
  Network c = bare(4, 2, 2);
  c.layers = layers;
  c.embed = Embed::linear;
  c.readout = Readout::linear;
  return c;
}

long long deficiency(const Count& n) { return n.parameters - n.rank.rank; }

}  // namespace

// A single linear layer X ↦ X E has rank d_in·d_out; with too few rows of inputs (control) it does not.
TEST(Fdim, SingleLinearLayerHasFullRank) {
  Network c = bare(4, 1, 4);
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

// X ↦ X E D: deficiency r² (GL(r) at the junction), certified. With r > d_in, d_out the junction's
// r² directions (E B, −B D) are dependent: B with E B = 0 and B D = 0, (r − d_in)(r − d_out) of them,
// move nothing, and the prediction is their span's dimension, certified; control: their number r²
// overshoots the deficiency.
TEST(Fdim, ProductOfTwoLinearMapsHasDeficiencyRSquared) {
  Network c = bare(3, 1, 3);
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
  EXPECT_EQ(deficiency(wide), 6 * 6 - (6 - 5) * (6 - 4));
  EXPECT_EQ(predicted_deficiency(wide), deficiency(wide));
  EXPECT_TRUE(wide.certified);
  long long directions = 0;
  for (const Term& t : wide.predicted) directions += t.dimension > 0 ? t.dimension : 0;
  EXPECT_EQ(directions, 6 * 6);
  EXPECT_NE(directions, deficiency(wide));
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
  Network c = stack(2);
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
  Network c = attention_layer();
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
  Network c = stack(1);
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
  Network c = stack(2);
  c.inputs = 16;
  auto lost = [&](Skips s, std::vector<int> layers, bool certify) {
    Network q = c;
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
  Network c = stack(2);
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

// The nonsingularity test itself: a nonsingular enclosure passes; one containing a singular matrix
// fails (controls: a singular point matrix, and a nonsingular midpoint whose enclosure reaches a
// singular matrix).
TEST(Fdim, NonsingularityIsCertifiedOnlyForNonsingularEnclosures) {
  qkvlab::Mat<Interval> A(2, 2);
  A << Interval(2), Interval(1), Interval(1), Interval(1);
  EXPECT_TRUE(certify_nonsingular(A).nonsingular);
  A(1, 1) = Interval(0.5);  // det 0
  EXPECT_FALSE(certify_nonsingular(A).nonsingular);
  A(1, 1) = Interval("[0.4, 0.9]");  // det 2a − 1: 0.3 at the midpoint, 0 at a = 0.5 inside
  EXPECT_FALSE(certify_nonsingular(A).nonsingular);
  A(1, 1) = Interval("[0.75, 1.25]");  // det in [0.5, 1.5]
  EXPECT_TRUE(certify_nonsingular(A).nonsingular);
}

namespace {

// The skips-as-gauges note's MLP stacks (its notebook, Section 1): a linear embedding R^6 → R^d, L
// blocks σ(N(h) W_1) W_2 without attention, a linear readout R^d → R^6; one token per input.
Network mlp_stack(Mlp mlp, Skips skips, int layers = 3, int d = 4, int ffn = 8) {
  Network c;
  c.mixer = Mixer::none;
  c.mlp = mlp;
  c.skips = skips;
  c.layers = layers;
  c.d = d;
  c.ffn = ffn;
  c.seq = 1;
  c.embed = Embed::linear;
  c.din = 6;
  c.readout = Readout::linear;
  c.dout = 6;
  c.inputs = saturating_inputs(c);
  return c;
}

Count counted(Network c, bool certify = false) {
  c.inputs = saturating_inputs(c);
  return count(c, certify);
}

}  // namespace

// Corollary 3: without a norm a skipless tanh stack has one GL(d) per hidden state, (L + 1)·d² = 64,
// the residual one a single GL(d), d² = 16. Control (Lemma 9): biases add a translation at every
// hidden state a bias writes, (L + 1)·d = 16 with and without skips, not one per stream (d).
TEST(Fdim, MlpStacksMatchCorollary3AndLemma9) {
  const Count skipless = counted(mlp_stack(Mlp::tanh, Skips::none));
  const Count residual = counted(mlp_stack(Mlp::tanh, Skips::both));
  EXPECT_EQ(skipless.parameters, 240);
  EXPECT_EQ(deficiency(skipless), 64);
  EXPECT_EQ(deficiency(residual), 16);
  EXPECT_EQ(predicted_deficiency(skipless), 64);
  EXPECT_EQ(predicted_deficiency(residual), 16);
  for (Skips s : {Skips::none, Skips::both}) {
    Network c = mlp_stack(Mlp::tanh, s);
    c.bias = true;
    const Count biased = counted(c);
    EXPECT_EQ(deficiency(biased), (s == Skips::none ? 64 : 16) + 4 * 4);
    EXPECT_EQ(predicted_deficiency(biased), deficiency(biased));
  }
}

// Table 6 (degree-two blocks): ReLU² rescales each unit (s, s^-2), ReGLU each gate and each value:
// d² + L·m = 40 for ReLU²; d² + 2L·m = 64 and (L + 1)d² + 2L·m = 112 for ReGLU. Small ReLU² stacks
// are certified: residual d² + L·m, and one skipless block 2d² + m (the notebook's three-block skipless
// ReLU² stack has singular values near double's floor, Appendix E, and is not read here). Control:
// ReGLU's count exceeds ReLU²'s by exactly L·m, the value scalings.
TEST(Fdim, DegreeTwoBlocksMatchTable6) {
  EXPECT_EQ(deficiency(counted(mlp_stack(Mlp::relu2, Skips::both))), 40);
  const Count reglu = counted(mlp_stack(Mlp::reglu, Skips::both));
  EXPECT_EQ(reglu.parameters, 336);
  EXPECT_EQ(deficiency(reglu), 64);
  EXPECT_EQ(predicted_deficiency(reglu), 64);
  EXPECT_EQ(deficiency(counted(mlp_stack(Mlp::reglu, Skips::none))), 112);
  EXPECT_EQ(deficiency(reglu) - 40, 3 * 8);
  Network small = mlp_stack(Mlp::relu2, Skips::both, 2, 3, 4);
  small.din = small.dout = 3;
  const Count residual = counted(small, true);
  EXPECT_EQ(deficiency(residual), 9 + 2 * 4);
  EXPECT_TRUE(residual.certified);
  const Count one_block = counted(mlp_stack(Mlp::relu2, Skips::none, 1), true);  // the notebook's Section 9
  EXPECT_EQ(one_block.rank.rank, 72);
  EXPECT_EQ(deficiency(one_block), 2 * 16 + 8);
  EXPECT_TRUE(one_block.certified);
}

// Theorem 5 and Corollary 3 under RMSNorm: O(d) per hidden state at ε > 0 (24 skipless, 6 residual);
// at ε = 0 the norm is scale-invariant and each hidden state gains its scale (28, 7), certified on a
// small stack. Control: the same network at ε = 1e-2 is one dimension per hidden state below.
TEST(Fdim, RmsNormEpsilonDecidesTheScaleGauge) {
  for (Skips s : {Skips::none, Skips::both}) {
    Network c = mlp_stack(Mlp::tanh, s);
    c.norm = Norm::rmsnorm;
    c.norm_eps = 1e-2;
    const long long positive = deficiency(counted(c));
    c.norm_eps = 0;
    const Count zero = counted(c);
    EXPECT_EQ(positive, s == Skips::none ? 24 : 6);
    EXPECT_EQ(deficiency(zero), s == Skips::none ? 28 : 7);
    EXPECT_EQ(predicted_deficiency(zero), deficiency(zero));
  }
  Network small = mlp_stack(Mlp::tanh, Skips::none, 1, 3, 3);
  small.din = small.dout = 3;
  small.norm = Norm::rmsnorm;
  small.norm_eps = 0;
  const Count n = counted(small, true);
  EXPECT_EQ(deficiency(n), 2 * (3 + 1));
  EXPECT_TRUE(n.certified);
}

// Table 2 and Theorem 5: learned skips X A keep one GL(d) per hidden state (L + 1)·d² = 64, identity
// units X U V add a GL(d) inside each skip (112); under RMSNorm (ε = 1e-2) learned skips keep O(d)
// per hidden state (24). Control: the identity skip's network has L·d² = 48 fewer.
TEST(Fdim, LearnedSkipsMatchTable2AndTheorem5) {
  Network c = mlp_stack(Mlp::tanh, Skips::both);
  c.skip_kind = SkipKind::learned;
  const Count learned = counted(c);
  EXPECT_EQ(learned.parameters, 288);
  EXPECT_EQ(deficiency(learned), 64);
  EXPECT_EQ(deficiency(learned) - deficiency(counted(mlp_stack(Mlp::tanh, Skips::both))), 3 * 16);
  c.skip_kind = SkipKind::units;
  const Count units = counted(c);
  EXPECT_EQ(units.parameters, 336);
  EXPECT_EQ(deficiency(units), 112);
  EXPECT_EQ(predicted_deficiency(units), 112);
  c.skip_kind = SkipKind::learned;
  c.norm = Norm::rmsnorm;
  c.norm_eps = 1e-2;
  EXPECT_EQ(deficiency(counted(c)), 24);
}

// Section 4, low-rank skips X + X U V: d² + 2Ldr without a norm (40 at d = 4, r = 1), d(d−1)/2 +
// L·r(2r − 1) under RMSNorm (24 at r = 2). The part beyond U V's GL(r) is the note's formula, with
// no constructed directions: the upper bound certifies only P minus the constructed ones (control).
TEST(Fdim, LowRankSkipsMatchSection4) {
  Network c = mlp_stack(Mlp::tanh, Skips::both);
  c.skip_kind = SkipKind::lowrank;
  c.skip_rank = 1;
  const Count plain = counted(c);
  EXPECT_EQ(plain.parameters, 264);
  EXPECT_EQ(deficiency(plain), 40);
  EXPECT_EQ(predicted_deficiency(plain), 40);
  c.skip_rank = 2;
  c.norm = Norm::rmsnorm;
  c.norm_eps = 1e-2;
  const Count normed = counted(c);
  EXPECT_EQ(deficiency(normed), 24);
  EXPECT_EQ(predicted_deficiency(normed), 24);
  long long formula = 0;
  for (const Term& t : normed.predicted) formula += t.constructed ? 0 : t.dimension;
  EXPECT_EQ(formula, 3 * 2);
}

// Section 5, DyT reads γ ⊙ tanh(α h) + β: each hidden state keeps one scale (against α), each DyT its
// gain and offset against the next read: (L + 1)(1 + d) = 20 without skips, 1 + (L + 1)d = 17 with
// them; without γ, β: 4 and 1. Control: the skips remove exactly L = 3 in both.
TEST(Fdim, DytReadsMatchSection5) {
  for (bool affine : {true, false}) {
    Network c = mlp_stack(Mlp::tanh, Skips::none);
    c.norm = Norm::dyt;
    c.norm_gain = c.norm_bias = affine;
    const Count skipless = counted(c);
    c.skips = Skips::both;
    const Count residual = counted(c);
    EXPECT_EQ(skipless.parameters, affine ? 276 : 244);
    EXPECT_EQ(deficiency(skipless), affine ? 20 : 4);
    EXPECT_EQ(deficiency(residual), affine ? 17 : 1);
    EXPECT_EQ(predicted_deficiency(residual), deficiency(residual));
    EXPECT_EQ(deficiency(skipless) - deficiency(residual), 3);
  }
}

// --threads: the Jacobian's columns and the gauges' checks are split over workers, each column
// computed alone, so one and two workers give bit-identical counts (singular values, residuals).
// Control: another seed (a different point) changes the singular values.
TEST(Fdim, CountsAreIdenticalAtAnyThreadCount) {
  Network c = stack(1);
  c.mlp = Mlp::relu2;
  c.ffn = 4;
  c.inputs = 8;
  c.threads = 1;
  const Count one = count(c, true);
  c.threads = 2;
  const Count two = count(c, true);
  EXPECT_EQ(one.rank.rank, two.rank.rank);
  EXPECT_EQ(one.rank.around_cut, two.rank.around_cut);
  EXPECT_EQ(one.gauge_residual, two.gauge_residual);
  EXPECT_EQ(one.certified, two.certified);
  c.seed = 1;
  EXPECT_NE(count(c, false).rank.around_cut, one.rank.around_cut);
}

// Each new kind of network, small (d = 3, two blocks of width 3): the count equals the prediction and
// is certified, every constructed direction verified in MPFI (learned skips, identity units, RMSNorm
// and LayerNorm at ε = 0, gated MLPs, biases on a residual stack, DyT). Control: a low-rank skip's
// formula term has no directions, so its count stays uncertified with the upper bound P − constructed.
TEST(Fdim, NewKindsAreCertifiedAtSmallSizes) {
  auto small = [](Mlp mlp, Skips skips) {
    Network c = mlp_stack(mlp, skips, 2, 3, 3);
    c.din = c.dout = 3;
    c.inputs = 40;
    return c;
  };
  std::vector<Network> kinds;
  for (SkipKind k : {SkipKind::learned, SkipKind::units}) {
    kinds.push_back(small(Mlp::tanh, Skips::both));
    kinds.back().skip_kind = k;
  }
  kinds.push_back(kinds.front());
  kinds.back().norm = Norm::rmsnorm;
  kinds.back().norm_eps = 0;
  kinds.push_back(small(Mlp::gelu, Skips::both));
  kinds.back().norm = Norm::layernorm;
  kinds.back().norm_eps = 0;
  kinds.back().norm_gain = true;
  kinds.push_back(small(Mlp::swiglu, Skips::both));
  kinds.push_back(small(Mlp::glu, Skips::none));
  kinds.push_back(small(Mlp::tanh, Skips::both));
  kinds.back().bias = true;
  kinds.push_back(small(Mlp::tanh, Skips::none));
  kinds.back().norm = Norm::dyt;
  for (const Network& c : kinds) {
    const Count n = count(c, true);
    EXPECT_EQ(deficiency(n), predicted_deficiency(n));
    EXPECT_TRUE(n.certified);
    EXPECT_EQ(n.gauges_verified, deficiency(n));
  }
  Network lowrank = small(Mlp::tanh, Skips::both);
  lowrank.skip_kind = SkipKind::lowrank;
  const Count n = count(lowrank, true);
  EXPECT_EQ(deficiency(n), predicted_deficiency(n));
  EXPECT_FALSE(n.certified);
  EXPECT_TRUE(n.upper.holds);
  EXPECT_EQ(n.upper.value, n.parameters - n.gauges_verified);
  EXPECT_GT(n.upper.value, n.rank.rank);
}

namespace {

// max |J g| over the inputs of c at its point θ: the change of every output along the direction g
// (one forward pass at Dual<double> per input).
double moved(const Network& c, const Layout& L, const Point& p, const qkvlab::VecD& g) {
  qkvlab::Vec<Dual<double>> th(p.theta.size());
  for (Eigen::Index i = 0; i < th.size(); ++i) th[i] = Dual<double>(p.theta[i], g[i]);
  double m = 0;
  for (const Sequence& x : p.inputs) {
    const qkvlab::Mat<Dual<double>> y = forward<Dual<double>>(c, L, th, x);
    for (Eigen::Index i = 0; i < y.size(); ++i) m = std::max(m, std::abs(y.data()[i].d));
  }
  return m;
}

// Row `row` of tensor `id` + 1ᵀ (LayerNorm's centring of a writer's row).
qkvlab::VecD centring(const Layout& L, int id, int row) {
  qkvlab::VecD g = qkvlab::VecD::Zero(L.size);
  const Tensor& t = L.tensors[id];
  for (int j = 0; j < t.cols; ++j) g[t.offset + Eigen::Index(j) * t.rows + row] = 1;
  return g;
}

// The peak resident memory (KiB) of `program args...` run to its end (stderr dropped), and its exit status.
std::pair<long, int> peak_kib(std::vector<std::string> argv) {
  std::vector<char*> a;
  for (std::string& s : argv) a.push_back(s.data());
  a.push_back(nullptr);
  posix_spawn_file_actions_t quiet;
  posix_spawn_file_actions_init(&quiet);
  posix_spawn_file_actions_addopen(&quiet, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, a[0], &quiet, nullptr, a.data(), environ);
  posix_spawn_file_actions_destroy(&quiet);
  if (spawned != 0) return {-1, -1};
  int status = 0;
  rusage u{};
  if (wait4(pid, &status, 0, &u) != pid) return {-1, -1};
  return {u.ru_maxrss, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

}  // namespace

// At ε = 0 a norm that reads an all-zero row returns 0/0: here LayerNorm at d = 1 (x − mean(x) = 0)
// and RMSNorm after a ReLU unit that is dead on an input. A NaN Jacobian has no rank: count() throws a
// NumericalError naming it and `qkvlab fdim` exits 3 with one line. Control: at ε > 0 both count.
TEST(Fdim, NonFiniteJacobianIsANumericalFailure) {
  Network ln = bare(1, 1, 1);
  ln.layers = 1;
  ln.norm = Norm::layernorm;
  Network rms = mlp_stack(Mlp::relu, Skips::none, 1, 3, 1);
  rms.embed = Embed::none;
  rms.dout = 3;
  rms.norm = Norm::rmsnorm;
  rms.inputs = 20;
  for (Network c : {ln, rms}) {
    c.norm_eps = 0;
    try {
      count(c, false);
      ADD_FAILURE() << "no NumericalError at eps = 0";
    } catch (const qkvlab::NumericalError& e) {
      EXPECT_NE(std::string(e.what()).find("the Jacobian is not finite"), std::string::npos) << e.what();
    }
    c.norm_eps = 1e-5;
    const Count n = count(c, false);
    EXPECT_GE(n.rank.rank, 0);
    EXPECT_TRUE(std::isfinite(n.rank.tolerance));
  }
  const std::string args = "fdim --no-certify --quiet --d 1 --heads 1 --head-dim 1 --norm layernorm --norm-eps ";
  const auto bad = run_qkvlab(args + "0");
  EXPECT_EQ(bad.status, 3) << bad.err;
  EXPECT_EQ(lines(bad.err), 1) << bad.err;
  EXPECT_NE(bad.err.find("qkvlab: error: fdim: the Jacobian is not finite"), std::string::npos) << bad.err;
  EXPECT_TRUE(bad.out.empty()) << bad.out;
  EXPECT_EQ(run_qkvlab(args + "1e-5").status, 0);
}

// d = 1 through LayerNorm: N(X) = 0, so the layer's 4 parameters are all dead, and the theory's 5
// directions (Lemma 3.1's two, the readers' three zero means) are more than P: they span 4, the
// deficiency the count predicts (a term of −1 says so) and certifies (rank 0 = P − 4). Control: the
// sum of the groups' dimensions alone, 5, exceeds P.
TEST(Fdim, DependentGaugeDirectionsCountTheirSpan) {
  Network c = bare(1, 1, 1);
  c.layers = 1;
  c.norm = Norm::layernorm;
  const Count n = count(c, true);
  EXPECT_EQ(n.parameters, 4);
  EXPECT_EQ(n.rank.rank, 0);
  EXPECT_EQ(predicted_deficiency(n), 4);
  EXPECT_EQ(predicted_deficiency(c), 4);
  EXPECT_TRUE(n.certified);
  EXPECT_EQ(n.upper.value, 0);
  EXPECT_EQ(n.gauges_verified, 5);
  ASSERT_FALSE(n.predicted.empty());
  EXPECT_EQ(n.predicted.back().dimension, -1);
  EXPECT_EQ(predicted_deficiency(n) - n.predicted.back().dimension, 5);
}

namespace {

// One block (d = 4, H = 2, d_h = 2, T = 3) read by pre-LayerNorm, the input end the inputs themselves.
Network layernorm_block() {
  Network c = bare(4, 2, 2);
  c.layers = 1;
  c.norm = Norm::layernorm;
  c.readout = Readout::linear;
  c.inputs = 20;
  return c;
}

}  // namespace

// LayerNorm's centring on a stream whose basis is pinned (the input itself) or tied to the readout:
// a writer's row + t·1 is removed by every reader when every reader reads through a LayerNorm (a tied
// readout N_f(X) Eᵀ too, without a final gain: N_f(X) 1 = 0). The count predicts those rows (W_O's 4,
// W_2's 3, E's 9) and certifies them. Control: J g = 0 for W_O's centring where a LayerNorm reads the
// stream, but not where the stream is the output (--readout none) or RMSNorm reads it.
TEST(Fdim, LayerNormCentringOfPinnedAndTiedStreams) {
  std::vector<Network> nets(4, layernorm_block());
  nets[1].norm_gain = true;
  nets[2].mlp = Mlp::tanh;
  nets[2].ffn = 3;
  nets[2].inputs = 24;
  nets[3].embed = Embed::tokens;
  nets[3].vocab = 9;
  nets[3].readout = Readout::tied;
  nets[3].inputs = 50;
  for (const Network& c : nets) {
    const Count n = count(c, true);
    EXPECT_EQ(deficiency(n), predicted_deficiency(n));
    EXPECT_TRUE(n.certified) << n.upper.reason << n.lower.reason;
  }
  EXPECT_EQ(predicted_deficiency(nets[0]), 36);
  EXPECT_EQ(predicted_deficiency(nets[2]), 42);
  auto residual = [](Network c) {
    const Layout L = layout(c);
    return moved(c, L, draw_point(c, L), centring(L, L.layers[0].W_O[0], 0));
  };
  EXPECT_LT(residual(nets[0]), 1e-12);
  Network output = nets[0];
  output.readout = Readout::none;
  EXPECT_GT(residual(output), 1e-3);
  EXPECT_EQ(deficiency(count(output, false)), predicted_deficiency(output));
  Network rms = nets[0];
  rms.norm = Norm::rmsnorm;
  EXPECT_GT(residual(rms), 1e-3);
}

// Translations with W_Q = I and biases: a bias's shift u reaches a W_Q = I layer's queries unabsorbed
// (the logits gain u_h·k_j), so the shifts written before it cancel there: d per writing bias, less d
// per such layer (and per output end) with a bias written before it since the last. The counts equal
// the prediction; certified where small. Control: e's translation absorbed by the later readers' biases
// moves the output where layer 1 reads with W_Q = I, and not with free queries.
TEST(Fdim, TranslationsCancelWhereIdentityQueriesRead) {
  Network c = stack(1);
  c.bias = true;
  c.inputs = 20;
  c.identity_layers = {1};
  const Count one = count(c, true);
  EXPECT_EQ(deficiency(one), 28);
  EXPECT_EQ(predicted_deficiency(one), 28);
  EXPECT_TRUE(one.certified) << one.upper.reason;
  for (std::vector<int> layers : {std::vector<int>{1, 2}, {1}, {2}}) {
    Network two = stack(2);
    two.bias = true;
    two.inputs = 40;
    two.identity_layers = layers;
    const Count n = count(two, false);
    EXPECT_EQ(deficiency(n), predicted_deficiency(n));
    EXPECT_EQ(deficiency(n), layers.size() == 2 ? 44 : 56);
  }
  Network output = bare(4, 2, 2);  // the output end: b_O1's shift against b_O2's
  output.layers = 2;
  output.bias = true;
  output.inputs = 20;
  const Count out = count(output, true);
  EXPECT_EQ(deficiency(out), 52);
  EXPECT_EQ(predicted_deficiency(out), 52);
  EXPECT_TRUE(out.certified) << out.upper.reason;
  auto residual = [](Network c) {  // e + e_1 on every row, b ↦ b − row 1 of W for every reader
    const Layout L = layout(c);
    const Point p = draw_point(c, L);
    qkvlab::VecD g = qkvlab::VecD::Zero(L.size);
    auto shift = [&](int bias, int W) {
      const Tensor& b = L.tensors[bias];
      for (int j = 0; j < b.cols; ++j)
        g[b.offset + Eigen::Index(j) * b.rows] += W >= 0 ? -tensor<double>(L, p.theta, W)(0, j) : j == 0 ? 1.0 : 0.0;
    };
    shift(L.embed_bias, -1);
    const LayerTensors& t = L.layers[0];
    for (int h = 0; h < c.heads; ++h) {
      if (!t.W_Q.empty()) shift(t.b_Q[h], t.W_Q[h]);
      shift(t.b_K[h], t.W_K[h]);
      shift(t.b_V[h], t.W_V[h]);
    }
    shift(L.readout_bias, L.readout);
    return moved(c, L, p, g);
  };
  Network free = stack(1);
  free.bias = true;
  EXPECT_LT(residual(free), 1e-12);
  Network identity = free;
  identity.identity_layers = {1};
  EXPECT_GT(residual(identity), 1e-3);
}

// The memory check comes before the inputs are drawn: 5,000,000 inputs (a 164 GB Jacobian) are
// refused (exit 2) at the program's baseline memory. Control: the refusal names the Jacobian's size.
TEST(Fdim, MemoryIsCheckedBeforeTheInputsAreDrawn) {
  const auto [kib, status] = peak_kib({QKVLAB_BINARY, "fdim", "--no-certify", "--quiet", "--inputs", "5000000"});
  EXPECT_EQ(status, 2);
  EXPECT_GT(kib, 0);
  EXPECT_LT(kib, 200 * 1024);  // the inputs alone are 5e6 · 4 · 4 doubles, 640 MB (and their vectors' overhead)
  const auto r = run_qkvlab("fdim --no-certify --quiet --inputs 5000000");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("GB"), std::string::npos) << r.err;
}

// An option the network would not use is refused in one line, exit 2, as --skip-rank without lowrank
// is (review r10: --query identity at --layers 0 ran and reported "query free"; --vocab, --din and
// --causal without what they size or mask were ignored). Control: each with what it needs counts.
TEST(Fdim, OptionsTheNetworkWouldNotUseAreRefused) {
  const std::string base = "fdim --no-certify --quiet --d 4 --seq 3 --inputs 4 ";
  const std::pair<std::string, std::string> refused[] = {
      {"--layers 0 --query identity", "--query identity needs attention"},
      {"--layers 1 --mixer none --mlp tanh --causal", "--causal needs attention"},
      {"--layers 0 --causal", "--causal needs attention"},
      {"--layers 0 --vocab 3 --embed linear", "--vocab needs --embed tokens"},
      {"--layers 0 --din 3", "--din needs --embed linear"},
      {"--layers 0 --dout 3", "--dout needs --readout linear"},
      {"--layers 1 --ffn 3", "--ffn needs an --mlp"},
      {"--layers 1 --skip-rank 1", "--skip-rank needs --skip-kind lowrank"},
      {"--layers 0 --mlp relu --ffn 4 --embed linear --din 3", "--ffn needs an --mlp in a block"},
      {"--layers 0 --heads 2 --embed linear --din 3", "--heads needs attention"},
      {"--layers 1 --mixer none --mlp tanh --head-dim 2", "--head-dim needs attention"},
  };
  for (const auto& [args, message] : refused) {
    SCOPED_TRACE(args);
    const auto r = run_qkvlab(base + args);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  for (const std::string args : {"--layers 1 --query identity", "--layers 1 --causal", "--layers 0 --vocab 3 --embed tokens",
                                 "--layers 0 --din 3 --embed linear", "--layers 0 --dout 3 --readout linear",
                                 "--layers 1 --ffn 3 --mlp tanh", "--layers 1 --heads 2 --head-dim 2"}) {
    const auto r = run_qkvlab(base + args + " --format json");
    EXPECT_EQ(r.status, 0) << args << ": " << r.err;
  }
  const auto identity = run_qkvlab(base + "--layers 1 --query identity --format json");
  EXPECT_NE(identity.out.find("\"query\": \"identity\""), std::string::npos) << identity.out.substr(0, 400);
}

// parameter_count, the closed form the memory check reads before anything is built, is layout's
// size on every kind of part (ends, norms, MLPs, gates, learned skips, biases, W_Q = I layers).
// Control: it tells a configuration from one with a part more (the comparison can fail).
TEST(Fdim, ParameterCountInClosedFormIsTheLayoutsSize) {
  int compared = 0;
  for (int layers : {0, 1, 2})
    for (Mlp mlp : {Mlp::none, Mlp::tanh, Mlp::reglu})
      for (SkipKind kind : {SkipKind::identity, SkipKind::learned, SkipKind::units, SkipKind::lowrank})
        for (Norm norm : {Norm::none, Norm::layernorm, Norm::rmsnorm, Norm::dyt})
          for (Embed embed : {Embed::none, Embed::tokens, Embed::linear})
            for (Readout readout : {Readout::none, Readout::tied, Readout::linear})
              for (int flags = 0; flags < 16; ++flags) {
                Network c = stack(layers);
                c.mlp = mlp, c.ffn = 3, c.skip_kind = kind, c.skip_rank = 2, c.norm = norm, c.embed = embed;
                c.readout = readout, c.vocab = 5, c.din = 3, c.dout = 2, c.bias = flags & 1, c.pos_emb = flags & 2;
                c.norm_gain = (flags & 4) && norm != Norm::none, c.norm_bias = (flags & 4) && norm == Norm::dyt;
                if ((flags & 8) && layers > 0) c.identity_layers = {1};
                c.mixer = mlp != Mlp::none && (flags & 8) && c.identity_layers.empty() ? Mixer::none : Mixer::attention;
                try {
                  validate(c);
                } catch (const qkvlab::UsageError&) {
                  continue;
                }
                ++compared;
                EXPECT_EQ(parameter_count(c), double(layout(c).size)) << compared;
                Network more = c;
                more.pos_emb = !c.pos_emb;
                EXPECT_NE(parameter_count(c), double(layout(more).size)) << compared;
              }
  EXPECT_GT(compared, 1000);
}

// A network too large to count is refused before its layout (a tensor per head) is built (review
// r23: --heads 3000000 --head-dim 1 built 1.1 GB of tensors before the memory check; --heads and
// --head-dim 2147483647 grew past 7.8 GB): exit 2 with one line at the program's baseline memory,
// also under a 2 GB address-space bound. Control: 3 heads count.
TEST(Fdim, HugeHeadCountsAreRefusedBeforeAnythingIsBuilt) {
  const auto [kib, status] =
      peak_kib({QKVLAB_BINARY, "fdim", "--no-certify", "--quiet", "--heads", "3000000", "--head-dim", "1"});
  EXPECT_EQ(status, 2);
  EXPECT_GT(kib, 0);
  EXPECT_LT(kib, 200 * 1024);
  for (const std::string heads : {"3000000 --head-dim 1", "2147483647 --head-dim 2147483647"}) {
    const auto r = qkvlab::test_support::run_command("ulimit -v 2000000; timeout -s KILL 60 " +
                                                     qkvlab::test_support::shell_quoted(QKVLAB_BINARY) +
                                                     " fdim --no-certify --quiet --threads 1 --heads " + heads);
    EXPECT_EQ(r.status, 2) << heads << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("GB"), std::string::npos) << r.err;
  }
  EXPECT_EQ(run_qkvlab("fdim --no-certify --quiet --heads 3 --head-dim 1").status, 0);
}

// At rank 0 there is no s_r: the ratios at the cut are undefined, null in the report, not 0 (review
// r23: LayerNorm at d = 1, whose Jacobian is exactly 0, reported 0); an empty J has no tolerance
// either. Control: at rank 1 they are numbers (s_r/s_1 = 1), and at full rank s_r/s_r+1 is infinite.
TEST(Fdim, RankZeroHasNoRatiosAtTheCut) {
  const FloatRank zero = float_rank(qkvlab::MatD::Zero(6, 4));
  EXPECT_EQ(zero.rank, 0);
  EXPECT_EQ(zero.tolerance, 0);
  EXPECT_TRUE(std::isnan(zero.gap) && std::isnan(zero.relative) && std::isnan(zero.over_tolerance));
  EXPECT_TRUE(std::isnan(float_rank(qkvlab::MatD(3, 0)).tolerance));
  qkvlab::MatD one = qkvlab::MatD::Zero(6, 4);
  one(0, 0) = 2;
  const FloatRank r1 = float_rank(one);
  EXPECT_EQ(r1.rank, 1);
  EXPECT_EQ(r1.relative, 1);
  EXPECT_TRUE(std::isinf(r1.gap));
  EXPECT_GT(r1.over_tolerance, 1);
  const auto r = run_qkvlab("fdim --quiet --d 1 --heads 1 --head-dim 1 --norm layernorm --seq 3 --inputs 6 --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"rank\": 0,"), std::string::npos) << r.out;
  for (const char* field : {"s_r_over_s_r1", "s_r_over_s_1", "s_r_over_tolerance"})
    EXPECT_NE(r.out.find("\"" + std::string(field) + "\": null"), std::string::npos) << field << ": " << r.out;
  const auto control = run_qkvlab("fdim --quiet --no-certify --d 2 --heads 1 --head-dim 2 --seq 3 --format json");
  ASSERT_EQ(control.status, 0) << control.err;
  EXPECT_EQ(control.out.find("\"s_r_over_s_1\": null"), std::string::npos) << control.out;
}

// At --layers 0 (the ends alone) the blocks' options are refused, not echoed (review r23: --mlp,
// --norm, --bias, --skips, --skip-kind were accepted and listed in `config`); `config` shows null
// for what does not apply. Controls: a final norm before a readout, a bias on a linear end and the
// blocks' options at --layers 1 count, and `config` shows the sizes that apply.
TEST(Fdim, TheEndsAloneRefuseTheBlocksOptionsAndEchoOnlyWhatApplies) {
  const std::string base = "fdim --no-certify --quiet --d 4 --seq 3 --inputs 4 --layers 0 ";
  for (const auto& [args, option] : std::vector<std::pair<std::string, std::string>>{
           {"--mlp relu", "--mlp"}, {"--norm layernorm", "--norm"}, {"--norm layernorm --norm-eps 0.1", "--norm"},
           {"--norm dyt --norm-gain", "--norm"}, {"--norm-gain", "--norm-gain"}, {"--bias", "--bias"},
           {"--skips none", "--skips"}, {"--skip-kind learned", "--skip-kind"}, {"--mixer none", "--mixer"}}) {
    const auto r = run_qkvlab(base + args);
    qkvlab::test_support::expect_usage_error(r, args, option + " needs a block (--layers >= 1)");
  }
  for (const std::string args : {"--norm layernorm --norm-eps 0.1 --readout linear --dout 3", "--bias --embed linear --din 3",
                                 "--norm dyt --norm-gain --norm-bias --embed tokens --readout tied"}) {
    const auto r = run_qkvlab(base + args);
    EXPECT_EQ(r.status, 0) << args << ": " << r.err;
  }
  const auto ends = run_qkvlab(base + "--embed linear --din 3 --format json");
  ASSERT_EQ(ends.status, 0) << ends.err;
  for (const char* field : {"heads", "head_dim", "mixer", "skips", "skip_kind", "skip_rank", "ffn", "vocab", "dout", "norm_eps"})
    EXPECT_NE(ends.out.find("\"" + std::string(field) + "\": null"), std::string::npos) << field;
  EXPECT_NE(ends.out.find("\"din\": 3"), std::string::npos) << ends.out;
  const auto block = run_qkvlab(
      "fdim --no-certify --quiet --d 4 --seq 3 --inputs 4 --layers 1 --mlp tanh --ffn 3 --skip-kind lowrank --skip-rank 2 "
      "--norm rmsnorm --norm-eps 0.5 --embed tokens --vocab 5 --readout linear --dout 2 --heads 2 --head-dim 2 --format json");
  ASSERT_EQ(block.status, 0) << block.err;
  for (const char* field : {"\"heads\": 2", "\"head_dim\": 2", "\"mixer\": \"attention\"", "\"skips\": \"both\"",
                            "\"skip_kind\": \"lowrank\"", "\"skip_rank\": 2", "\"ffn\": 3", "\"vocab\": 5", "\"din\": null",
                            "\"dout\": 2", "\"norm_eps\": 0.5"})
    EXPECT_NE(block.out.find(field), std::string::npos) << field << ": " << block.out;
}
