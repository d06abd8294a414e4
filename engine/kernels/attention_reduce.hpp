// Causal softmax attention that reduces its pattern instead of keeping it, the
// CPU kernel of Backend::attention_reduce (engine/backend.hpp). For one
// (sequence b, head h), the queries are taken `block` at a time: for the block
// of queries t0 … t0 + rows − 1 only the keys j < t0 + rows can be seen, so
//   S_blk = scale · q_h[t0 …] k_g[0 … t0 + rows)ᵀ,  P_blk = causal softmax rows,
//   z_h[t0 …] = P_blk v_g[0 … t0 + rows),
// and the rows of P_blk are reduced (reduce_pattern_rows) before the next
// block overwrites them: one block of rows × T values per head at a time,
// never the T × T pattern. The rows are those of attention_forward_head
// (engine/kernels/attention.hpp): the same products per row and the same
// softmax, with the masked keys left out (they add exact zeros there), and
// the same product type (product.hpp: bf16 operands in a bf16 training run's
// validation, float32 in the analyses).
// The rows are reduced by pattern_reduction.hpp's reduce_pattern_rows, the
// definition the analyses also apply to whole patterns.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "engine/blas.hpp"
#include "engine/kernel_types.hpp"
#include "engine/kernels/attention.hpp"
#include "engine/kernels/pattern_reduction.hpp"

namespace qkvlab::engine::kernels {

// One (b, h) of a plain shape; `scratch` holds block × T values.
template <class S>
void attention_reduce_head(const AttentionShape& s, int b, int h, S scale, const S* q, KvHeads<S> k, KvHeads<S> v,
                           int block, S* scratch, S* z, const PatternSums& out, WeightType products) {
  const int g = h / s.group(), T = s.T;
  const int ldq = s.H * s.dk, ldz = s.H * s.dv;
  const std::size_t row0 = std::size_t(b) * T, at = (std::size_t(b) * s.H + h) * T;
  const S* Q = q + row0 * ldq + std::size_t(h) * s.dk;
  const View<const S> K = sequence_head(s, b, g, k, s.dk), V = sequence_head(s, b, g, v, s.dv);
  S* Z = z + row0 * ldz + std::size_t(h) * s.dv;
  if (out.columns) std::fill_n(out.columns + at, T, 0.0);
  for (int t0 = 0; t0 < T; t0 += block) {
    const int rows = std::min(block, T - t0), J = t0 + rows;
    gemm_serial_as(products, Trans::none, Trans::transpose, rows, J, s.dk, scale, Q + std::size_t(t0) * ldq, ldq,
                   K.data, K.ld, S(0), scratch, J);
    for (int r = 0; r < rows; ++r) causal_softmax_row(t0 + r, J, scratch + std::size_t(r) * J);
    if (out.columns)
      reduce_pattern_rows(scratch, std::size_t(J), t0, rows, out.columns + at, out.mass + at + t0,
                          out.entropy ? out.entropy + at + t0 : nullptr);
    gemm_serial_as(products, Trans::none, Trans::none, rows, s.dv, J, S(1), scratch, J, V.data, V.ld, S(0),
                   Z + std::size_t(t0) * ldz, ldz);
  }
}

}  // namespace qkvlab::engine::kernels
