// Elementwise kernels of the CUDA backend (CUDA-only), one thread per entry in
// a grid-stride loop, the formulas of engine/kernels/elementwise.hpp and adamw.hpp:
//   axpby      Y[r, c] = α X[r, c] + β Y[r, c]   (β = 0: Y not read; α = β = 0: X not read either)
//   fill       X[i] = value
//   add_bias   Y[r, c] += b[c]
//   widen      Y[r, c] = float(W[row(r), c]), 16-bit weights (engine/weight_type.hpp's widen_bits)
//   narrow     Y_b[r, c] = bf16(X_b[r, c]), X_b at X + b·stride, Y dense (a bf16 product's operand)
//   GELU       Y = GELU(X);  dX += dY ⊙ GELU'(X)                  (math.cuh, both forms)
//   ReLU       Y = max(X, 0);  dX += dY ⊙ [X > 0]
//   SwiGLU     Y = silu(G) ⊙ U;  dG += dY ⊙ U ⊙ silu'(G),  dU += dY ⊙ silu(G)
//   AdamW      m ← β1 m + (1 − β1) g,  v ← β2 v + (1 − β2) g²,  θ ← θ − decay θ,
//              θ ← θ − η (m_scale m) / (sqrt(v_scale v) + ε)
#pragma once

#include <cstddef>

#include "engine/weight_type.hpp"
#include "gpu/kernels/launch.cuh"
#include "gpu/kernels/math.cuh"

namespace qkvlab::gpu::kernels {

__global__ void axpby_kernel(int rows, int cols, float alpha, const float* X, int ldx, float beta, float* Y,
                             int ldy) {
  QKVLAB_GRID_STRIDE(i, std::size_t(rows) * cols) {
    const std::size_t r = i / cols, c = i % cols;
    float* y = Y + r * ldy + c;
    if (beta == 0.0f && alpha == 0.0f)
      *y = 0.0f;
    else if (beta == 0.0f)
      *y = alpha * X[r * ldx + c];
    else
      *y = alpha * X[r * ldx + c] + beta * *y;
  }
}

__global__ void fill_kernel(std::size_t count, float value, float* X) {
  QKVLAB_GRID_STRIDE(i, count) X[i] = value;
}

__global__ void widen_kernel(int rows, int cols, const std::uint16_t* W, int ldw, const std::int32_t* rows_of,
                             engine::WeightType type, float* Y, int ldy) {
  QKVLAB_GRID_STRIDE(i, std::size_t(rows) * cols) {
    const std::size_t r = i / cols, c = i % cols, w = rows_of ? std::size_t(rows_of[r]) : r;
    Y[r * ldy + c] = engine::widen_bits(W[w * ldw + c], type);
  }
}

__global__ void narrow_bf16_kernel(int batch, int rows, int cols, const float* X, int ldx, long long stride,
                                   std::uint16_t* Y) {
  const std::size_t per_batch = std::size_t(rows) * cols;
  QKVLAB_GRID_STRIDE(i, std::size_t(batch) * per_batch) {
    const std::size_t b = i / per_batch, r = i % per_batch / cols, c = i % cols;
    Y[i] = engine::narrow_bf16(X[b * stride + r * ldx + c]);
  }
}

__global__ void add_bias_kernel(int rows, int cols, const float* b, float* Y, int ldy) {
  QKVLAB_GRID_STRIDE(i, std::size_t(rows) * cols) {
    const std::size_t r = i / cols, c = i % cols;
    Y[r * ldy + c] += b[c];
  }
}

__global__ void gelu_forward_kernel(std::size_t count, bool tanh_form, const float* X, float* Y) {
  QKVLAB_GRID_STRIDE(i, count) Y[i] = tanh_form ? gelu_tanh(X[i]) : gelu_erf(X[i]);
}

__global__ void gelu_backward_kernel(std::size_t count, bool tanh_form, const float* X, const float* dY, float* dX) {
  QKVLAB_GRID_STRIDE(i, count) dX[i] += dY[i] * (tanh_form ? gelu_tanh_grad(X[i]) : gelu_erf_grad(X[i]));
}

__global__ void relu_forward_kernel(std::size_t count, const float* X, float* Y) {
  QKVLAB_GRID_STRIDE(i, count) Y[i] = X[i] > 0.0f ? X[i] : 0.0f;
}

__global__ void relu_backward_kernel(std::size_t count, const float* X, const float* dY, float* dX) {
  QKVLAB_GRID_STRIDE(i, count) if (X[i] > 0.0f) dX[i] += dY[i];
}

__global__ void swiglu_forward_kernel(std::size_t count, const float* G, const float* U, float* Y) {
  QKVLAB_GRID_STRIDE(i, count) Y[i] = silu(G[i]) * U[i];
}

__global__ void swiglu_backward_kernel(std::size_t count, const float* G, const float* U, const float* dY, float* dG,
                                       float* dU) {
  QKVLAB_GRID_STRIDE(i, count) {
    dG[i] += dY[i] * U[i] * silu_grad(G[i]);
    dU[i] += dY[i] * silu(G[i]);
  }
}

struct AdamWScalars {
  float lr, beta1, beta2, eps, decay, m_scale, v_scale;
};

__global__ void adamw_kernel(std::size_t count, AdamWScalars a, float* theta, const float* grad, float* m, float* v) {
  QKVLAB_GRID_STRIDE(i, count) {
    const float g = grad[i];
    m[i] = a.beta1 * m[i] + (1.0f - a.beta1) * g;
    v[i] = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
    theta[i] -= a.decay * theta[i];
    theta[i] -= a.lr * (a.m_scale * m[i]) / (sqrtf(a.v_scale * v[i]) + a.eps);
  }
}

}  // namespace qkvlab::gpu::kernels
