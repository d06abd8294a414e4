// Softmax cross-entropy from logits on the CUDA backend (CUDA-only), the
// formulas of engine/kernels/cross_entropy.hpp, one block per row n:
//   loss[n] = logsumexp(z_n) − z_n[y_n],   dz_n = scale (softmax(z_n) − onehot(y_n)),
// rows with a negative target skipped (loss 0, gradient 0). The maximum is
// subtracted before exponentiating; the sum is in double (block_sum.cuh).
// dlogits may be logits itself: z[y] is read by every thread before the first
// barrier, and each thread rewrites only the entries it read.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "gpu/block_sum.cuh"
#include "gpu/kernels/reduce.cuh"

namespace qkvlab::gpu::kernels {

__global__ void cross_entropy_kernel(int V, const float* logits, const std::int32_t* targets, float* loss,
                                     float scale, float* dlogits) {
  const std::size_t n = blockIdx.x;
  const float* z = logits + n * V;
  float* dz = dlogits ? dlogits + n * V : nullptr;
  const std::int32_t y = targets[n];
  if (y < 0) {  // the whole block takes this branch
    if (threadIdx.x == 0) loss[n] = 0.0f;
    if (dz)
      for (int v = threadIdx.x; v < V; v += blockDim.x) dz[v] = 0.0f;
    return;
  }
  const float zy = z[y];
  float local = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) local = z[v] > local ? z[v] : local;
  const float m = block_max(local);
  double acc[1] = {0};
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    const float e = expf(z[v] - m);
    if (dz) dz[v] = e;
    acc[0] += double(e);
  }
  detail::block_sum<1>(acc);
  if (threadIdx.x == 0) loss[n] = float((double(m) - double(zy)) + log(acc[0]));
  if (!dz) return;
  const float inv = float(double(scale) / acc[0]);
  for (int v = threadIdx.x; v < V; v += blockDim.x) dz[v] *= inv;
  __syncthreads();
  if (threadIdx.x == 0) dz[y] -= scale;
}

}  // namespace qkvlab::gpu::kernels
