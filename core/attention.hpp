// Multi-head self-attention, row-vector convention (docs/math/conventions.md):
// X ∈ R^{n×d}, head h uses the column block h·d_h … (h+1)·d_h − 1 of W_Q, W_K, W_V,
//   A_h = softmax_M((X W_Q^h)(X W_K^h)ᵀ / s),  head_h = A_h X W_V^h,
//   SA(X) = [head_1 … head_H],  MHA(X) = SA(X) W_O,  s = sqrt(d_h) unless set.
// The softmax subtracts each row's maximum over the positions the mask allows,
// so it never overflows; masked positions get exactly zero weight.
#pragma once

#include "core/linalg.hpp"
#include "core/types.hpp"

#include <cmath>

namespace qkvlab {

enum class Mask { causal, bidirectional };

inline const char* mask_name(Mask m) { return m == Mask::causal ? "causal" : "bidirectional"; }

template <class S> struct AttentionWeights {
  Mat<S> W_Q, W_K, W_V, W_O;  // d×d each
  int heads = 1;
  double score_scale = 0.0;   // s; 0 means sqrt(d_h)

  Eigen::Index d() const { return W_Q.rows(); }
  Eigen::Index head_dim() const { return W_Q.cols() / heads; }
  S scale() const {
    using std::sqrt;
    return score_scale > 0 ? S(score_scale) : S(sqrt(S(head_dim())));
  }
};

inline bool attends(Mask m, Eigen::Index i, Eigen::Index j) { return m == Mask::bidirectional || j <= i; }

// Row-wise masked softmax of a logit matrix.
template <class S> Mat<S> softmax_rows(const Mat<S>& logits, Mask mask) {
  using std::exp;
  Mat<S> p = Mat<S>::Zero(logits.rows(), logits.cols());
  for (Eigen::Index i = 0; i < logits.rows(); ++i) {
    S row_max = logits(i, 0);
    for (Eigen::Index j = 1; j < logits.cols(); ++j)
      if (attends(mask, i, j) && logits(i, j) > row_max) row_max = logits(i, j);
    S sum = 0;
    for (Eigen::Index j = 0; j < logits.cols(); ++j)
      if (attends(mask, i, j)) sum += (p(i, j) = exp(logits(i, j) - row_max));
    p.row(i) /= sum;
  }
  return p;
}

// One head from its query, key and value matrices (n×d_h each).
template <class S>
Mat<S> attention_head(const Mat<S>& Q, const Mat<S>& K, const Mat<S>& V, Mask mask, const S& scale) {
  const Mat<S> logits = (Q * K.transpose()) / scale;
  return softmax_rows<S>(logits, mask) * V;
}

// SA(X) = [head_1 … head_H], each head from its weight blocks.
template <class S> Mat<S> self_attention(const Mat<S>& X, const AttentionWeights<S>& w, Mask mask) {
  const Eigen::Index dh = w.head_dim();
  Mat<S> out(X.rows(), w.W_V.cols());
  for (int h = 0; h < w.heads; ++h) {
    const Mat<S> Q = X * w.W_Q.middleCols(h * dh, dh);
    const Mat<S> K = X * w.W_K.middleCols(h * dh, dh);
    const Mat<S> V = X * w.W_V.middleCols(h * dh, dh);
    out.middleCols(h * dh, dh) = attention_head<S>(Q, K, V, mask, w.scale());
  }
  return out;
}

// F(Q, K, V): attention from the three products Q = X W_Q, K = X W_K, V = X W_V
// alone (Observation 3.1, block notation of Prop. 8.1): slice each into head
// blocks, per-head logits, per-head softmax, per-head weighting, concatenate.
template <class S>
Mat<S> attention_from_projections(const Mat<S>& Q, const Mat<S>& K, const Mat<S>& V, int heads, Mask mask,
                                  const S& scale) {
  const Eigen::Index dh = Q.cols() / heads;
  Mat<S> out(Q.rows(), V.cols());
  for (int h = 0; h < heads; ++h)
    out.middleCols(h * dh, dh) =
        attention_head<S>(Q.middleCols(h * dh, dh), K.middleCols(h * dh, dh), V.middleCols(h * dh, dh), mask, scale);
  return out;
}

// MHA(X) = SA(X) W_O.
template <class S> Mat<S> mha(const Mat<S>& X, const AttentionWeights<S>& w, Mask mask) {
  return self_attention<S>(X, w, mask) * w.W_O;
}

// Weights drawn in double with entries N(0, 1/d) (fan-in d), then rounded to S;
// W_Q, W_K, W_V may serve as a change of basis and are drawn by draw_basis.
template <class S> AttentionWeights<S> random_attention(Rng& rng, Eigen::Index d, int heads) {
  const double sd = 1.0 / std::sqrt(double(d));
  AttentionWeights<S> w;
  w.W_Q = cast<S>(draw_basis(rng, d, sd));
  w.W_K = cast<S>(draw_basis(rng, d, sd));
  w.W_V = cast<S>(draw_basis(rng, d, sd));
  w.W_O = cast<S>(rng.gaussian(d, d, sd));
  w.heads = heads;
  return w;
}

// Instantiated once per scalar in core/instances_*.cpp (P: extern here, nothing there).
#define QKVLAB_ATTENTION_INSTANCES(P, S)                                                              \
  P template Mat<S> softmax_rows<S>(const Mat<S>&, Mask);                                            \
  P template Mat<S> attention_head<S>(const Mat<S>&, const Mat<S>&, const Mat<S>&, Mask, const S&);  \
  P template Mat<S> self_attention<S>(const Mat<S>&, const AttentionWeights<S>&, Mask);              \
  P template Mat<S> attention_from_projections<S>(const Mat<S>&, const Mat<S>&, const Mat<S>&, int,  \
                                                  Mask, const S&);                                   \
  P template Mat<S> mha<S>(const Mat<S>&, const AttentionWeights<S>&, Mask);                         \
  P template AttentionWeights<S> random_attention<S>(Rng&, Eigen::Index, int);
#define QKVLAB_ATTENTION_EXTERN(S) QKVLAB_ATTENTION_INSTANCES(extern, S)
QKVLAB_EXTERN_INSTANCES(QKVLAB_ATTENTION_EXTERN)

}  // namespace qkvlab
