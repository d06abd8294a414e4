// Products and copies on column-major device buffers, for gpu/'s column-major
// users (bench/gpu_bench.cpp). The models run on
// the backend interface instead (gpu/cuda_backend.hpp). No CUDA in this header.
//
// Conventions:
// - Every pointer is device memory (DeviceBuffer<T>::data()); T is float or double.
// - A matrix is column-major and packed, as Eigen's Mat<S> stores it; rows are
//   tokens or samples, columns features (row-vector convention, X ∈ R^{n×d},
//   projections X W). gemm also takes row-major operands (Layout::row_major).
// - Batched data lies matrix after matrix: matrix b of an n×m batch starts at b·n·m.
// - Work is queued on the default stream.
// - Errors (no device, a cuBLAS status) throw std::runtime_error; inconsistent
//   sizes throw std::invalid_argument.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qkvlab::gpu {

// ---- Products (cuBLAS; TF32 off, so float products round as float) --------
enum class Op { none, transpose };
enum class Layout { col_major, row_major };

// C ← α op(A) op(B) + β C with op(A) m×k, op(B) k×n, C m×n, every matrix
// packed in `layout`.
template <class T>
void gemm(Op op_a, Op op_b, int m, int n, int k, T alpha, const T* A, const T* B, T beta, T* C,
          Layout layout = Layout::col_major);

// `batch` independent products C_b ← α op(A_b) op(B_b) + β C_b, with A_b at
// A + b·stride_a (likewise B, C); a stride of 0 reuses one matrix for every b.
template <class T>
void gemm_strided_batched(Op op_a, Op op_b, int m, int n, int k, T alpha, const T* A, std::int64_t stride_a,
                          const T* B, std::int64_t stride_b, T beta, T* C, std::int64_t stride_c, int batch,
                          Layout layout = Layout::col_major);

// Y = X (count values, device to device).
template <class T> void copy(std::size_t count, const T* X, T* Y);

}  // namespace qkvlab::gpu
