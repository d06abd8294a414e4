// Linear attention (no softmax, no scale), row-vector convention:
//   out = (M ⊙ Q Kᵀ) V,  i.e. out_i = Σ_{j visible to i} (q_i · k_j) v_j,
// with M the causal (j ≤ i) or bidirectional (all ones) mask of attention.hpp.
// Backward with P = M ⊙ Q Kᵀ: dV += Pᵀ dO, dP = M ⊙ (dO Vᵀ), dQ += dP K, dK += dPᵀ Q.
#pragma once

#include "engine/ops/attention.hpp"
#include "engine/tape.hpp"

namespace qkvlab::engine {

// Zeroes the entries of P that the mask hides.
template <class S>
void apply_mask(Mat<S>& P, Mask mask) {
  for (Eigen::Index i = 0; i < P.rows(); ++i) {
    const Eigen::Index visible = visible_keys(mask, i, P.cols());
    P.row(i).tail(P.cols() - visible).setZero();
  }
}

template <class S>
Var<S> linear_attention(Var<S> Q, Var<S> K, Var<S> V, Mask mask) {
  require(Q.cols() == K.cols(), "linear_attention: Q and K have different widths");
  require(K.rows() == V.rows(), "linear_attention: K and V have different row counts");
  require(mask == Mask::bidirectional || Q.rows() == K.rows(),
          "linear_attention: a causal mask needs as many queries as keys");
  Mat<S> P = Q.value() * K.value().transpose();
  apply_mask(P, mask);
  Tape<S>& tape = Q.tape();
  Var<S> out = tape.output(P * V.value(), {Q, K, V});
  tape.on_backward(out, [Q, K, V, out, mask, P = std::move(P)] {
    const Mat<S>& dO = out.grad();
    if (V.requires_grad()) V.grad().noalias() += P.transpose() * dO;
    if (!Q.requires_grad() && !K.requires_grad()) return;
    Mat<S> dP = dO * V.value().transpose();
    apply_mask(dP, mask);
    if (Q.requires_grad()) Q.grad().noalias() += dP * K.value();
    if (K.requires_grad()) K.grad().noalias() += dP.transpose() * Q.value();
  });
  return out;
}

}  // namespace qkvlab::engine
