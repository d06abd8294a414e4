// A transformer without normalization (Query-weight elimination §4.3–4.4), row-vector convention:
//   X_0 = E[tokens] + P,  X_i = B_i(X_{i−1}) for i = 1 … L,  logits = X_L U,
// with U = Eᵀ when the head is tied. With weight sharing one block serves all
// L layers.
#pragma once

#include "core/block.hpp"

#include <vector>

namespace qkvlab {

template <class S> struct NormFreeTransformer {
  Mat<S> E;  // V×d token embedding
  Mat<S> P;  // n×d positions
  Mat<S> U;  // d×V output head; unused when tied
  bool tied = false;
  bool shared = false;               // one block for every layer
  int layers = 1;
  std::vector<BlockWeights<S>> blocks;  // L blocks, or 1 when shared
  Skip skip = Skip::both;
  Mask mask = Mask::causal;
  MlpActivation activation = MlpActivation::gelu;

  const BlockWeights<S>& block(int i) const { return blocks[shared ? 0 : i]; }
  BlockWeights<S>& block(int i) { return blocks[shared ? 0 : i]; }
  Mat<S> head() const { return tied ? Mat<S>(E.transpose()) : U; }
  Eigen::Index d() const { return E.cols(); }
};

template <class S> struct Trace {
  std::vector<Mat<S>> hidden;  // X_0 … X_L
  Mat<S> logits;
};

template <class S> Trace<S> forward(const NormFreeTransformer<S>& m, const std::vector<int>& tokens) {
  Trace<S> t;
  Mat<S> X(Eigen::Index(tokens.size()), m.d());
  for (std::size_t i = 0; i < tokens.size(); ++i) X.row(Eigen::Index(i)) = m.E.row(tokens[i]);
  X += m.P;
  t.hidden.push_back(X);
  for (int i = 0; i < m.layers; ++i) t.hidden.push_back(block_forward<S>(t.hidden.back(), m.block(i), m.skip, m.mask, m.activation));
  t.logits = t.hidden.back() * m.head();
  return t;
}

struct ModelShape {
  Eigen::Index d = 16, vocab = 32, seq = 8, hidden = 64;
  int heads = 2, layers = 2;
};

// A random model, drawn in double and rounded to S: token embedding E (vocab×d) with entries
// N(0, 1); positions P (seq×d) and, untied, the head U (d×vocab) with entries N(0, 1/d); each
// block as random_block (entries N(0, 1/fan_in); W_Q, W_K, W_V conditioned by draw_basis).
template <class S>
NormFreeTransformer<S> random_model(Rng& rng, const ModelShape& s, Skip skip, Mask mask, bool tied, bool shared) {
  NormFreeTransformer<S> m;
  const double sd = 1.0 / std::sqrt(double(s.d));
  m.E = cast<S>(rng.gaussian(s.vocab, s.d, 1.0));
  m.P = cast<S>(rng.gaussian(s.seq, s.d, sd));
  m.tied = tied;
  if (!tied) m.U = cast<S>(rng.gaussian(s.d, s.vocab, sd));
  m.shared = shared;
  m.layers = s.layers;
  for (int i = 0; i < (shared ? 1 : s.layers); ++i) m.blocks.push_back(random_block<S>(rng, s.d, s.heads, s.hidden));
  m.skip = skip;
  m.mask = mask;
  return m;
}

inline std::vector<int> random_tokens(Rng& rng, int n, int vocab) {
  std::vector<int> t(n);
  for (int& x : t) x = rng.uniform_int(vocab);
  return t;
}

// Instantiated once per scalar in core/instances_*.cpp (P: extern here, nothing there).
#define QKVLAB_MODEL_INSTANCES(P, S)                                                   \
  P template Trace<S> forward<S>(const NormFreeTransformer<S>&, const std::vector<int>&);           \
  P template NormFreeTransformer<S> random_model<S>(Rng&, const ModelShape&, Skip, Mask, bool, bool);
#define QKVLAB_MODEL_EXTERN(S) QKVLAB_MODEL_INSTANCES(extern, S)
QKVLAB_EXTERN_INSTANCES(QKVLAB_MODEL_EXTERN)

}  // namespace qkvlab
