// The head-wise freedoms of attention weights (row-vector convention; docs/math/extensions.md):
// transformations of (W_Q, W_K) and (W_V, W_O) that leave grouped_attention unchanged when
// their hypotheses hold (Query-weight elimination Prop. 4.2 and its analogues under RoPE, GQA and QK-norm).
//
//   with_qk_freedom(w, M):  W_Q^h ↦ W_Q^h M_g(h) for every query head h, W_K^g ↦ W_K^g M_g⁻ᵀ:
//                           one M_g ∈ GL(d_h) per key head, shared by the query heads of its group;
//   with_vo_freedom(w, N):  W_V^g ↦ W_V^g N_g, the rows of W_O that read head h ↦ N_g(h)⁻¹ W_O^h;
//   with_input_basis(w, T): W_{Q,K,V} ↦ T⁻¹ W_{Q,K,V} (Lemma 3.1; the input becomes X T);
//   complex_linear(A, B):   [[A, B], [−B, A]] (d_h × d_h from d_h/2 × d_h/2 blocks): the real form of
//                           z ↦ z (A + iB) on z_i = x_i + i x_{i+d_h/2}, RoPE's rotate_half pairs.
//                           Diagonal A, B: a complex scaling per frequency pair.
#pragma once

#include "core/grouped_attention.hpp"
#include "core/linalg.hpp"
#include "core/reparametrize.hpp"

#include <vector>

namespace qkvlab {

template <class S>
GroupedAttention<S> with_qk_freedom(const GroupedAttention<S>& w, const std::vector<ChangeOfBasis<S>>& M) {
  const Eigen::Index dh = w.head_dim();
  GroupedAttention<S> r = w;
  for (int h = 0; h < w.heads; ++h) r.W_Q.middleCols(h * dh, dh) = w.W_Q.middleCols(h * dh, dh) * M[w.group(h)].T;
  for (int g = 0; g < w.kv_heads; ++g)
    r.W_K.middleCols(g * dh, dh) = w.W_K.middleCols(g * dh, dh) * M[g].T_inv.transpose();
  return r;
}

template <class S>
GroupedAttention<S> with_vo_freedom(const GroupedAttention<S>& w, const std::vector<ChangeOfBasis<S>>& N) {
  const Eigen::Index dh = w.head_dim();
  GroupedAttention<S> r = w;
  for (int g = 0; g < w.kv_heads; ++g) r.W_V.middleCols(g * dh, dh) = w.W_V.middleCols(g * dh, dh) * N[g].T;
  for (int h = 0; h < w.heads; ++h) r.W_O.middleRows(h * dh, dh) = N[w.group(h)].T_inv * w.W_O.middleRows(h * dh, dh);
  return r;
}

template <class S> GroupedAttention<S> with_input_basis(const GroupedAttention<S>& w, const ChangeOfBasis<S>& T) {
  GroupedAttention<S> r = w;
  static_cast<AttentionWeights<S>&>(r) = reparametrize<S>(w, T);
  return r;
}

template <class S> Mat<S> complex_linear(const Mat<S>& A, const Mat<S>& B) {
  const Eigen::Index m = A.rows();
  Mat<S> M(2 * m, 2 * m);
  M << A, B, -B, A;
  return M;
}

}  // namespace qkvlab
