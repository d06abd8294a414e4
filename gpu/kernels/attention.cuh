// The row kernels of causal softmax attention on the CUDA backend (CUDA-only);
// the products around them are cuBLAS calls (cuda_backend.cu). Row t of a
// sequence's T×T pattern (query position t), one block per row, as
// engine/kernels/attention.hpp:
//   forward   P_tj = exp(S_tj − max_{j'≤t} S_tj') / Σ_{j≤t} exp(…) for j ≤ t, 0 for j > t
//   backward  dS_tj = P_tj (dP_tj − Σ_{j'≤t} P_tj' dP_tj') for j ≤ t, 0 for j > t
// with the sums in double (block_sum.cuh). A thread touches the same entries
// j = threadIdx.x, threadIdx.x + blockDim.x, … in every pass.
#pragma once

#include <cmath>
#include <cstddef>

#include "gpu/block_sum.cuh"
#include "gpu/kernels/launch.cuh"
#include "gpu/kernels/reduce.cuh"

namespace qkvlab::gpu::kernels {

// Rows of all (b, h) patterns: block r is row t = r mod T of pattern r / T, of `segments` segments
// of J keys side by side (J = T without a cache; segments > 1: ResFormer's cross-layer attention,
// engine/kernel_types.hpp); query t is position past + t and sees keys j ≤ past + t of every
// segment, one softmax over them all.
__global__ void causal_softmax_kernel(int T, int past, int J, float* pattern, int segments) {
  const std::size_t r = blockIdx.x;
  const int t = past + int(r % T), C = segments * J;
  float* row = pattern + r * C;
  float local = -INFINITY;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    if (c % J <= t) local = row[c] > local ? row[c] : local;
  const float m = block_max(local);
  double acc[1] = {0};
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    if (c % J <= t) {
      const float e = expf(row[c] - m);
      row[c] = e;
      acc[0] += double(e);
    }
  detail::block_sum<1>(acc);
  const float inv = float(1 / acc[0]);
  for (int c = threadIdx.x; c < C; c += blockDim.x) row[c] = c % J <= t ? row[c] * inv : 0.0f;
}

// The reductions of a block of pattern rows (Backend::attention_reduce; engine/kernels/attention_reduce.hpp
// has the definition): (b, h) = n's block holds its queries first … first + rows − 1 as rows × J
// values, J = first + rows, at n·rows·J; the results go to row (b, h) of the (B·H, T) sums.
// Block r is row i = r mod rows of block n = r / rows: its mass Σ_j P_tj and entropy −Σ_j P_tj ln P_tj
// (when `entropy` is given).
__global__ void pattern_rows_kernel(int T, int first, int rows, const float* P, double* mass, double* entropy) {
  const std::size_t r = blockIdx.x;
  const int J = first + rows, t = first + int(r % rows);
  const float* p = P + r * J;
  double acc[2] = {0, 0};
  for (int j = threadIdx.x; j <= t; j += blockDim.x) {
    const double x = double(p[j]);
    acc[0] += x;
    if (entropy && x != 0) acc[1] -= x * log(x);
  }
  detail::block_sum<2>(acc);
  if (threadIdx.x != 0) return;
  const std::size_t at = (r / rows) * T + t;
  mass[at] = acc[0];
  if (entropy) entropy[at] = acc[1];
}

// columns[n·T + j] += Σ_i P_ij over the block's rows i in order, one thread per (n, j) of the J
// columns; a column the earlier blocks did not reach (j ≥ first) starts from zero here.
__global__ void pattern_columns_kernel(int heads, int T, int first, int rows, const float* P, double* columns) {
  const int J = first + rows;
  QKVLAB_GRID_STRIDE(c, std::size_t(heads) * J) {
    const std::size_t n = c / J, j = c % J;
    const float* p = P + n * rows * J + j;
    double sum = j < std::size_t(first) ? columns[n * T + j] : 0.0;
    for (int i = 0; i < rows; ++i) sum += double(p[std::size_t(i) * J]);
    columns[n * T + j] = sum;
  }
}

// dS in place of dP, rows of `segments` segments of T keys as causal_softmax_kernel's.
__global__ void causal_softmax_backward_kernel(int T, int segments, const float* pattern, float* dS) {
  const std::size_t r = blockIdx.x;
  const int t = int(r % T), C = segments * T;
  const float* p = pattern + r * C;
  float* d = dS + r * C;
  double acc[1] = {0};
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    if (c % T <= t) acc[0] += double(p[c]) * double(d[c]);
  detail::block_sum<1>(acc);
  const float dot = float(acc[0]);
  for (int c = threadIdx.x; c < C; c += blockDim.x) d[c] = c % T <= t ? p[c] * (d[c] - dot) : 0.0f;
}

}  // namespace qkvlab::gpu::kernels
