// Rotary position embedding, Hugging Face's rotate_half pairing: within a
// head of width d, dimensions i and i + d/2 (i < d/2) rotate together by the
// angle t·θ^(−2i/d), t the row's position:
//   x_i' = x_i cos − x_{i+d/2} sin,   x_{i+d/2}' = x_{i+d/2} cos + x_i sin.
// The backward of a rotation is the rotation by −angle (`inverse`). The
// cosines and sines come from a table computed in double (rope_table).
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

namespace qkvlab::engine::kernels {

// cos and sin of t·θ^(−2i/d) for t < S, i < d/2: table[(t·d/2 + i)·2 + {0, 1}].
template <class S>
std::vector<S> rope_table(int T_, int d, double theta) {
  std::vector<S> table(std::size_t(T_) * d);
  for (int t = 0; t < T_; ++t)
    for (int i = 0; i < d / 2; ++i) {
      const double angle = t * std::pow(theta, -2.0 * i / d);
      table[(std::size_t(t) * (d / 2) + i) * 2] = S(std::cos(angle));
      table[(std::size_t(t) * (d / 2) + i) * 2 + 1] = S(std::sin(angle));
    }
  return table;
}

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
