// Model-level claims of Query-weight elimination (§4.3–4.5, Lemmas 8.5–8.6): eliminating W_Q
// from one layer of a model with both skips, tied embeddings, intertwining of
// attention-skip-only blocks and elimination from every layer, weight-shared
// telescoping.
#include "theory/claims.hpp"

#include "core/reparametrize.hpp"

namespace qkvlab::theory {
namespace {

constexpr int vocab = 24;

ModelShape shape(const SweepPoint& c) {
  return {.d = c.d, .vocab = vocab, .seq = c.seq, .hidden = 4 * c.d, .heads = c.heads, .layers = c.layers};
}

// max over i of rel_err(X_i T_i, X_i'), the logits and every W_Q' that must be I.
template <class S>
double reduced_model_error(const Trace<S>& a, const Trace<S>& b, const std::vector<ChangeOfBasis<S>>& T,
                           const std::vector<const Mat<S>*>& must_be_identity) {
  double e = rel_err<S>(a.logits, b.logits);
  for (std::size_t i = 0; i < a.hidden.size(); ++i)
    e = std::max(e, rel_err<S>(Mat<S>(a.hidden[i] * T[i].T), b.hidden[i]));
  for (const Mat<S>* W : must_be_identity)
    e = std::max(e, rel_err<S>(Mat<S>(Mat<S>::Identity(W->rows(), W->cols())), *W));
  return e;
}

template <class S> std::vector<ChangeOfBasis<S>> same_basis(const ChangeOfBasis<S>& T, int layers) {
  return std::vector<ChangeOfBasis<S>>(std::size_t(layers) + 1, T);
}

template <class S> void note_singular(Outcome& o, const ChangeOfBasis<S>& T) {
  o.kappa = std::max(o.kappa, T.kappa);
  o.singular = o.singular || T.singular();
}

// qwe.thm4.1: with both skips, T = W_Q^ℓ applied to every weight gives X_i' = X_i T,
// identical logits and W_Q^ℓ' = I.
struct Theorem41 {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    const auto m = random_model<S>(rng, shape(c), Skip::both, c.mask, false, false);
    const auto tokens = random_tokens(rng, c.seq, vocab);
    const int ell = c.variant.layer - 1;
    const auto T = query_basis<S>(m.block(ell));
    const auto reduced = change_model_basis<S>(m, T);
    const auto a = forward<S>(m, tokens);
    Outcome o;
    note_singular(o, T);
    o.rel_err = reduced_model_error<S>(a, forward<S>(reduced, tokens), same_basis(T, c.layers),
                                       {&reduced.block(ell).attn.W_Q});
    auto mlp_untouched = reduced;
    for (int i = 0; i < c.layers; ++i) {
      mlp_untouched.block(i).W_1 = m.block(i).W_1;
      mlp_untouched.block(i).W_2 = m.block(i).W_2;
    }
    o.controls.push_back(control_by_error("MLP weights left in the old basis",
                                          rel_err<S>(a.logits, forward<S>(mlp_untouched, tokens).logits)));
    return o;
  }
};

// qwe.remark4: a tied head must be untied (U' = T⁻¹Eᵀ), unless T is orthogonal.
struct Remark4 {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    const auto m = random_model<S>(rng, shape(c), Skip::both, c.mask, true, false);
    const auto tokens = random_tokens(rng, c.seq, vocab);
    const Mat<S> logits = forward<S>(m, tokens).logits;
    const auto T = query_basis<S>(m.block(0));
    const auto untied = change_model_basis<S>(m, T);
    const auto Q = change_of_basis<S>(orthogonal_factor<S>(draw<S>(rng, c.d, c.d, 1.0)));
    auto still_tied = change_model_basis<S>(m, Q);
    still_tied.tied = true;
    Outcome o;
    note_singular(o, T);
    o.rel_err = std::max(rel_err<S>(logits, forward<S>(untied, tokens).logits),
                         rel_err<S>(logits, forward<S>(still_tied, tokens).logits));
    auto kept_tied = untied;
    kept_tied.tied = true;
    o.controls.push_back(control_by_error("head kept tied after a non-orthogonal T",
                                          rel_err<S>(logits, forward<S>(kept_tied, tokens).logits)));
    return o;
  }
};

