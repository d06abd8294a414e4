// The error model by which the CUDA backend's language model is compared with
// the CPU's (tests/lm_gpu_test.cpp states it in full): both compute each formula
// in float (u = 2⁻²⁴) and differ in the order of their sums and in their exp and
// erf, so a value reached through a chain of sums and roundings of length k
// agrees to rel = ‖cpu − cuda‖ / ‖cpu‖ ≤ tol(k) = 4 · u · k.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/rng.hpp"
#include "engine/parameters.hpp"
#include "lm/config.hpp"

namespace qkvlab::gpu_test {

constexpr double kU = 0x1p-24;

inline double tol(double k) { return 4 * kU * k; }

// rel = ‖x − reference‖ / ‖reference‖ (the absolute norm when the reference is zero; NaN
// anywhere gives NaN, which fails every ≤ and >), computed in double.
template <class T> double rel(const std::vector<T>& reference, const std::vector<T>& x) {
  EXPECT_EQ(reference.size(), x.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < reference.size() && i < x.size(); ++i) {
    const double e = double(x[i]) - double(reference[i]);
    num += e * e, den += double(reference[i]) * double(reference[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The chained reduction length of the forward pass: per layer the norm (d), the projections (d),
// the scores (d_h), softmax and P V (2T), the output projection (H·d_h), the second norm and the
// MLP (2d + ffn); then the final norm, the head (d) and the cross-entropy (V).
inline double model_k(const lm::Config& c, int T) {
  const double layer = 2.0 * c.d + c.head_dim + 2.0 * T + double(c.heads) * c.head_dim + 2.0 * c.d + c.ffn;
  return c.layers * layer + 2.0 * c.d + c.vocab;
}

// Parameters far from the initialization's small scale, so that attention is far from uniform:
// gains 1 + 0.2 N(0, 1), everything else 0.4 N(0, 1), each tensor from its own stream.
inline std::vector<float> random_parameters(const engine::ParameterLayout& layout, std::uint64_t seed) {
  std::vector<float> values(layout.total(), 0.0f);
  for (const auto& spec : layout.specs()) {
    Rng rng(seed, spec.name);
    const bool gain = spec.shape.size() == 1 && spec.name.find(".weight") != std::string::npos;
    for (std::size_t i = 0; i < spec.size(); ++i)
      values[spec.offset + i] = float(gain ? 1 + 0.2 * rng.normal() : 0.4 * rng.normal());
  }
  return values;
}

}  // namespace qkvlab::gpu_test
