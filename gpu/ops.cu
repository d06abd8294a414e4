// Implementation of gpu/ops.hpp: cuBLAS products on packed column-major buffers.
//
// Row-major operands of gemm (the one trick to know). cuBLAS is column-major.
// A row-major buffer of a matrix M, read column-major, is Mᵀ. So row-major
// C = op(A) op(B) is computed as the column-major product
//   Cᵀ = op(B)ᵀ op(A)ᵀ,
// i.e. the same call with A and B swapped and m and n swapped; the op flags
// stay as they are, because op(A)ᵀ is op applied to the column-major view Aᵀ.
#include "gpu/cublas.cuh"
#include "gpu/device_buffer.hpp"
#include "gpu/ops.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace qkvlab::gpu {

namespace {

cublasOperation_t to_cublas(Op op) { return op == Op::none ? CUBLAS_OP_N : CUBLAS_OP_T; }

// Column-major, packed: op(A) m×k is stored m×k (lda = m) or k×m (lda = k).
template <class T>
void gemm_col_major(Op op_a, Op op_b, int m, int n, int k, T alpha, const T* A, std::int64_t sa, const T* B,
                    std::int64_t sb, T beta, T* C, std::int64_t sc, int batch) {
  const int lda = std::max(1, op_a == Op::none ? m : k);
  const int ldb = std::max(1, op_b == Op::none ? k : n);
  const int ldc = std::max(1, m);
  QKVLAB_CUBLAS_CHECK(detail::gemm_call(to_cublas(op_a), to_cublas(op_b), m, n, k, &alpha, A, lda, sa, B, ldb, sb,
                                        &beta, C, ldc, sc, batch));
}

}  // namespace

template <class T>
void gemm_strided_batched(Op op_a, Op op_b, int m, int n, int k, T alpha, const T* A, std::int64_t stride_a,
                          const T* B, std::int64_t stride_b, T beta, T* C, std::int64_t stride_c, int batch,
                          Layout layout) {
  if (m < 0 || n < 0 || k < 0 || batch < 1) throw std::invalid_argument("gemm: negative dimension or empty batch");
  if (m == 0 || n == 0) return;
  if (layout == Layout::col_major)
    gemm_col_major(op_a, op_b, m, n, k, alpha, A, stride_a, B, stride_b, beta, C, stride_c, batch);
  else  // Cᵀ = op(B)ᵀ op(A)ᵀ in column-major: see the top of this file
    gemm_col_major(op_b, op_a, n, m, k, alpha, B, stride_b, A, stride_a, beta, C, stride_c, batch);
}

template <class T>
void gemm(Op op_a, Op op_b, int m, int n, int k, T alpha, const T* A, const T* B, T beta, T* C, Layout layout) {
  gemm_strided_batched(op_a, op_b, m, n, k, alpha, A, 0, B, 0, beta, C, 0, 1, layout);
}

template <class T> void copy(std::size_t count, const T* X, T* Y) {
  detail::copy_on_device(Y, X, count * sizeof(T));
}

#define QKVLAB_GPU_OPS(T)                                                                                           \
  template void gemm<T>(Op, Op, int, int, int, T, const T*, const T*, T, T*, Layout);                              \
  template void gemm_strided_batched<T>(Op, Op, int, int, int, T, const T*, std::int64_t, const T*, std::int64_t, \
                                        T, T*, std::int64_t, int, Layout);                                          \
  template void copy<T>(std::size_t, const T*, T*);

QKVLAB_GPU_OPS(float)
QKVLAB_GPU_OPS(double)

}  // namespace qkvlab::gpu
