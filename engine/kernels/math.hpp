// Scalar functions of the CPU kernels, written so that the compiler can
// vectorize the loops that call them (no library call inside a loop).
//
// exp for float: x = n ln 2 + r with |r| ≤ ln 2 / 2 (Cody–Waite split of
// ln 2), e^r by Cephes' degree-6 polynomial, 2^n through the exponent bits.
// Relative error below 2·2⁻²⁴ on [−87.3, 88.7]; smaller arguments give 0,
// larger +inf, NaN stays NaN. For double, std::exp.
//
// GELU, both forms (Hendrycks & Gimpel), and SiLU:
//   erf form   GELU(x) = x Φ(x),                     GELU'(x) = Φ(x) + x φ(x)
//   tanh form  GELU(x) = ½ x (1 + tanh(u)),          u = √(2/π) (x + 0.044715 x³)
//              GELU'(x) = ½ (1 + tanh u) + ½ x (1 − tanh² u) √(2/π) (1 + 3·0.044715 x²)
//   SiLU       silu(x) = x σ(x),                     silu'(x) = σ(x) (1 + x (1 − σ(x)))
// with tanh u = 1 − 2 / (e^{2u} + 1).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace qkvlab::engine::kernels {

inline float exp_of(float x) {
  constexpr float lo = -87.33654f, hi = 88.72283f;
  const bool underflow = x < lo;
  x = x < lo ? lo : x;  // comparisons keep NaN as it is
  x = x > hi ? hi : x;
  const float fx = x * 1.44269504088896341f + 0.5f;
  const float n = std::floor(fx);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  const float z = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  // 2^n for n in [−126, 128]: at n = 128 (x near hi) halve twice to stay finite.
  const std::int32_t e = std::int32_t(n);
  const std::int32_t e1 = e > 127 ? 127 : e;
  const float scale = std::bit_cast<float>(std::uint32_t(e1 + 127) << 23);
  const float result = y * scale * (e > 127 ? 2.0f : 1.0f);
  return underflow ? 0.0f : result;
}

inline double exp_of(double x) { return std::exp(x); }

template <class S>
S sigmoid(S x) {
  return S(1) / (S(1) + exp_of(-x));
}

template <class S>
S tanh_of(S u) {
  return S(1) - S(2) / (exp_of(S(2) * u) + S(1));
}

inline constexpr double kSqrt2OverPi = 0.79788456080286535588;
inline constexpr double kGeluCubic = 0.044715;

template <class S>
S gelu_tanh(S x) {
  const S u = S(kSqrt2OverPi) * (x + S(kGeluCubic) * x * x * x);
  return S(0.5) * x * (S(1) + tanh_of(u));
}

template <class S>
S gelu_tanh_grad(S x) {
  const S u = S(kSqrt2OverPi) * (x + S(kGeluCubic) * x * x * x);
  const S th = tanh_of(u);
  return S(0.5) * (S(1) + th) + S(0.5) * x * (S(1) - th * th) * S(kSqrt2OverPi) * (S(1) + S(3 * kGeluCubic) * x * x);
}

template <class S>
S gelu_erf(S x) {
  return S(0.5) * x * (S(1) + std::erf(x * S(0.70710678118654752440)));
}

template <class S>
S gelu_erf_grad(S x) {
  const S Phi = S(0.5) * (S(1) + std::erf(x * S(0.70710678118654752440)));
  const S phi = S(0.39894228040143267794) * std::exp(S(-0.5) * x * x);
  return Phi + x * phi;
}

template <class S>
S silu(S x) {
  return x * sigmoid(x);
}

template <class S>
S silu_grad(S x) {
  const S s = sigmoid(x);
  return s * (S(1) + x * (S(1) - s));
}

}  // namespace qkvlab::engine::kernels
