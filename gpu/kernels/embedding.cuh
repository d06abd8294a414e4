// Token and position embedding on the CUDA backend (CUDA-only), the formulas
// of engine/kernels/embedding.hpp:
//   forward   out[n, :] = wte[ids[n], :] + (wpe ? wpe[n mod T, :] : 0)
//   backward  dwte[id, :] += Σ_{n: ids[n] = id} dout[n, :],  dwpe[t, :] += Σ_b dout[b·T + t, :]
// The scatter into dwte takes no atomics: thread (column c, slice s) owns the
// entries (id, c) with id mod kSlices = s and walks n = 0 … N−1 in order,
// adding the rows of its ids, so each entry receives its rows in the order of
// n, one float addition at a time — the CPU's order, and the same at every
// run. dwpe: one thread per (t, c) adds b = 0 … B−1 in order.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu/kernels/launch.cuh"

namespace qkvlab::gpu::kernels {

constexpr int kEmbeddingSlices = 64;  // grid.y of the dwte scatter

__global__ void embedding_forward_kernel(int N, int T, int C, const std::int32_t* ids, const float* wte,
                                         const float* wpe, float* out) {
  QKVLAB_GRID_STRIDE(i, std::size_t(N) * C) {
    const std::size_t n = i / C, c = i % C;
    const float e = wte[std::size_t(ids[n]) * C + c];
    out[i] = wpe ? e + wpe[(n % T) * C + c] : e;
  }
}

// Block 32 columns, grid (ceil(C/32), kEmbeddingSlices).
__global__ void embedding_scatter_kernel(int N, int C, const std::int32_t* ids, const float* dout, float* dwte) {
  const int c = blockIdx.x * 32 + threadIdx.x, slice = blockIdx.y;
  if (c >= C) return;
  for (int n = 0; n < N; ++n) {
    const std::int32_t id = ids[n];
    if (id % kEmbeddingSlices == slice) dwte[std::size_t(id) * C + c] += dout[std::size_t(n) * C + c];
  }
}

__global__ void embedding_positions_kernel(int B, int T, int C, const float* dout, float* dwpe) {
  QKVLAB_GRID_STRIDE(i, std::size_t(T) * C) {
    const std::size_t t = i / C, c = i % C;
    float p = dwpe[i];
    for (int b = 0; b < B; ++b) p += dout[(std::size_t(b) * T + t) * C + c];
    dwpe[i] = p;
  }
}

}  // namespace qkvlab::gpu::kernels
