// Causal softmax attention of one (sequence b, head h), the CPU kernel:
//   S = scale · q_h k_gᵀ (T×T),  P = softmax of each row t over the keys j ≤ t
//   (P_tj = 0 for j > t),  z_h = P v_g,
// with g = h / (H / Hkv) the key/value head that query head h reads. Backward,
// for the heads h of one key/value group g in head order (so dk_g and dv_g
// add in a fixed order):
//   dP = dz_h v_gᵀ,  dS = P ⊙ (dP − rowsum(P ⊙ dP)),
//   dq_h += scale dS k_g,  dk_g += scale dSᵀ q_h,  dv_g += Pᵀ dz_h.
// With segments (engine/kernel_types.hpp; ResFormer's Eq. 2), S has one T×J block per segment side
// by side, the softmax runs over every segment's unmasked keys together, z_h = Σ_s P_s v_{s,g}, and
// the backward gives each segment's dk, dv by the same formulas on its block.
// Products are serial GEMMs on strided views of the (N, heads·d) tensors
// (engine/blas.hpp gemm_serial; the forward's keys and values head by head where
// they live: KvHeads), at the backend's product type (kernels/product.hpp: with bf16, q and k, P
// and v, dz and v, dS and k, dS and q, P and dz rounded to bf16 before their product, as PyTorch's
// bf16 autocast runs eager attention); the softmax and its backward are float, summing in double.
#pragma once

#include <cmath>
#include <cstddef>

#include "engine/blas.hpp"
#include "engine/kernel_types.hpp"
#include "engine/kernels/math.hpp"
#include "engine/kernels/product.hpp"
#include "engine/weight_type.hpp"

