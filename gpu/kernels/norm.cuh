// LayerNorm and RMSNorm over the C features of each row, on the CUDA backend
// (CUDA-only), the formulas of engine/kernels/norm.hpp:
//   n = (x − μ) r (LayerNorm) or x r (RMSNorm),  r = 1/sqrt(σ² + ε) resp. 1/sqrt(‖x‖²/C + ε),
//   out = g ⊙ n + bias;
//   backward, dn = dout ⊙ g:  dx += r (dn − [mean(dn)] − n mean(dn ⊙ n)).
// One block of row_threads(C) threads per row; the row statistics are summed
// in double by a block tree (block_sum.cuh). dgain and dbias are column sums
// (reduce.cuh's NormColumns).
#pragma once

#include <cstddef>

#include "gpu/block_sum.cuh"
#include "gpu/kernels/launch.cuh"

namespace qkvlab::gpu::kernels {

__global__ void norm_forward_kernel(int C, bool center, float eps, const float* X, const float* gain,
                                    const float* bias, float* out, float* mean, float* rstd) {
  const std::size_t row = blockIdx.x;
  const float* x = X + row * C;
  double acc[1] = {0};
  if (center) {
    for (int c = threadIdx.x; c < C; c += blockDim.x) acc[0] += double(x[c]);
    detail::block_sum<1>(acc);
  }
  const double mu = center ? acc[0] / C : 0.0;
  acc[0] = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const double e = double(x[c]) - mu;
    acc[0] += e * e;
  }
  detail::block_sum<1>(acc);
  const float s = float(1 / sqrt(acc[0] / C + double(eps)));
  const float m = float(mu);
  float* o = out + row * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = (x[c] - m) * s * gain[c] + (bias ? bias[c] : 0.0f);
  if (threadIdx.x == 0) mean[row] = m, rstd[row] = s;
}

__global__ void norm_backward_kernel(int C, bool center, const float* X, const float* gain, const float* mean,
                                     const float* rstd, const float* dout, float* dX) {
  const std::size_t row = blockIdx.x;
  const float* x = X + row * C;
  const float* dy = dout + row * C;
  const float m = mean[row], s = rstd[row];
  double acc[2] = {0, 0};  // Σ dn, Σ dn ⊙ n
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const double dn = double(dy[c]) * double(gain[c]);
    acc[0] += dn;
    acc[1] += dn * double((x[c] - m) * s);
  }
  detail::block_sum<2>(acc);
  const float a = center ? float(acc[0] / C) : 0.0f, b = float(acc[1] / C);
  float* dx = dX + row * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) dx[c] += s * (dy[c] * gain[c] - a - (x[c] - m) * s * b);
}

}  // namespace qkvlab::gpu::kernels