// qwe.lemma8.5: an attention-skip-only block intertwines: B'(X T_in) = B(X) T_out.
template <class S> double intertwining_error(const SweepPoint& c, Rng& rng, Skip skip, const ChangeOfBasis<S>& T_in,
                                             const ChangeOfBasis<S>& T_out, const BlockWeights<S>& b) {
  const Mat<S> X = draw<S>(rng, c.seq, c.d, 1.0);
  const Mat<S> reference = block_forward<S>(X, b, skip, c.mask, MlpActivation::gelu) * T_out.T;
  return rel_err<S>(reference, block_forward<S>(X * T_in.T, intertwine<S>(b, T_in, T_out), skip, c.mask,
                                                MlpActivation::gelu));
}

struct Lemma85 {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    const auto b = random_block<S>(rng, c.d, c.heads, 4 * c.d);
    const auto T_in = random_basis<S>(rng, c.d), T_out = random_basis<S>(rng, c.d);
    Outcome o;
    note_singular(o, T_in);
    note_singular(o, T_out);
    o.kappa = T_in.kappa * T_out.kappa;
    o.rel_err = intertwining_error<S>(c, rng, Skip::attention_only, T_in, T_out, b);
    o.controls.push_back(control_by_error("MLP skip present (both skips), T_in != T_out",
                                          intertwining_error<S>(c, rng, Skip::both, T_in, T_out, b)));
    return o;
  }
};

// qwe.thm4.2: attention-skip-only layers, T_i = W_Q^i and T_{L+1} = I: every
// layer loses W_Q and the logits are unchanged (U untouched).
template <class S> std::vector<ChangeOfBasis<S>> query_bases(const NormFreeTransformer<S>& m) {
  std::vector<ChangeOfBasis<S>> T;
  for (int i = 0; i < m.layers; ++i) T.push_back(query_basis<S>(m.block(i)));
  T.push_back(change_of_basis<S>(Mat<S>::Identity(m.d(), m.d())));
  return T;
}

template <class S>
double eliminate_every_query(const NormFreeTransformer<S>& m, const std::vector<int>& tokens, Outcome& o) {
  const auto T = query_bases<S>(m);
  const auto reduced = change_model_basis<S>(m, T);
  std::vector<const Mat<S>*> queries;
  for (int i = 0; i < m.layers; ++i) queries.push_back(&reduced.block(i).attn.W_Q);
  o.kappa = 0;
  for (const auto& t : T) o.kappa += t.kappa, o.singular = o.singular || t.singular();
  return reduced_model_error<S>(forward<S>(m, tokens), forward<S>(reduced, tokens), T, queries);
}

struct Theorem42 {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    const auto m = random_model<S>(rng, shape(c), Skip::attention_only, c.mask, false, false);
    const auto tokens = random_tokens(rng, c.seq, vocab);
    Outcome o;
    o.rel_err = eliminate_every_query<S>(m, tokens, o);
    auto both = m;
    both.skip = Skip::both;
    Outcome ignored;
    o.controls.push_back(control_by_error("the same construction with the MLP skip present",
                                          eliminate_every_query<S>(both, tokens, ignored)));
    return o;
  }
};

// qwe.lemma8.6: a block with both skips intertwines with one basis: B'(X T) = B(X) T.
struct Lemma86 {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    const auto b = random_block<S>(rng, c.d, c.heads, 4 * c.d);
    const auto T = query_basis<S>(b);
    const auto T_out = random_basis<S>(rng, c.d);
    Outcome o;
    note_singular(o, T);
    o.rel_err = intertwining_error<S>(c, rng, Skip::both, T, T, b);
    o.controls.push_back(control_by_error("two different bases (T_out != T_in)",
                                          intertwining_error<S>(c, rng, Skip::both, T, T_out, b)));
    return o;
  }
};

