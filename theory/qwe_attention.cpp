// Attention-level claims of Query-weight elimination (§3, §4.1–4.2, Prop. 8.1): attention sees
// X only through X W_Q, X W_K, X W_V; the reparametrization lemma; the
// single-head two-matrix form; the block-diagonal freedom.
#include "theory/claims.hpp"

#include "core/reparametrize.hpp"

namespace qkvlab::theory {
namespace {

template <class S> Mat<S> draw_input(Rng& rng, const SweepPoint& c) { return draw<S>(rng, c.seq, c.d, 1.0); }

// qwe.obs3.1: SA(X; W) = F(X W_Q, X W_K, X W_V). Two consequences are checked:
// F, built from the three products alone, reproduces SA (bitwise: the same
// operations); and when W_Q, W_K, W_V share a left null vector v (vᵀW = 0),
// moving X along v (X + a vᵀ) leaves SA unchanged although X changes by O(1).
template <class S> Mat<S> without_direction(const Mat<S>& W, const Vec<S>& v) {
  return W - v * (v.transpose() * W);  // (I − v vᵀ) W, so vᵀW = 0 to rounding
}

struct Observation31 {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    auto w = random_attention<S>(rng, c.d, c.heads);
    const Vec<S> v = cast<S>(rng.gaussian(c.d, 1)).col(0).normalized();
    for (Mat<S>* W : {&w.W_Q, &w.W_K, &w.W_V}) *W = without_direction<S>(*W, v);
    const Mat<S> X = draw_input<S>(rng, c);
    const Mat<S> a = draw<S>(rng, c.seq, 1, 1.0), off_null = draw<S>(rng, 1, c.d, 1.0);
    const Mat<S> Q = X * w.W_Q, K = X * w.W_K, V = X * w.W_V;
    const Mat<S> standard = self_attention<S>(X, w, c.mask);
    const Mat<S> Xc = control_input<S>(rng, c, X);
    const Mat<S> Qc = Xc * w.W_Q, Kc = Xc * w.W_K, Vc = Xc * w.W_V, standard_c = self_attention<S>(Xc, w, c.mask);
    Outcome o;
    o.rel_err = std::max(rel_err<S>(standard, attention_from_projections<S>(Q, K, V, c.heads, c.mask, w.scale())),
                         rel_err<S>(standard, self_attention<S>(Mat<S>(X + a * v.transpose()), w, c.mask)));
    o.controls.push_back(control_by_error("X moved along a direction outside the common null space",
                                          rel_err<S>(standard, self_attention<S>(Mat<S>(X + a * off_null), w, c.mask))));
    o.controls.push_back(on_control_input(
        control_by_error("query and key products swapped",
                         rel_err<S>(standard_c, attention_from_projections<S>(Kc, Qc, Vc, c.heads, c.mask, w.scale()))),
        c));
    if (c.heads > 1) {
      const Eigen::Index dh = w.head_dim();
      Mat<S> K_shifted(Kc.rows(), Kc.cols());
      K_shifted << Kc.rightCols(Kc.cols() - dh), Kc.leftCols(dh);  // head h's keys from head h+1
      o.controls.push_back(on_control_input(
          control_by_error("key head blocks misaligned",
                           rel_err<S>(standard_c,
                                      attention_from_projections<S>(Qc, K_shifted, Vc, c.heads, c.mask, w.scale()))),
          c));
    }
    return o;
  }
};

// qwe.lemma3.1: MHA(X T; T⁻¹W_Q, T⁻¹W_K, T⁻¹W_V, W_O) = MHA(X; W), with T the
// eliminated weight (W_Q, W_K or W_V), whose reparametrized form is I.
struct Lemma31 {
  template <class W> static auto& eliminated(W& w, qkv::Projection p) {
    return p == qkv::Projection::query ? w.W_Q : p == qkv::Projection::key ? w.W_K : w.W_V;
  }
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    const auto w = random_attention<S>(rng, c.d, c.heads);
    const Mat<S> X = draw_input<S>(rng, c);
    const Mat<S> reference = mha<S>(X, w, c.mask);
    const qkv::Projection e = c.variant.eliminated.value();
    const auto T = change_of_basis<S>(eliminated(w, e));
    Outcome o;
    o.kappa = T.kappa;
    o.singular = T.singular();
    const auto r = reparametrize<S>(w, T);
    const Mat<S> I = Mat<S>::Identity(c.d, c.d);
    o.rel_err = std::max(rel_err<S>(reference, mha<S>(X * T.T, r, c.mask)), rel_err<S>(I, eliminated(r, e)));

    auto only_eliminated = w;  // T⁻¹ applied to the eliminated weight alone
    eliminated(only_eliminated, e) = eliminated(r, e);
    const Mat<S> Xc = control_input<S>(rng, c, X);
    o.controls.push_back(on_control_input(
        control_by_error("T^-1 applied to the eliminated weight only",
                         rel_err<S>(mha<S>(Xc, w, c.mask), mha<S>(Xc * T.T, only_eliminated, c.mask))),
        c));

    auto ns = w;
    eliminated(ns, e) = near_singular<S>(rng, c.d);
    const auto T_ns = change_of_basis<S>(eliminated(ns, e));
    o.controls.push_back(control_by_detection(
        "near-singular eliminated weight (cond ~ 1/(10u)) detected", T_ns.singular(),
        rel_err<S>(mha<S>(X, ns, c.mask), mha<S>(X * T_ns.T, reparametrize<S>(ns, T_ns), c.mask))));
    return o;
  }
};

