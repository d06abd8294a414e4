// The reductions of token-major states, the CPU kernels of Backend::state_rows and state_gram
// (engine/backend.hpp has the definition; gpu/kernels/state_reduction.cuh follows it). Row i of
// sequence b combined over its heads (StateShape) is h_bi; in double, its norm sums the squares in
// ascending column order, and a sequence's unit sum adds h_bi/‖h_bi‖ in ascending i, skipping zero
// rows; the Gram matrix is one serial double GEMM per sequence (its rows converted to double).
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include "engine/blas.hpp"
#include "engine/kernel_types.hpp"

namespace qkvlab::engine::kernels {

// h_r,c of row r (0 … B·T − 1).
template <class S>
double state_entry(const StateShape& s, const S* X, std::size_t r, int c) {
  const S* x = X + r * std::size_t(s.heads) * s.width;
  if (s.combine == HeadCombination::concat) return double(x[c]);
  double h = 0;
  for (int k = 0; k < s.heads; ++k) h += double(x[std::size_t(k) * s.width + c]) / s.heads;
  return h;
}

// ‖h_r‖ for rows r0 … r1 − 1.
template <class S>
void state_norm_rows(const StateShape& s, const S* X, std::size_t r0, std::size_t r1, double* norms) {
  const int C = s.columns();
  for (std::size_t r = r0; r < r1; ++r) {
    double q = 0;
    for (int c = 0; c < C; ++c) {
      const double h = state_entry(s, X, r, c);
      q += h * h;
    }
    norms[r] = std::sqrt(q);
  }
}

// Columns c0 … c1 − 1 of sequence b's unit sum, from the rows' norms.
template <class S>
void state_unit_columns(const StateShape& s, const S* X, const double* norms, int b, int c0, int c1, double* unit) {
  const std::size_t first = std::size_t(b) * s.T;
  double* u = unit + std::size_t(b) * s.columns();
  for (int c = c0; c < c1; ++c) u[c] = 0;
  for (int i = 0; i < s.T; ++i) {
    const double n = norms[first + i];
    if (n == 0) continue;
    for (int c = c0; c < c1; ++c) u[c] += state_entry(s, X, first + i, c) / n;
  }
}

// Sequence b's Gram matrix (C = heads·width columns, heads side by side).
template <class S>
void state_gram_sequence(int b, int T, int C, const S* X, double alpha, double* out) {
  std::vector<double> x(X + std::size_t(b) * T * C, X + std::size_t(b + 1) * T * C);
  const bool tokens = T < C;
  const int m = tokens ? T : C;
  gemm_serial(tokens ? Trans::none : Trans::transpose, tokens ? Trans::transpose : Trans::none, m, m, tokens ? C : T,
              alpha, x.data(), C, x.data(), C, 0.0, out + std::size_t(b) * m * m, m);
}

}  // namespace qkvlab::engine::kernels
