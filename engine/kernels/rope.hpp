// Rotary position embedding, Hugging Face's rotate_half pairing: within a
// head of width d, dimensions i and i + d/2 (i < d/2) rotate together by the
// angle t·ω_i, t the row's position:
//   x_i' = x_i cos − x_{i+d/2} sin,   x_{i+d/2}' = x_{i+d/2} cos + x_i sin.
// The backward of a rotation is the rotation by −angle (`inverse`). The
// cosines and sines come from a table computed in double (engine/rope_frequencies.hpp's rope_table,
// which both backends use).
#pragma once

#include <cstddef>

#include "engine/rope_frequencies.hpp"

namespace qkvlab::engine::kernels {

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
