// The rotary position embedding's frequencies and its table of cosines and sines, the rule both
// backends use (engine/cpu_backend.cpp with engine/kernels/rope.hpp's rotation, and
// gpu/cuda_backend.cu with gpu/kernels/rope.cuh): the table is computed here, in double, and only
// the rotation is a kernel. Included by the backend interface (engine/backend.hpp). C++17 (CUDA
// sources include it).
//
// Frequencies (RopeFrequencies::omega): ω_i = θ^(−2i/d), or with Llama 3.1's
// "llama3" scaling (factor s, low and high frequency factors l < h, original
// context C), by the wavelength λ_i = 2π/ω_i:
//   λ_i < C/h: ω_i unchanged;   λ_i > C/l: ω_i / s;
//   otherwise (1 − g) ω_i/s + g ω_i with g = (C/λ_i − l)/(h − l),
// the smooth interpolation between the two bands.
#pragma once

#include <cmath>
#include <cstddef>
#include <tuple>
#include <vector>

namespace qkvlab::engine {

struct RopeFrequencies {
  double theta = 10000;
  // "llama3" scaling; off while original_context is 0.
  double factor = 1, low_freq_factor = 1, high_freq_factor = 4;
  double original_context = 0;

  bool scaled() const { return original_context > 0; }
  auto key() const { return std::make_tuple(theta, factor, low_freq_factor, high_freq_factor, original_context); }

  double omega(int i, int d) const {
    const double w = std::pow(theta, -2.0 * i / d);
    if (!scaled()) return w;
    const double wavelength = 6.283185307179586476925286766559 / w;  // 2π/ω
    if (wavelength < original_context / high_freq_factor) return w;
    if (wavelength > original_context / low_freq_factor) return w / factor;
    const double g = (original_context / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor);
    return (1 - g) * w / factor + g * w;
  }
};

// Rows of the table for T positions after `past` (rope(B, T, past, …) reads rows
// past … past + T − 1): T itself without a past, else a power of two, so that
// decoding one position at a time builds a table only when the length doubles
// (a row's values do not depend on the table's length).
inline int rope_table_length(int T_, int past) {
  if (past == 0) return T_;
  int n = 1;
  while (n < past + T_) n *= 2;
  return n;
}

// cos and sin of t·ω_i for t < T, i < d/2: table[(t·d/2 + i)·2 + {0, 1}].
template <class S>
std::vector<S> rope_table(int T_, int d, const RopeFrequencies& f) {
  std::vector<S> table(std::size_t(T_) * d);
  for (int t = 0; t < T_; ++t)
    for (int i = 0; i < d / 2; ++i) {
      const double angle = t * f.omega(i, d);
      table[(std::size_t(t) * (d / 2) + i) * 2] = S(std::cos(angle));
      table[(std::size_t(t) * (d / 2) + i) * 2 + 1] = S(std::sin(angle));
    }
  return table;
}

}  // namespace qkvlab::engine
