// The head-wise freedoms of Query-weight elimination beyond plain multi-head attention (docs/math/extensions.md):
// qwe.freedom.vo (the W_V/W_O analogue of Prop. 4.2 that §4.1.2 conjectures), and §6's
// extensions to RoPE (qwe.ext.rope), grouped-query attention (qwe.ext.gqa) and QK-norm
// (qwe.ext.qknorm). Row-vector convention. What is measured is theory/attention_freedoms.hpp's,
// a function of weights and inputs; this file draws them and builds the controls.
#include "theory/attention_freedoms.hpp"
#include "theory/claims.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace qkvlab::theory {
namespace {

template <class S> Mat<S> draw_input(Rng& rng, const SweepPoint& c) { return draw<S>(rng, c.seq, c.d, 1.0); }

// W_Q, W_O d×d; W_K, W_V d × H_kv d_h; entries N(0, 1/d).
template <class S> GroupedAttention<S> random_grouped(Rng& rng, const SweepPoint& c, int kv_heads) {
  const double sd = 1.0 / std::sqrt(double(c.d));
  const Eigen::Index kv_width = Eigen::Index(c.d / c.heads) * kv_heads;
  GroupedAttention<S> w;
  w.W_Q = draw<S>(rng, c.d, c.d, sd);
  w.W_K = draw<S>(rng, c.d, kv_width, sd);
  w.W_V = draw<S>(rng, c.d, kv_width, sd);
  w.W_O = draw<S>(rng, c.d, c.d, sd);
  w.heads = c.heads;
  w.kv_heads = kv_heads;
  return w;
}

// `count` Gaussian d_h×d_h blocks (Prop. 4.2's), drawn as random_basis draws them.
template <class S> std::vector<Mat<S>> random_blocks(Rng& rng, int count, Eigen::Index dh) {
  std::vector<Mat<S>> blocks;
  for (int g = 0; g < count; ++g) blocks.push_back(cast<S>(draw_basis(rng, dh, 1.0 / std::sqrt(double(dh)))));
  return blocks;
}

// The blocks as changes of basis with their κ (for an identity: its error is normalized by κ).
template <class S> std::vector<ChangeOfBasis<S>> bases_of(const std::vector<Mat<S>>& blocks) {
  std::vector<ChangeOfBasis<S>> bases;
  for (const auto& b : blocks) bases.push_back(change_of_basis<S>(b));
  return bases;
}

// The blocks with their inverses only (for a control, whose error is not normalized: κ's power
// iterations cost most of a check at 50 digits).
template <class S> std::vector<ChangeOfBasis<S>> inverted(const std::vector<Mat<S>>& blocks) {
  std::vector<ChangeOfBasis<S>> bases(blocks.size());
  for (std::size_t g = 0; g < blocks.size(); ++g) bases[g].T = blocks[g], bases[g].T_inv = blocks[g].inverse();
  return bases;
}

void take_worst(Outcome& o, const Deviation& d) {
  o.rel_err = std::max(o.rel_err, d.rel_err);
  o.kappa = std::max(o.kappa, d.kappa);
  o.singular = o.singular || d.singular;
}

// The identity of every extension claim: the QK freedom M (the claim's own), and the two that
// survive every extension unchanged: the VO freedom (random N_g, values carry neither RoPE nor
// QK-norm) and Lemma 3.1 (random T, acting before the projections).
template <class S>
Outcome surviving_freedoms(Rng& rng, const AttentionProbe<S>& p, const std::vector<ChangeOfBasis<S>>& M) {
  Outcome o;
  take_worst(o, qk_freedom_deviation<S>(p, M));
  take_worst(o, vo_freedom_deviation<S>(p, bases_of<S>(random_blocks<S>(rng, p.w.kv_heads, p.w.head_dim()))));
  take_worst(o, input_basis_deviation<S>(p, random_basis<S>(rng, p.X.cols())));
  return o;
}

// A control: out(X; w_new) must differ from out(X; w).
template <class S> ControlOutcome changed(std::string name, const AttentionProbe<S>& p, const GroupedAttention<S>& w_new) {
  return control_by_error(std::move(name), output_deviation<S>(p, p.X, w_new, {}).rel_err);
}

// The probe of the controls that change only the scores: control_input's positions (claim.hpp), X
// itself from n = 8, below that a fresh draw of 8 (at n = 2 such a control changes one softmax row,
// and passed by chance).
template <class S> AttentionProbe<S> control_probe(Rng& rng, const SweepPoint& c, const AttentionProbe<S>& p) {
  return AttentionProbe<S>(control_input<S>(rng, c, p.X), p.w, p.mask);
}

// A control that changes only the scores, on the control probe pc: out(X; w_new) must differ from out(X; w).
template <class S>
ControlOutcome scores_changed(std::string name, const AttentionProbe<S>& pc, const SweepPoint& c,
                              const GroupedAttention<S>& w_new) {
  return on_control_input(changed<S>(std::move(name), pc, w_new), c);
}

// A control: M_h (one block per key head) applied as the claim's freedom must change out(X; w), on pc.
template <class S>
ControlOutcome qk_control(std::string name, const AttentionProbe<S>& pc, const SweepPoint& c,
                          const std::vector<Mat<S>>& M) {
  return scores_changed<S>(std::move(name), pc, c, with_qk_freedom<S>(pc.w, inverted<S>(M)));
}

// The controls' wrong blocks: gains on [2, 8] (non_orthogonal_factor, claim.hpp), so ‖(G − I) y‖ ≥ ‖y‖
// and G is no scaled orthogonal or complex scaling (its gains are distinct): a Gaussian block lies near
// the identity, or near the claim's freedom, by chance (at d_h = 1 it is one number near 1).
template <class S> std::vector<Mat<S>> gain_blocks(Rng& rng, int count, Eigen::Index dh) {
  std::vector<Mat<S>> blocks;
  for (int g = 0; g < count; ++g) blocks.push_back(non_orthogonal_factor<S>(rng, int(dh)));
  return blocks;
}

template <class S> Mat<S> haar_orthogonal(Rng& rng, Eigen::Index m) {
  return orthogonal_factor<S>(draw<S>(rng, m, m, 1.0));
}

// A block whose contragredient is minus its inverse on every coordinate pair: N = Q J Q^T with Q Haar and J
// a quarter turn of each pair (2i, 2i + 1) (a fixed last coordinate when d_h is odd). N is orthogonal, so
// N^-T = N and N N^-T = Q J^2 Q^T = -I on the pairs: the N^-T control changes the output by construction
// (a Gaussian N_h is nearly symmetric, N N^-T near I, by chance: at d_h = 2 its antisymmetric part is one
// number, and the control's rel_err fell to 8.4e-4 in 600 draws at d = 2, n = 2).
template <class S> Mat<S> quarter_turn(Rng& rng, Eigen::Index dh) {
  Mat<S> J = Mat<S>::Identity(dh, dh);
  for (Eigen::Index i = 0; i + 1 < dh; i += 2) J.block(i, i, 2, 2) << S(0), S(-1), S(1), S(0);
  const Mat<S> Q = haar_orthogonal<S>(rng, dh);
  return Q * J * Q.transpose();
}

// qwe.freedom.vo: MHA(X; W_V N, N⁻¹ W_O) = MHA(X; W) and SA(X; W_V N) = SA(X) N for
// block-diagonal N = diag(N_1, …, N_H).
struct FreedomVO {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    const auto w = random_grouped<S>(rng, c, c.heads);
    const Mat<S> X = draw_input<S>(rng, c);
    const AttentionProbe<S> p(X, w, c.mask);
    const auto N = bases_of<S>(random_blocks<S>(rng, c.heads, w.head_dim()));
    Outcome o;
    take_worst(o, vo_freedom_deviation<S>(p, N));
    auto sa = w;  // SA(X) = MHA(X) with W_O = I
    sa.W_O = Mat<S>::Identity(c.d, c.d);
    auto sa_N = with_vo_freedom<S>(sa, N);
    sa_N.W_O = sa.W_O;
    std::vector<Mat<S>> blocks;
    for (const auto& b : N) blocks.push_back(b.T);
    const Mat<S> N_full = block_diagonal<S>(blocks);
    o.rel_err = std::max(o.rel_err, rel_err<S>(Mat<S>(grouped_attention<S>(X, sa, c.mask) * N_full),
                                               grouped_attention<S>(X, sa_N, c.mask)));
    auto only_values = w;
    only_values.W_V = w.W_V * N_full;
    o.controls.push_back(changed<S>("N applied to W_V only", p, only_values));
    std::vector<Mat<S>> turns;
    for (int h = 0; h < c.heads; ++h) turns.push_back(quarter_turn<S>(rng, w.head_dim()));
    const Mat<S> turn_full = block_diagonal<S>(turns);
    auto contragredient = w;  // W_V^h N_h, W_O^h ↦ N_h⁻ᵀ W_O^h = N_h W_O^h: the QK pair's rule in place of N⁻¹
    contragredient.W_V = w.W_V * turn_full;
    contragredient.W_O = turn_full * w.W_O;
    o.controls.push_back(changed<S>("N^-T (Prop. 4.2's contragredient) in place of N^-1 on W_O", p, contragredient));
    if (c.heads > 1) {
      // Heads with equal attention would not see N's off-diagonal blocks (sum_h N_:h (N^-1)_h: = I): the
      // control acts through the heads' score differences, so it runs on the control probe.
      const AttentionProbe<S> pc = control_probe<S>(rng, c, p);
      const auto full = inverted<S>(random_blocks<S>(rng, 1, c.d)).front();
      auto mixed = w;
      mixed.W_V = w.W_V * full.T;
      mixed.W_O = full.T_inv * w.W_O;
      o.controls.push_back(scores_changed<S>("full (not block-diagonal) N", pc, c, mixed));
    }
    return o;
  }
};

