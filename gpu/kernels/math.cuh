// Scalar functions of the CUDA backend's kernels (CUDA-only), the formulas of
// engine/kernels/math.hpp in float:
//   erf form   GELU(x) = x Φ(x),                   GELU'(x) = Φ(x) + x φ(x)
//   tanh form  GELU(x) = ½ x (1 + tanh u),         u = √(2/π) (x + 0.044715 x³)
//              GELU'(x) = ½ (1 + tanh u) + ½ x (1 − tanh² u) √(2/π) (1 + 3·0.044715 x²)
//   SiLU       silu(x) = x σ(x),                   silu'(x) = σ(x) (1 + x (1 − σ(x)))
// with tanh u = 1 − 2 / (e^{2u} + 1). expf and erff are CUDA's (at most 2 ulp
// from the exact value); the CPU uses a Cephes polynomial for exp and libm's
// erff, so the two backends differ here by a few units in the last place.
#pragma once

namespace qkvlab::gpu::kernels {

constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kGeluCubic = 0.044715f;
constexpr float kGeluCubic3 = float(3 * 0.044715);  // as the CPU rounds it
constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

__device__ inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ inline float tanh_of(float u) { return 1.0f - 2.0f / (expf(2.0f * u) + 1.0f); }

__device__ inline float gelu_tanh(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + tanh_of(u));
}

__device__ inline float gelu_tanh_grad(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  const float th = tanh_of(u);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kSqrt2OverPi * (1.0f + kGeluCubic3 * x * x);
}

__device__ inline float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * kInvSqrt2)); }

__device__ inline float gelu_erf_grad(float x) {
  const float Phi = 0.5f * (1.0f + erff(x * kInvSqrt2));
  const float phi = kInvSqrt2Pi * expf(-0.5f * x * x);
  return Phi + x * phi;
}

__device__ inline float silu(float x) { return x * sigmoid(x); }

__device__ inline float silu_grad(float x) {
  const float s = sigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}

}  // namespace qkvlab::gpu::kernels
