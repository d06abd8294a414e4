// Causal softmax attention of one (sequence b, head h), the CPU kernel:
//   S = scale · q_h k_gᵀ (T×T),  P = softmax of each row t over the keys j ≤ t
//   (P_tj = 0 for j > t),  z_h = P v_g,
// with g = h / (H / Hkv) the key/value head that query head h reads. Backward,
// for the heads h of one key/value group g in head order (so dk_g and dv_g
// add in a fixed order):
//   dP = dz_h v_gᵀ,  dS = P ⊙ (dP − rowsum(P ⊙ dP)),
//   dq_h += scale dS k_g,  dk_g += scale dSᵀ q_h,  dv_g += Pᵀ dz_h.
// Products are serial GEMMs on strided views of the (N, heads·d) tensors
// (engine/blas.hpp gemm_serial; the forward's keys and values head by head where
// they live: KvHeads); the softmax sums in double.
#pragma once

#include <cmath>
#include <cstddef>

#include "engine/blas.hpp"
#include "engine/kernel_types.hpp"
#include "engine/kernels/math.hpp"

namespace qkvlab::engine::kernels {

// Row t of S (length S) becomes the masked softmax row of P.
template <class S>
void causal_softmax_row(int t, int T_, S* row) {
  S m = row[0];
#pragma omp simd reduction(max : m)
  for (int j = 1; j <= t; ++j) m = row[j] > m ? row[j] : m;
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j <= t; ++j) {
    row[j] = exp_of(row[j] - m);
    sum += double(row[j]);
  }
  const S inv = S(1 / sum);
  for (int j = 0; j <= t; ++j) row[j] *= inv;
  for (int j = t + 1; j < T_; ++j) row[j] = S(0);
}

// Key/value head g's rows of sequence b (of k or v: engine/kernel_types.hpp's KvHeads).
template <class S>
View<const S> sequence_head(const AttentionShape& s, int b, int g, KvHeads<S> heads, int width) {
  const View<const S> head = heads.head(g, s.Hkv, width);
  return {head.data + std::size_t(b) * s.kv_rows() * head.ld, head.ld};
}

// Query t of the T is position past + t and sees keys j ≤ past + t (engine/kernel_types.hpp).
template <class S>
void attention_forward_head(const AttentionShape& s, int b, int h, S scale, const S* q, KvHeads<S> k, KvHeads<S> v,
                            S* pattern, S* z) {
  const int g = h / s.group(), J = s.keys();
  const int ldq = s.H * s.dk, ldz = s.H * s.dv;
  const std::size_t row0 = std::size_t(b) * s.T;
  const S* Q = q + row0 * ldq + std::size_t(h) * s.dk;
  const View<const S> K = sequence_head(s, b, g, k, s.dk), V = sequence_head(s, b, g, v, s.dv);
  S* P = pattern + (std::size_t(b) * s.H + h) * s.T * J;
  S* Z = z + row0 * ldz + std::size_t(h) * s.dv;
  gemm_serial(Trans::none, Trans::transpose, s.T, J, s.dk, scale, Q, ldq, K.data, K.ld, S(0), P, J);
  for (int t = 0; t < s.T; ++t) causal_softmax_row(s.past + t, J, P + std::size_t(t) * J);
  gemm_serial(Trans::none, Trans::none, s.T, s.dv, J, S(1), P, J, V.data, V.ld, S(0), Z, ldz);
}

// Backward of the heads of key/value group g of sequence b (a plain shape); `scratch` holds T·T values.
template <class S>
void attention_backward_group(const AttentionShape& s, int b, int g, S scale, const S* q, const S* k, const S* v,
                              const S* pattern, const S* dz, S* dq, S* dk, S* dv, S* scratch) {
  const int ldq = s.H * s.dk, ldk = s.Hkv * s.dk, ldv = s.Hkv * s.dv, ldz = s.H * s.dv;
  const std::size_t row0 = std::size_t(b) * s.T;
  const S* K = k + row0 * ldk + std::size_t(g) * s.dk;
  const S* V = v + row0 * ldv + std::size_t(g) * s.dv;
  S* dK = dk + row0 * ldk + std::size_t(g) * s.dk;
  S* dV = dv + row0 * ldv + std::size_t(g) * s.dv;
  for (int h = g * s.group(); h < (g + 1) * s.group(); ++h) {
    const S* Q = q + row0 * ldq + std::size_t(h) * s.dk;
    const S* P = pattern + (std::size_t(b) * s.H + h) * s.T * s.T;
    const S* dZ = dz + row0 * ldz + std::size_t(h) * s.dv;
    S* dQ = dq + row0 * ldq + std::size_t(h) * s.dk;
    S* dS = scratch;
    gemm_serial(Trans::none, Trans::transpose, s.T, s.T, s.dv, S(1), dZ, ldz, V, ldv, S(0), dS, s.T);  // dP = dZ Vᵀ
    for (int t = 0; t < s.T; ++t) {
      const S* p = P + std::size_t(t) * s.T;
      S* d = dS + std::size_t(t) * s.T;
      double dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int j = 0; j <= t; ++j) dot += double(p[j]) * double(d[j]);
      const S c = S(dot);
      for (int j = 0; j <= t; ++j) d[j] = p[j] * (d[j] - c);
      for (int j = t + 1; j < s.T; ++j) d[j] = S(0);
    }
    gemm_serial(Trans::none, Trans::none, s.T, s.dk, s.T, scale, dS, s.T, K, ldk, S(1), dQ, ldq);
    gemm_serial(Trans::transpose, Trans::none, s.T, s.dk, s.T, scale, dS, s.T, Q, ldq, S(1), dK, ldk);
    gemm_serial(Trans::transpose, Trans::none, s.T, s.dv, s.T, S(1), P, s.T, dZ, ldz, S(1), dV, ldv);
  }
}

}  // namespace qkvlab::engine::kernels