// qwe.ext.rope: M_h commuting with every rotation of the RoPE table: complex scalings per
// frequency pair (θ = 1e4, distinct frequencies), a complex-linear map of all pairs (θ = 1,
// every frequency equal).
template <class S> Mat<S> rope_commutant(Rng& rng, Eigen::Index dh, bool coinciding) {
  const Eigen::Index m = dh / 2;
  if (!coinciding) {
    const Mat<S> a = draw<S>(rng, m, 1, 1.0), b = draw<S>(rng, m, 1, 1.0);
    return complex_linear<S>(Mat<S>(a.col(0).asDiagonal()), Mat<S>(b.col(0).asDiagonal()));
  }
  const double sd = 1.0 / std::sqrt(double(dh));
  const Mat<S> A = draw<S>(rng, m, m, sd), B = draw<S>(rng, m, m, sd);
  return complex_linear<S>(A, B);
}

// A complex scaling of GPT-J's interleaved pairs (2i, 2i + 1), which rotate_half does not rotate together.
template <class S> Mat<S> interleaved_scaling(Rng& rng, Eigen::Index dh) {
  Mat<S> M = Mat<S>::Zero(dh, dh);
  for (Eigen::Index i = 0; i + 1 < dh; i += 2) {
    const Mat<S> ab = draw<S>(rng, 2, 1, 1.0);
    M.block(i, i, 2, 2) << ab(0), ab(1), -ab(1), ab(0);
  }
  return M;
}

