// Rotary positions on the CUDA backend (CUDA-only), engine/kernels/rope.hpp's
// rotate_half pairing: within a head of width d, dimensions i and i + d/2
// rotate by the angle t·θ^(−2i/d) (the inverse rotation for the backward):
//   x_i' = x_i cos − x_{i+d/2} sin,   x_{i+d/2}' = x_{i+d/2} cos + x_i sin.
// One thread per (row, head, i < d/2). The cosines and sines are the CPU's
// table (engine::rope_table, computed in double on the host), uploaded once.
#pragma once

#include <cstddef>

#include "gpu/kernels/launch.cuh"

namespace qkvlab::gpu::kernels {

__global__ void rope_kernel(int N, int T, int heads, int d, int ld, const float* table, bool inverse, float* X) {
  const int half = d / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  QKVLAB_GRID_STRIDE(idx, std::size_t(N) * heads * half) {
    const std::size_t i = idx % half, h = (idx / half) % heads, n = idx / (std::size_t(half) * heads);
    const float* cs = table + ((n % T) * half + i) * 2;
    const float c = cs[0], s = sign * cs[1];
    float* x = X + n * ld + h * d;
    const float a = x[i], b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = b * c + a * s;
  }
}

}  // namespace qkvlab::gpu::kernels