// qwe.thm4.3: weight-shared layers telescope: with T = W_Q, B'^L(X T) = B^L(X) T
// and the one shared W_Q' = I.
struct Theorem43 {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    const auto m = random_model<S>(rng, shape(c), Skip::both, c.mask, false, true);
    const auto tokens = random_tokens(rng, c.seq, vocab);
    const auto T = query_basis<S>(m.block(0));
    const auto reduced = change_model_basis<S>(m, T);
    Outcome o;
    note_singular(o, T);
    o.rel_err = reduced_model_error<S>(forward<S>(m, tokens), forward<S>(reduced, tokens), same_basis(T, c.layers),
                                       {&reduced.block(0).attn.W_Q});
    // Dims::min_layers = 2: there is a layer beyond the first to unshare. The control changes only the
    // scores of layers 2..L, so it runs on control_seq positions (claim.hpp: at n = 2 it passed by chance).
    ModelShape control_shape = shape(c);
    control_shape.seq = control_seq(c);
    auto unshared = random_model<S>(rng, control_shape, Skip::both, c.mask, false, false);
    unshared.blocks[0] = m.blocks[0];
    const auto control_tokens = c.seq >= control_positions ? tokens : random_tokens(rng, control_positions, vocab);
    // The model without W_Q built from unshared layers: one T, every W_Q' set to I. Beyond
    // layer 1 T^-1 W_Q^i != I, so the logits change.
    auto r = change_model_basis<S>(unshared, T);
    for (int i = 0; i < c.layers; ++i) r.block(i).attn.W_Q = Mat<S>::Identity(c.d, c.d);
    o.controls.push_back(on_control_input(
        control_by_error("unshared layers with one T and W_Q' = I in every layer: the logits change",
                         rel_err<S>(forward<S>(unshared, control_tokens).logits, forward<S>(r, control_tokens).logits)),
        c));
    return o;
  }
};

std::vector<PointVariant> every_layer(const SweepPoint& c) {
  std::vector<PointVariant> v;
  for (int l = 1; l <= c.layers; ++l) v.push_back({.label = "layer=" + std::to_string(l), .layer = l});
  return v;
}

}  // namespace

void register_model_claims(std::vector<Claim>& claims) {
  // The mask matters to Theorem 4.1 (encoder and decoder); the other claims
  // hold for any attention and run with the decoder's causal mask.
  const Dims both_masks{.heads = true, .layers = true, .seq = true, .mask = true};
  const Dims model{.heads = true, .layers = true, .seq = true, .mask = false};
  const Dims block{.heads = true, .layers = false, .seq = true, .mask = false};
  claims.push_back({.id = "qwe.thm4.1",
                    .statement = "both skips, untied: T = W_Q^l on every weight gives X_i' = X_i T, equal logits, "
                                 "W_Q^l' = I",
                    .kind = Kind::identity,
                    .dims = both_masks,
                    .budget = default_budget,
                    .variants = every_layer,
                    .run = dispatch<Theorem41>()});
  claims.push_back({.id = "qwe.remark4",
                    .statement = "a tied head must be untied (U' = T^-1 E^T) unless T is orthogonal",
                    .kind = Kind::identity,
                    .dims = model,
                    .budget = default_budget,
                    .run = dispatch<Remark4>()});
  claims.push_back({.id = "qwe.lemma8.5",
                    .statement = "attention-skip-only blocks intertwine: B'(X T_in) = B(X) T_out",
                    .kind = Kind::identity,
                    .dims = block,
                    .budget = default_budget,
                    .run = dispatch<Lemma85>()});
  claims.push_back({.id = "qwe.thm4.2",
                    .statement = "attention-skip-only layers with T_i = W_Q^i, T_{L+1} = I: every W_Q' = I, equal "
                                 "logits",
                    .kind = Kind::identity,
                    .dims = model,
                    .budget = default_budget,
                    .run = dispatch<Theorem42>()});
  claims.push_back({.id = "qwe.lemma8.6",
                    .statement = "a block with both skips intertwines with one basis: B'(X T) = B(X) T",
                    .kind = Kind::identity,
                    .dims = block,
                    .budget = default_budget,
                    .run = dispatch<Lemma86>()});
  claims.push_back({.id = "qwe.thm4.3",
                    .statement = "weight-shared layers telescope: B'^L(X T) = B^L(X) T, shared W_Q' = I",
                    .kind = Kind::identity,
                    .dims = Dims{.heads = true,
                                 .layers = true,
                                 .seq = true,
                                 .mask = false,
                                 .min_layers = 2,
                                 .min_seq = 2,
                                 .why_layers = "its control unshares the layers beyond the first (one layer is "
                                               "Lemma 8.6, no sharing to break)"},
                    .budget = default_budget,
                    .defaults = {.layers = {4, 32}, .seq = {8}},
                    .run = dispatch<Theorem43>()});
}

}  // namespace qkvlab::theory
