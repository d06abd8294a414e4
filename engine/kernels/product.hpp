// A serial product at a product type (engine/backend.hpp's set_product_type), the CPU's one
// definition of it, which the backend's gemm (tile by tile) and the attention kernels use:
//   f32   C = α op(A) op(B) + β C, gemm_serial;
//   bf16  the same over copies of the stored blocks of op(A) and op(B) rounded to the nearest bf16
//         (engine/weight_type.hpp's round_to_bf16): gemm_serial's result on the rounded operands,
//         bit for bit (the products of two bf16 values are exact in float; the sums are float).
// Only the two blocks the product reads are copied (m·k and k·n values, per thread); copies over
// kKeptBf16Values values are released after the product (a head's product at a 50k vocabulary
// would otherwise hold about 77 MB in each of the pool's threads for the life of the process).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "engine/blas.hpp"
#include "engine/weight_type.hpp"

namespace qkvlab::engine::kernels {

// The stored block rows × cols of X (leading dimension ld) rounded to bf16, into `out` (ld cols).
template <class S>
const S* rounded_to_bf16(int rows, int cols, const S* X, int ld, std::vector<S>& out) {
  out.resize(std::size_t(rows) * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      out[std::size_t(r) * cols + c] = S(round_to_bf16(float(X[std::size_t(r) * ld + c])));
  return out.data();
}

inline constexpr std::size_t kKeptBf16Values = std::size_t(1) << 22;  // 16 MiB of floats

template <class S>
void gemm_serial_as(WeightType type, Trans ta, Trans tb, int m, int n, int k, S alpha, const S* A, int lda,
                    const S* B, int ldb, S beta, S* C, int ldc) {
  if (type != WeightType::bf16) return gemm_serial(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  thread_local std::vector<S> a16, b16;
  const bool an = ta == Trans::none, bn = tb == Trans::none;  // stored: m × k or k × m; k × n or n × k
  A = rounded_to_bf16(an ? m : k, an ? k : m, A, lda, a16);
  B = rounded_to_bf16(bn ? k : n, bn ? n : k, B, ldb, b16);
  gemm_serial(ta, tb, m, n, k, alpha, A, std::max(1, an ? k : m), B, std::max(1, bn ? n : k), beta, C, ldc);
  for (std::vector<S>* copy : {&a16, &b16})
    if (copy->capacity() > kKeptBf16Values) std::vector<S>().swap(*copy);
}

}  // namespace qkvlab::engine::kernels