struct ExtRope {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    auto w = random_grouped<S>(rng, c, c.heads);
    const Eigen::Index dh = w.head_dim();
    if (dh % 2 != 0) throw std::invalid_argument("RoPE needs an even head width d_h, got " + std::to_string(dh));
    const bool coinciding = c.variant.rope_theta == 1;
    w.rope = rope_frequencies(dh, c.variant.rope_theta);
    const AttentionProbe<S> p(draw_input<S>(rng, c), w, c.mask);
    std::vector<Mat<S>> blocks;
    for (int h = 0; h < c.heads; ++h) blocks.push_back(rope_commutant<S>(rng, dh, coinciding));
    Outcome o = surviving_freedoms<S>(rng, p, bases_of<S>(blocks));

    const AttentionProbe<S> pc = control_probe<S>(rng, c, p);
    o.controls.push_back(
        qk_control<S>("generic M_h (Prop. 4.2's freedom without RoPE)", pc, c, gain_blocks<S>(rng, c.heads, dh)));
    if (dh == 2) return o;  // one pair: each control below would be a complex scaling of it
    if (coinciding) {
      auto distinct = w;
      distinct.rope = rope_frequencies(dh, 1e4);
      o.controls.push_back(qk_control<S>("this complex-linear M under distinct frequencies (theta = 1e4)",
                                         AttentionProbe<S>(pc.X, distinct, c.mask), c, blocks));
      return o;
    }
    std::vector<Mat<S>> interleaved, full;
    for (int h = 0; h < c.heads; ++h) interleaved.push_back(interleaved_scaling<S>(rng, dh));
    for (int h = 0; h < c.heads; ++h) full.push_back(rope_commutant<S>(rng, dh, true));
    o.controls.push_back(
        qk_control<S>("complex scalings of GPT-J's interleaved pairs (2i, 2i+1)", pc, c, interleaved));
    o.controls.push_back(qk_control<S>("complex-linear M mixing pairs of distinct frequencies", pc, c, full));
    return o;
  }
};

std::vector<PointVariant> rope_thetas(const SweepPoint&) {
  return {{.label = "theta=1e4", .rope_theta = 1e4}, {.label = "theta=1", .rope_theta = 1}};
}

