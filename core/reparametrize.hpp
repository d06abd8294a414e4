// Changes of basis of attention weights, blocks and models (Query-weight elimination, §3–4, §8.2).
// Row-vector convention: a hidden state X becomes X T.
//
//   reparametrize(w, T):          W_{Q,K,V} ↦ T⁻¹ W_{Q,K,V}, W_O unchanged
//                                 (Lemma 3.1: MHA(X T; ·) = MHA(X; W))
//   intertwine(b, T_in, T_out):   the block seen in input basis T_in, output basis T_out
//                                 (Lemma 8.5: B'(X T_in) = B(X) T_out when the MLP has no skip;
//                                  with both skips it needs T_in = T_out)
//   change_model_basis(m, T):     T[i] is the input basis of layer i (i = 0 … L−1) and T[L]
//                                 the basis of the final state: E' = E T_0, P' = P T_0,
//                                 block i intertwined with (T_i, T_{i+1}), U' = T_L⁻¹ U
//                                 (untied; a tied head is untied, Remark 4).
#pragma once

#include "core/linalg.hpp"
#include "core/model.hpp"

namespace qkvlab {

template <class S> AttentionWeights<S> reparametrize(const AttentionWeights<S>& w, const ChangeOfBasis<S>& T) {
  AttentionWeights<S> r = w;
  r.W_Q = T.T_inv * w.W_Q;
  r.W_K = T.T_inv * w.W_K;
  r.W_V = T.T_inv * w.W_V;
  return r;
}

template <class S>
BlockWeights<S> intertwine(const BlockWeights<S>& b, const ChangeOfBasis<S>& T_in, const ChangeOfBasis<S>& T_out) {
  BlockWeights<S> r;
  r.attn = reparametrize<S>(b.attn, T_in);
  r.attn.W_O = b.attn.W_O * T_in.T;
  r.W_1 = T_in.T_inv * b.W_1;
  r.W_2 = b.W_2 * T_out.T;
  return r;
}

template <class S>
NormFreeTransformer<S> change_model_basis(const NormFreeTransformer<S>& m, const std::vector<ChangeOfBasis<S>>& T) {
  NormFreeTransformer<S> r = m;
  r.E = m.E * T.front().T;
  r.P = m.P * T.front().T;
  r.U = T.back().T_inv * m.head();
  r.tied = false;
  for (std::size_t i = 0; i < r.blocks.size(); ++i) r.blocks[i] = intertwine<S>(m.blocks[i], T[i], T[i + 1]);
  return r;
}

// The same basis T at every layer boundary (Theorem 4.1, Lemma 8.6).
template <class S>
NormFreeTransformer<S> change_model_basis(const NormFreeTransformer<S>& m, const ChangeOfBasis<S>& T) {
  return change_model_basis<S>(m, std::vector<ChangeOfBasis<S>>(std::size_t(m.layers) + 1, T));
}

// The basis that eliminates the query weight of a block: T = W_Q.
template <class S> ChangeOfBasis<S> query_basis(const BlockWeights<S>& b) { return change_of_basis<S>(b.attn.W_Q); }

// Instantiated once per scalar in core/instances_*.cpp (P: extern here, nothing there).
#define QKVLAB_REPARAMETRIZE_INSTANCES(P, S)                                                                 \
  P template AttentionWeights<S> reparametrize<S>(const AttentionWeights<S>&, const ChangeOfBasis<S>&);     \
  P template BlockWeights<S> intertwine<S>(const BlockWeights<S>&, const ChangeOfBasis<S>&,                 \
                                           const ChangeOfBasis<S>&);                                        \
  P template NormFreeTransformer<S> change_model_basis<S>(const NormFreeTransformer<S>&,                     \
                                                         const std::vector<ChangeOfBasis<S>>&);             \
  P template NormFreeTransformer<S> change_model_basis<S>(const NormFreeTransformer<S>&,                     \
                                                         const ChangeOfBasis<S>&);                          \
  P template ChangeOfBasis<S> query_basis<S>(const BlockWeights<S>&);
#define QKVLAB_REPARAMETRIZE_EXTERN(S) QKVLAB_REPARAMETRIZE_INSTANCES(extern, S)
QKVLAB_EXTERN_INSTANCES(QKVLAB_REPARAMETRIZE_EXTERN)

}  // namespace qkvlab