namespace qkvlab::engine::kernels {

// Row t of S (`segments` segments of T_ values, segment s at s·T_) becomes the masked softmax row of
// P: one softmax over the keys j ≤ t of every segment together (the segments' sums added in order),
// zero above the diagonal of each.
template <class S>
void causal_softmax_row(int t, int T_, S* row, int segments = 1) {
  S m = row[0];
  for (int seg = 0; seg < segments; ++seg) {
    const S* r = row + std::size_t(seg) * T_;
#pragma omp simd reduction(max : m)
    for (int j = seg ? 0 : 1; j <= t; ++j) m = r[j] > m ? r[j] : m;
  }
  double sum = 0;
  for (int seg = 0; seg < segments; ++seg) {
    S* r = row + std::size_t(seg) * T_;
    double part = 0;
#pragma omp simd reduction(+ : part)
    for (int j = 0; j <= t; ++j) {
      r[j] = exp_of(r[j] - m);
      part += double(r[j]);
    }
    sum += part;
  }
  const S inv = S(1 / sum);
  for (int seg = 0; seg < segments; ++seg) {
    S* r = row + std::size_t(seg) * T_;
    for (int j = 0; j <= t; ++j) r[j] *= inv;
    for (int j = t + 1; j < T_; ++j) r[j] = S(0);
  }
}

// Key/value head g's rows of sequence b (of k or v: engine/kernel_types.hpp's KvHeads; g < s.kv_heads(),
// segment g / Hkv).
template <class S>
View<const S> sequence_head(const AttentionShape& s, int b, int g, KvHeads<S> heads, int width) {
  const View<const S> head = heads.head(g, s.kv_heads(), width);
  return {head.data + std::size_t(b) * s.kv_rows() * head.ld, head.ld};
}

// Query t of the T is position past + t and sees keys j ≤ past + t (engine/kernel_types.hpp).
template <class S>
void attention_forward_head(const AttentionShape& s, int b, int h, S scale, const S* q, KvHeads<S> k, KvHeads<S> v,
                            S* pattern, S* z, WeightType products = WeightType::f32) {
  const int g = h / s.group(), J = s.keys(), C = s.columns();
  const int ldq = s.H * s.dk, ldz = s.H * s.dv;
  const std::size_t row0 = std::size_t(b) * s.T;
  const S* Q = q + row0 * ldq + std::size_t(h) * s.dk;
  S* P = pattern + (std::size_t(b) * s.H + h) * s.T * C;
  S* Z = z + row0 * ldz + std::size_t(h) * s.dv;
  for (int seg = 0; seg < s.segments; ++seg) {
    const View<const S> K = sequence_head(s, b, seg * s.Hkv + g, k, s.dk);
    gemm_serial_as(products, Trans::none, Trans::transpose, s.T, J, s.dk, scale, Q, ldq, K.data, K.ld, S(0),
                   P + seg * J, C);
  }
  for (int t = 0; t < s.T; ++t) causal_softmax_row(s.past + t, J, P + std::size_t(t) * C, s.segments);
  for (int seg = 0; seg < s.segments; ++seg) {
    const View<const S> V = sequence_head(s, b, seg * s.Hkv + g, v, s.dv);
    gemm_serial_as(products, Trans::none, Trans::none, s.T, s.dv, J, S(1), P + seg * J, C, V.data, V.ld,
                   S(seg ? 1 : 0), Z, ldz);
  }
}

// Row t of dS (segments of T values, as causal_softmax_row's) from dP in place:
// dS = P ⊙ (dP − Σ_j P_tj dP_tj), the sum over the keys j ≤ t of every segment, in order.
template <class S>
void causal_softmax_backward_row(int t, int T_, const S* p, S* d, int segments) {
  double dot = 0;
  for (int seg = 0; seg < segments; ++seg) {
    const S* ps = p + std::size_t(seg) * T_;
    const S* ds = d + std::size_t(seg) * T_;
    double part = 0;
#pragma omp simd reduction(+ : part)
    for (int j = 0; j <= t; ++j) part += double(ps[j]) * double(ds[j]);
    dot += part;
  }
  const S c = S(dot);
  for (int seg = 0; seg < segments; ++seg) {
    const S* ps = p + std::size_t(seg) * T_;
    S* ds = d + std::size_t(seg) * T_;
    for (int j = 0; j <= t; ++j) ds[j] = ps[j] * (ds[j] - c);
    for (int j = t + 1; j < T_; ++j) ds[j] = S(0);
  }
}

// Backward of the heads of key/value group g of sequence b (a plain shape), every segment's key/value
// head g (k, v, dk, dv of (N, segments·Hkv·d)); `scratch` holds T·columns() values.
template <class S>
void attention_backward_group(const AttentionShape& s, int b, int g, S scale, const S* q, const S* k, const S* v,
                              const S* pattern, const S* dz, S* dq, S* dk, S* dv, S* scratch,
                              WeightType products = WeightType::f32) {
  const int ldq = s.H * s.dk, ldk = s.kv_heads() * s.dk, ldv = s.kv_heads() * s.dv, ldz = s.H * s.dv;
  const int T = s.T, C = s.columns();
  const std::size_t row0 = std::size_t(b) * T;
  auto at = [&](auto* x, int ld, int seg, int w) { return x + row0 * ld + std::size_t(seg * s.Hkv + g) * w; };
  for (int h = g * s.group(); h < (g + 1) * s.group(); ++h) {
    const S* Q = q + row0 * ldq + std::size_t(h) * s.dk;
    const S* P = pattern + (std::size_t(b) * s.H + h) * T * C;
    const S* dZ = dz + row0 * ldz + std::size_t(h) * s.dv;
    S* dQ = dq + row0 * ldq + std::size_t(h) * s.dk;
    S* dS = scratch;
    for (int seg = 0; seg < s.segments; ++seg)  // dP = dZ Vᵀ
      gemm_serial_as(products, Trans::none, Trans::transpose, T, T, s.dv, S(1), dZ, ldz, at(v, ldv, seg, s.dv), ldv,
                     S(0), dS + seg * T, C);
    for (int t = 0; t < T; ++t) causal_softmax_backward_row(t, T, P + std::size_t(t) * C, dS + std::size_t(t) * C,
                                                            s.segments);
    for (int seg = 0; seg < s.segments; ++seg) {
      gemm_serial_as(products, Trans::none, Trans::none, T, s.dk, T, scale, dS + seg * T, C, at(k, ldk, seg, s.dk),
                     ldk, S(1), dQ, ldq);
      gemm_serial_as(products, Trans::transpose, Trans::none, T, s.dk, T, scale, dS + seg * T, C, Q, ldq, S(1),
                     at(dk, ldk, seg, s.dk), ldk);
      gemm_serial_as(products, Trans::transpose, Trans::none, T, s.dv, T, S(1), P + seg * T, C, dZ, ldz, S(1),
                     at(dv, ldv, seg, s.dv), ldv);
    }
  }
}

}  // namespace qkvlab::engine::kernels