// qwe.ext.gqa: one M_g (and N_g) per key/value head, shared by the query heads of its group.
struct ExtGqa {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    const int kv = c.variant.kv_heads;
    const auto w = random_grouped<S>(rng, c, kv);
    const Eigen::Index dh = w.head_dim();
    const AttentionProbe<S> p(draw_input<S>(rng, c), w, c.mask);
    const auto M = bases_of<S>(random_blocks<S>(rng, kv, dh));
    Outcome o = surviving_freedoms<S>(rng, p, M);

    // The controls' M_g, N_g are gain blocks G_g: each changes what it touches by at least its input.
    const AttentionProbe<S> pc = control_probe<S>(rng, c, p);
    const auto G = inverted<S>(gain_blocks<S>(rng, kv, dh));
    auto queries_only = with_qk_freedom<S>(w, G);  // scores change by X W_Q^h (G_g - I) W_K^gT X^T
    queries_only.W_K = w.W_K;
    o.controls.push_back(scores_changed<S>("M_g on the queries only (W_K^g unchanged)", pc, c, queries_only));
    const int group = c.heads / kv;
    if (group < 2) return o;
    const Eigen::Index last = Eigen::Index(group - 1) * dh;  // the last query head of group 0
    auto split = with_qk_freedom<S>(w, M);  // that head's M is G_0 M_0: its scores change by W_Q^h (G_0 - I) W_K^0T
    split.W_Q.middleCols(last, dh) = w.W_Q.middleCols(last, dh) * G.front().T * M.front().T;
    o.controls.push_back(scores_changed<S>("a different M for one query head of the group", pc, c, split));
    auto one_output = with_vo_freedom<S>(w, G);  // that head's output is multiplied by G_0, not I
    one_output.W_O.middleRows(last, dh) = w.W_O.middleRows(last, dh);
    o.controls.push_back(changed<S>("N_g^-1 left off one query head's rows of W_O", p, one_output));
    return o;
  }
};

// Key/value head counts H_kv < H dividing H (multi-query attention, H_kv = 1, always); H = 1: H_kv = 1.
std::vector<PointVariant> kv_head_counts(const SweepPoint& c) {
  std::vector<PointVariant> v;
  for (int kv = 1; kv < std::max(c.heads, 2); ++kv)
    if (c.heads % kv == 0) v.push_back({.label = "kv=" + std::to_string(kv), .kv_heads = kv});
  return v;
}

// qwe.ext.qknorm: per-head RMSNorm on queries and keys with gains γ_Q, γ_K whose product takes
// one value on the first ⌈d_h/2⌉ coordinates of a head and another on the rest (γ_Q alone
// distinct); M_h = diag(O_1, O_2), orthogonal at the working precision.
// exp(0.3 g) entrywise, g ~ N(0, 1), drawn in double.
template <class S> Vec<S> random_gains(Rng& rng, Eigen::Index n) {
  return cast<S>(MatD(rng.gaussian(n, 1, 0.3).array().exp())).col(0);
}

// The product's two levels per head, c_1 = exp(0.3 g_1) and c_2 = c_1 exp(0.3 g_2 ± 0.3) (the sign of
// g_2): at least a factor e^0.3 apart, so that the control's orthogonal M_h, which mixes them, changes
// the scores by a margin. Levels drawn independently can nearly coincide, and the control then cannot fail.
template <class S> Vec<S> gains_with_product(Rng& rng, const Vec<S>& q_gain, int heads, Eigen::Index dh) {
  Vec<S> k_gain(q_gain.size());
  const Eigen::Index first = (dh + 1) / 2;
  for (int h = 0; h < heads; ++h) {
    const MatD g = rng.gaussian(2, 1, 0.3);
    const double c1 = std::exp(g(0)), c2 = c1 * std::exp(g(1) + std::copysign(0.3, g(1)));
    for (Eigen::Index i = 0; i < dh; ++i) k_gain(h * dh + i) = S(i < first ? c1 : c2) / q_gain(h * dh + i);
  }
  return k_gain;
}

// Orthogonal blocks diag(O_1, O_2) on the product's two levels (the first `first` coordinates, the rest).
template <class S> Mat<S> level_blocks(Rng& rng, Eigen::Index dh, Eigen::Index first) {
  std::vector<Mat<S>> levels{haar_orthogonal<S>(rng, first)};
  if (dh > first) levels.push_back(haar_orthogonal<S>(rng, dh - first));
  return block_diagonal<S>(levels);
}

