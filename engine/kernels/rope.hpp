// Rotary position embedding, Hugging Face's rotate_half pairing: within a
// head of width d, dimensions i and i + d/2 (i < d/2) rotate together by the
// angle t·ω_i, t the row's position:
//   x_i' = x_i cos − x_{i+d/2} sin,   x_{i+d/2}' = x_{i+d/2} cos + x_i sin.
// The backward of a rotation is the rotation by −angle (`inverse`). The
// cosines and sines come from a table computed in double (rope_table).
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

namespace qkvlab::engine::kernels {

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

// Row n of X is position n mod T: its cosines and sines are the table's row n mod T (the
// backend passes the table from row `past` on).
template <class S>
void rope_rows(int n0, int n1, int T_, int heads, int d, int ld, const S* table, bool inverse, S* X) {
  const int half = d / 2;
  const S sign = inverse ? S(-1) : S(1);
  for (int n = n0; n < n1; ++n) {
    const S* cs = table + std::size_t(n % T_) * half * 2;
    for (int h = 0; h < heads; ++h) {
      S* x = X + std::size_t(n) * ld + std::size_t(h) * d;
      for (int i = 0; i < half; ++i) {
        const S c = cs[2 * i], s = sign * cs[2 * i + 1];
        const S a = x[i], b = x[i + half];
        x[i] = a * c - b * s;
        x[i + half] = b * c + a * s;
      }
    }
  }
}

}  // namespace qkvlab::engine::kernels
