// Linear attention (no softmax) over a batch of prompts stacked by rows,
// row-vector convention. Prompt b is a block of T consecutive rows of K and V
// (rows b T … b T + T − 1); only its first `keys` rows are key/value sources
// (the mask P = diag(I_keys, 0) of docs/math/icl.md: the query token is no
// source). Its queries are q_rows consecutive rows of Q (prompt b: rows
// b q_rows … b q_rows + q_rows − 1), e.g. every token (q_rows = T, Q row-aligned
// with K) or only the last (q_rows = 1). With K_b, V_b the source rows and
// Q_b, O_b the prompt's query and output rows, and c a fixed scale:
//   forward   G_b = K_bᵀ V_b              (dk × dv, the linear-attention state, kept)
//             O_b = c Q_b G_b (+ O_b)      (accumulate: O += …, e.g. a residual or another head)
// which is c (Q_b K_bᵀ) V_b in the associative order, O(T dk dv) per prompt.
//   backward  dG_b = c Q_bᵀ dO_b,  dQ_b += c dO_b G_bᵀ,  dK_b += V_b dG_bᵀ,  dV_b += K_b dG_b
// (gradients accumulate, as every backward of engine/backend.hpp; rows of dK, dV
// that are no source get nothing). Built from the backend's batched strided
// gemm, like linear.hpp: each product is one gemm call over the B prompts.
#pragma once

#include <cstdint>

#include "engine/backend.hpp"
#include "engine/linear.hpp"

namespace qkvlab::engine {

struct LinearAttentionShape {
  int B = 1, T = 1, keys = 1, q_rows = 1, dk = 1, dv = 1;
};

// G holds B·dk·dv values (written); O is B·q_rows rows of width dv.
template <class S>
void linear_attention_forward(Backend<S>& be, const LinearAttentionShape& s, S c, View<const S> Q, View<const S> K,
                              View<const S> V, S* G, View<S> O, bool accumulate = false) {
  const std::int64_t state = std::int64_t(s.dk) * s.dv;
  be.gemm(Trans::transpose, Trans::none, s.dk, s.dv, s.keys, S(1), K.data, K.ld, std::int64_t(s.T) * K.ld, V.data,
          V.ld, std::int64_t(s.T) * V.ld, S(0), G, s.dv, state, s.B);
  be.gemm(Trans::none, Trans::none, s.q_rows, s.dv, s.dk, c, Q.data, Q.ld, std::int64_t(s.q_rows) * Q.ld, G, s.dv,
          state, accumulate ? S(1) : S(0), O.data, O.ld, std::int64_t(s.q_rows) * O.ld, s.B);
}

// dG is scratch of B·dk·dv values; dQ, dK, dV accumulate.
template <class S>
void linear_attention_backward(Backend<S>& be, const LinearAttentionShape& s, S c, View<const S> Q, View<const S> K,
                               View<const S> V, const S* G, View<const S> dO, View<S> dQ, View<S> dK, View<S> dV,
                               S* dG) {
  const std::int64_t state = std::int64_t(s.dk) * s.dv, q_stride = s.q_rows, kv_stride = s.T;
  be.gemm(Trans::transpose, Trans::none, s.dk, s.dv, s.q_rows, c, Q.data, Q.ld, q_stride * Q.ld, dO.data, dO.ld,
          q_stride * dO.ld, S(0), dG, s.dv, state, s.B);
  be.gemm(Trans::none, Trans::transpose, s.q_rows, s.dk, s.dv, c, dO.data, dO.ld, q_stride * dO.ld, G, s.dv, state,
          S(1), dQ.data, dQ.ld, q_stride * dQ.ld, s.B);
  be.gemm(Trans::none, Trans::transpose, s.keys, s.dk, s.dv, S(1), V.data, V.ld, kv_stride * V.ld, dG, s.dv, state,
          S(1), dK.data, dK.ld, kv_stride * dK.ld, s.B);
  be.gemm(Trans::none, Trans::none, s.keys, s.dv, s.dk, S(1), K.data, K.ld, kv_stride * K.ld, dG, s.dv, state, S(1),
          dV.data, dV.ld, kv_stride * dV.ld, s.B);
}

}  // namespace qkvlab::engine