// qwe.prop4.1: one head depends on W_Q, W_K only through W_QK = W_Q W_Kᵀ and on
// W_V, W_O only through W_VO = W_V W_O.
template <class S> Mat<S> two_matrix_head(const Mat<S>& X, const AttentionWeights<S>& w, Mask mask) {
  const Mat<S> W_QK = w.W_Q * w.W_K.transpose(), W_VO = w.W_V * w.W_O;
  const Mat<S> logits = (X * W_QK * X.transpose()) / w.scale();
  return softmax_rows<S>(logits, mask) * X * W_VO;
}

struct Proposition41 {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    auto w = random_attention<S>(rng, c.d, 1);
    const Mat<S> X = draw_input<S>(rng, c);
    Outcome o;
    o.rel_err = rel_err<S>(mha<S>(X, w, c.mask), two_matrix_head<S>(X, w, c.mask));
    w.heads = c.d % 2 == 0 ? 2 : c.d;  // the hypothesis "one head" dropped
    auto merged = w;
    merged.score_scale = to_double(w.scale());
    const Mat<S> Xc = control_input<S>(rng, c, X);
    o.controls.push_back(on_control_input(
        control_by_error("two-matrix form applied to " + std::to_string(w.heads) + " heads",
                         rel_err<S>(mha<S>(Xc, w, c.mask), two_matrix_head<S>(Xc, merged, c.mask))),
        c));
    return o;
  }
};

// qwe.prop4.2: SA(X; W_Q B, W_K B⁻ᵀ, W_V) = SA(X; W) for block-diagonal B.
struct Proposition42 {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    const auto w = random_attention<S>(rng, c.d, c.heads);
    const Mat<S> X = draw_input<S>(rng, c);
    const Eigen::Index dh = w.head_dim();
    std::vector<Mat<S>> blocks;
    for (int h = 0; h < c.heads; ++h) blocks.push_back(cast<S>(draw_basis(rng, dh, 1.0 / std::sqrt(double(dh)))));
    const auto B = change_of_basis<S>(block_diagonal<S>(blocks));
    auto transformed = [&](const Mat<S>& input, const ChangeOfBasis<S>& b, bool keys) {
      auto r = w;
      r.W_Q = w.W_Q * b.T;
      if (keys) r.W_K = w.W_K * b.T_inv.transpose();
      return self_attention<S>(input, r, c.mask);
    };
    Outcome o;
    o.kappa = B.kappa;
    o.singular = B.singular();
    o.rel_err = rel_err<S>(self_attention<S>(X, w, c.mask), transformed(X, B, true));
    const Mat<S> Xc = control_input<S>(rng, c, X), reference_c = self_attention<S>(Xc, w, c.mask);
    o.controls.push_back(on_control_input(
        control_by_error("B applied to W_Q only", rel_err<S>(reference_c, transformed(Xc, B, false))), c));
    if (c.heads > 1)
      o.controls.push_back(on_control_input(
          control_by_error("full (not block-diagonal) B",
                           rel_err<S>(reference_c, transformed(Xc, random_basis<S>(rng, c.d), true))),
          c));
    return o;
  }
};

std::vector<PointVariant> eliminated_weights(const SweepPoint&) {
  return {{.label = "elim=Q", .eliminated = qkv::Projection::query},
          {.label = "elim=K", .eliminated = qkv::Projection::key},
          {.label = "elim=V", .eliminated = qkv::Projection::value}};
}

}  // namespace

void register_attention_claims(std::vector<Claim>& claims) {
  claims.push_back({.id = "qwe.obs3.1",
                    .statement = "attention sees X only through X W_Q, X W_K, X W_V (block notation, Prop. 8.1)",
                    .kind = Kind::identity,
                    .dims = Dims{.min_d = 4,
                                 .min_seq = 2,
                                 .why_d = "the common null vector leaves Q K^T d-1 dimensions, and swapping Q and "
                                          "K changes only its antisymmetric part: none at d = 2 (the control "
                                          "cannot fail), one random number at d = 3 (it passed in 0.2% of draws)"},
                    .budget = default_budget,
                    .run = dispatch<Observation31>()});
  claims.push_back({.id = "qwe.lemma3.1",
                    .statement = "MHA(X T; T^-1 W_Q, T^-1 W_K, T^-1 W_V, W_O) = MHA(X; W) for T = W_Q, W_K or W_V",
                    .kind = Kind::identity,
                    .dims = Dims{.min_seq = 2},
                    .budget = default_budget,
                    .variants = eliminated_weights,
                    .run = dispatch<Lemma31>()});
  claims.push_back({.id = "qwe.prop4.1",
                    .statement = "one head depends on its weights only through W_QK = W_Q W_K^T and W_VO = W_V W_O",
                    .kind = Kind::identity,
                    .dims = Dims{.heads = false, .min_seq = 2},
                    .budget = default_budget,
                    .run = dispatch<Proposition41>()});
  claims.push_back({.id = "qwe.prop4.2",
                    .statement = "SA(X; W_Q B, W_K B^-T, W_V) = SA(X; W) for block-diagonal invertible B",
                    .kind = Kind::identity,
                    .dims = Dims{.min_seq = 2},
                    .budget = default_budget,
                    .run = dispatch<Proposition42>()});
}

}  // namespace qkvlab::theory
