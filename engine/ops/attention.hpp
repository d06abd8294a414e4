// Softmax attention, row-vector convention (docs/math/conventions.md): for one head,
//   A = softmax_M(Q Kᵀ / sqrt(d_h)) row-wise,  head = A V,
// with d_h = Q.cols() and M the mask (causal: query i sees keys j ≤ i;
// bidirectional: all keys). Masked entries of A are exactly zero. For another
// score scale, scale Q first (Q-identity's 1/(2 sqrt(d_h)) is scale(Q, 0.5)).
//
// attention_head is one fused operation: its backward uses the saved A,
//   dV += Aᵀ dH,  dA = dH Vᵀ,  dS = A ⊙ (dA − rowsum(A ⊙ dA)),
//   dQ += dS K / sqrt(d_h),  dK += dSᵀ Q / sqrt(d_h).
// self_attention and multi_head_attention are built from it, slice_cols,
// concat_cols and matmul, so their backward comes from those operations.
#pragma once

#include <cmath>
#include <vector>

#include "engine/ops/blocks.hpp"
#include "engine/ops/matmul.hpp"
#include "engine/kernel_types.hpp"
#include "engine/tape.hpp"

namespace qkvlab::engine {

// Number of keys query row i may attend to under the mask.
inline Eigen::Index visible_keys(Mask mask, Eigen::Index i, Eigen::Index n_keys) {
  return mask == Mask::causal ? i + 1 : n_keys;
}

// Replaces each row of `scores` by its softmax over the visible keys and
// zeroes the rest. Subtracting the row maximum keeps exp() from overflowing.
template <class S>
void masked_softmax_rows(Mat<S>& scores, Mask mask) {
  for (Eigen::Index i = 0; i < scores.rows(); ++i) {
    const Eigen::Index visible = visible_keys(mask, i, scores.cols());
    auto row = scores.row(i);
    const S max = row.head(visible).maxCoeff();
    row.head(visible) = (row.head(visible).array() - max).exp();
    row.head(visible) /= row.head(visible).sum();
    row.tail(scores.cols() - visible).setZero();
  }
}

template <class S>
Var<S> attention_head(Var<S> Q, Var<S> K, Var<S> V, Mask mask) {
  require(Q.cols() == K.cols(), "attention_head: Q and K have different widths");
  require(K.rows() == V.rows(), "attention_head: K and V have different row counts");
  require(mask == Mask::bidirectional || Q.rows() == K.rows(),
          "attention_head: a causal mask needs as many queries as keys");
  require(K.rows() > 0, "attention_head: no keys");
  const S c = S(1) / std::sqrt(S(Q.cols()));
  Mat<S> A = c * Q.value() * K.value().transpose();
  masked_softmax_rows(A, mask);
  Tape<S>& tape = Q.tape();
  Var<S> head = tape.output(A * V.value(), {Q, K, V});
  tape.on_backward(head, [Q, K, V, head, c, A = std::move(A)] {
    const Mat<S>& dH = head.grad();
    if (V.requires_grad()) V.grad().noalias() += A.transpose() * dH;
    if (!Q.requires_grad() && !K.requires_grad()) return;
    const Mat<S> dA = dH * V.value().transpose();
    const Mat<S> dS =
        (A.array() * (dA.array().colwise() - (A.array() * dA.array()).rowwise().sum())).matrix();
    if (Q.requires_grad()) Q.grad().noalias() += c * dS * K.value();
    if (K.requires_grad()) K.grad().noalias() += c * dS.transpose() * Q.value();
  });
  return head;
}

// SA = [head_1 … head_H]: head h attends with the h-th column blocks of Q, K
// (width d_h = Q.cols()/H) and V (width V.cols()/H).
template <class S>
Var<S> self_attention(Var<S> Q, Var<S> K, Var<S> V, int heads, Mask mask) {
  require(heads > 0 && Q.cols() % heads == 0 && V.cols() % heads == 0,
          "self_attention: " + std::to_string(heads) + " heads do not divide the widths of Q (" +
              std::to_string(Q.cols()) + ") and V (" + std::to_string(V.cols()) + ")");
  const Eigen::Index d_h = Q.cols() / heads, d_v = V.cols() / heads;
  std::vector<Var<S>> head(heads);
  for (int h = 0; h < heads; ++h)
    head[h] = attention_head(slice_cols(Q, h * d_h, d_h), slice_cols(K, h * d_h, d_h),
                             slice_cols(V, h * d_v, d_v), mask);
  return concat_cols(head);
}

// MHA(X) = SA(X) W_O with queries X W_Q, keys X W_K, values X W_V.
template <class S>
Var<S> multi_head_attention(Var<S> X, Var<S> W_Q, Var<S> W_K, Var<S> W_V, Var<S> W_O, int heads, Mask mask) {
  Var<S> SA = self_attention(matmul(X, W_Q), matmul(X, W_K), matmul(X, W_V), heads, mask);
  return matmul(SA, W_O);
}

}  // namespace qkvlab::engine