// An orthogonal M_h mixing the two levels by construction: diag(O_1, O_2) times a rotation by pi/4 in the
// plane of the coordinates first - 1 and first. With D = diag(c_1 I, c_2 I), M D M^T - D has norm
// |c_2 - c_1| / sqrt(2) >= 0.18 c_1 (the levels are e^0.3 apart); a Haar M_h lies near diag(O_1, O_2)
// (which commutes with D) by chance, and at d_h = 2 that is one angle near 0 or pi.
template <class S> Mat<S> level_mixing(Rng& rng, Eigen::Index dh, Eigen::Index first) {
  Mat<S> rotation = Mat<S>::Identity(dh, dh);
  using std::sqrt;
  const S h = S(1) / sqrt(S(2));
  rotation(first - 1, first - 1) = h, rotation(first - 1, first) = -h;
  rotation(first, first - 1) = h, rotation(first, first) = h;
  return level_blocks<S>(rng, dh, first) * rotation;
}

struct ExtQkNorm {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    auto w = random_grouped<S>(rng, c, c.heads);
    const Eigen::Index dh = w.head_dim(), first = (dh + 1) / 2;
    w.q_gain = random_gains<S>(rng, c.d);
    w.k_gain = gains_with_product<S>(rng, w.q_gain, c.heads, dh);
    const AttentionProbe<S> p(draw_input<S>(rng, c), w, c.mask);
    std::vector<Mat<S>> blocks, mixing;
    for (int h = 0; h < c.heads; ++h) blocks.push_back(level_blocks<S>(rng, dh, first));
    Outcome o = surviving_freedoms<S>(rng, p, bases_of<S>(blocks));

    // The generic block has gains on [2, 8]: no scaled orthogonal matrix (the norm removes only a scale).
    const AttentionProbe<S> pc = control_probe<S>(rng, c, p);
    o.controls.push_back(qk_control<S>("generic invertible M_h (Prop. 4.2's freedom without QK-norm)", pc, c,
                                       gain_blocks<S>(rng, c.heads, dh)));
    for (int h = 0; h < c.heads; ++h) mixing.push_back(level_mixing<S>(rng, dh, first));
    o.controls.push_back(qk_control<S>("orthogonal M_h not commuting with diag(gamma_Q gamma_K)", pc, c, mixing));
    return o;
  }
};

}  // namespace

void register_extension_claims(std::vector<Claim>& claims) {
  // d = 8 and 16 with H = 1, 2, 4: head widths 2 … 16; the bases' κ at 50 digits make d = 32 cost 4×.
  const DefaultSweep extension_sweep{.d = {8, 16}};
  claims.push_back({.id = "qwe.freedom.vo",
                    .statement = "MHA(X; W_V N, N^-1 W_O) = MHA(X; W) and SA(X; W_V N) = SA(X) N for block-diagonal "
                                 "N (the W_V/W_O analogue of Prop. 4.2 conjectured in 4.1.2)",
                    .kind = Kind::identity,
                    .dims = Dims{.min_seq = 2,
                                 .min_head_width = 2,
                                 .why_head_width = "a width-1 N_h is a scalar, so N^-T = N^-1 and the control "
                                                   "'N^-T in place of N^-1' is the claim itself (it cannot fail)"},
                    .budget = default_budget,
                    .run = dispatch<FreedomVO>()});
  claims.push_back({.id = "qwe.ext.rope",
                    .statement = "under RoPE, (W_Q M, W_K M^-T) keeps attention at every position iff each M_h "
                                 "commutes with the rotations: complex scalings per frequency pair (sec. 6)",
                    .kind = Kind::identity,
                    .dims = Dims{.min_seq = 2, .even_head_width = true},
                    .budget = default_budget,
                    .variants = rope_thetas,
                    .defaults = extension_sweep,
                    .run = dispatch<ExtRope>()});
  claims.push_back({.id = "qwe.ext.gqa",
                    .statement = "GQA: W_Q^h M_g for every query head h of group g with W_K^g M_g^-T (and W_V^g "
                                 "N_g, N_g^-1 W_O^h) keep attention: one freedom per key head (sec. 6)",
                    .kind = Kind::identity,
                    .dims = Dims{.mask = false, .min_seq = 2},
                    .budget = default_budget,
                    .variants = kv_head_counts,
                    .defaults = extension_sweep,
                    .run = dispatch<ExtGqa>()});
  claims.push_back({.id = "qwe.ext.qknorm",
                    .statement = "per-head QK RMSNorm with gains: (W_Q M, W_K M) keeps attention for M_h orthogonal "
                                 "commuting with diag(gamma_Q gamma_K) (sec. 6)",
                    .kind = Kind::identity,
                    .dims = Dims{.mask = false, .min_seq = 2, .min_head_width = 2},
                    .budget = default_budget,
                    .defaults = extension_sweep,
                    .run = dispatch<ExtQkNorm>()});
}

}  // namespace qkvlab::theory
