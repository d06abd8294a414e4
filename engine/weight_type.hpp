// How a model holds its weight matrices: float32 (the reference), or 16 bits
// per weight, bf16 (the upper half of a float32: 8 bits of significand, unit
// roundoff u = 2⁻⁸) or IEEE binary16 f16 (11 bits, u = 2⁻¹¹). A 16-bit weight is
// widened to float exactly before any product (engine/weight.hpp), so the only
// error against float32 weights is the rounding of each weight to the type, a
// relative error of at most u per weight; products accumulate in float32.
// C++17 (CUDA sources include it): widen_bits runs on the host and on a device.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define QKVLAB_HOST_DEVICE __host__ __device__
#else
#define QKVLAB_HOST_DEVICE
#endif

namespace qkvlab::engine {

enum class WeightType { f32, bf16, f16 };

inline const char* weight_type_name(WeightType t) {
  return t == WeightType::bf16 ? "bf16" : t == WeightType::f16 ? "f16" : "f32";
}

// Unit roundoff of storing a float32 weight in the type (0 for f32 itself).
inline double unit_roundoff(WeightType t) {
  return t == WeightType::bf16 ? 0x1p-8 : t == WeightType::f16 ? 0x1p-11 : 0.0;
}

// The float a 16-bit pattern of type bf16 or f16 stands for (exact).
QKVLAB_HOST_DEVICE inline float widen_bits(std::uint16_t h, WeightType t) {
  std::uint32_t bits = 0;
  if (t == WeightType::bf16) {
    bits = std::uint32_t(h) << 16;
  } else {
    const std::uint32_t sign = std::uint32_t(h >> 15) << 31, exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
    if (exponent == 0) {  // zero or subnormal: mantissa · 2⁻²⁴, exact
      const float magnitude = float(mantissa) * 5.9604644775390625e-8f;
      return sign ? -magnitude : magnitude;
    }
    bits = sign | (exponent == 0x1F ? 0x7F800000u : (exponent + 112) << 23) | (mantissa << 13);  // inf, NaN; normal
  }
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// x rounded to the nearest bf16 (ties to even; NaN stays NaN), host and device.
QKVLAB_HOST_DEVICE inline std::uint16_t narrow_bf16(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return std::uint16_t(((bits & 0x80000000u) >> 16) | 0x7FC0u);
  return std::uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// x rounded to the nearest bf16, as the float it stands for: a bf16 product's operand.
QKVLAB_HOST_DEVICE inline float round_to_bf16(float x) { return widen_bits(narrow_bf16(x), WeightType::bf16); }

// x rounded to the nearest bf16 or f16 (ties to even; beyond f16's range ±inf; NaN stays NaN).
inline std::uint16_t narrow_bits(float x, WeightType t) {
  if (t == WeightType::bf16) return narrow_bf16(x);
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const std::uint32_t sign = bits & 0x80000000u, magnitude = bits & 0x7FFFFFFFu;
  const std::uint16_t s = std::uint16_t(sign >> 16);
  if (magnitude > 0x7F800000u) return std::uint16_t(s | 0x7E00u);
  if (magnitude >= 0x477FF000u) return std::uint16_t(s | 0x7C00u);  // ≥ 65520 rounds to inf
  if (magnitude < 0x38800000u) {  // below 2⁻¹⁴: a subnormal (or zero), mantissa = |x| · 2²⁴ rounded
    float a;
    std::memcpy(&a, &magnitude, sizeof a);
    return std::uint16_t(s | std::uint16_t(std::nearbyint(a * 0x1p24f)));
  }
  const std::uint32_t rounded = magnitude + 0xFFFu + ((magnitude >> 13) & 1u);
  return std::uint16_t(s | std::uint16_t((rounded >> 13) - (112u << 10)));
}

}  // namespace qkvlab::engine
