// The reductions of token-major states on the CUDA backend (CUDA-only; the definition is
// engine/backend.hpp's state_rows and state_gram, the CPU's engine/kernels/state_reduction.hpp).
// Row h_r (r < B·T) combined over its heads as there: h_r,c = x_r,c (concat) or
// Σ_k x_r,k·w+c / heads, heads in order (mean); all sums in double, in an order fixed by the shape:
//   norms   one block per row, a block tree over its columns (block_sum.cuh)
//   unit    one thread per (sequence b, column c): Σ_i h_bi,c / ‖h_bi‖ over i ascending, zero rows skipped;
//           the thread of column 0 also counts the sequence's non-zero rows
//   gram    the rows converted to double (to_double_kernel), then cuBLAS's double GEMM per sequence.
#pragma once

#include <cmath>
#include <cstddef>

#include "gpu/block_sum.cuh"
#include "gpu/kernels/launch.cuh"

namespace qkvlab::gpu::kernels {

struct StateRows {
  int T, heads, width;
  bool mean;
  __host__ __device__ int columns() const { return mean ? width : heads * width; }
  __device__ double entry(const float* X, std::size_t r, int c) const {
    const float* x = X + r * std::size_t(heads) * width;
    if (!mean) return double(x[c]);
    double h = 0;
    for (int k = 0; k < heads; ++k) h += double(x[std::size_t(k) * width + c]) / heads;
    return h;
  }
};

__global__ void state_norms_kernel(StateRows s, const float* X, double* norms) {
  const std::size_t r = blockIdx.x;
  double acc[1] = {0};
  for (int c = threadIdx.x; c < s.columns(); c += blockDim.x) {
    const double h = s.entry(X, r, c);
    acc[0] += h * h;
  }
  detail::block_sum<1>(acc);
  if (threadIdx.x == 0) norms[r] = sqrt(acc[0]);
}

__global__ void state_unit_kernel(int B, StateRows s, const float* X, const double* norms, double* unit,
                                  double* nonzero) {
  const int C = s.columns();
  QKVLAB_GRID_STRIDE(n, std::size_t(B) * C) {
    const std::size_t b = n / C, first = b * s.T;
    const int c = int(n % C);
    double sum = 0, count = 0;
    for (int i = 0; i < s.T; ++i) {
      const double norm = norms[first + i];
      if (norm == 0) continue;
      if (unit) sum += s.entry(X, first + i, c) / norm;
      count += 1;
    }
    if (unit) unit[n] = sum;
    if (nonzero && c == 0) nonzero[b] = count;
  }
}

__global__ void to_double_kernel(std::size_t count, const float* X, double* Y) {
  QKVLAB_GRID_STRIDE(i, count) Y[i] = double(X[i]);
}

}  // namespace qkvlab::gpu::kernels
