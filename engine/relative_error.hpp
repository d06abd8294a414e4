// The relative squared error of a prediction P against a target T (rows × cols, row-major, packed)
// on a backend, and its gradient with respect to P, the loss of the skip MLP of qwe.exp8.4 and of
// the skipless fits of qwe.cor8.4.1:
//   L = Σ (P − T)² / Σ T²,   dP = 2 (P − T) / Σ T²   (written into D; the sums are backend dot
//   products, in double in a fixed order).
#pragma once

#include <cstddef>

#include "engine/backend.hpp"

namespace qkvlab::engine {

// Returns L; D (rows × cols) holds dP on return.
template <class S>
double relative_squared_error(Backend<S>& be, int rows, int cols, const S* P, const S* T, S* D) {
  const std::size_t count = std::size_t(rows) * cols;
  be.axpby(rows, cols, S(1), P, cols, S(0), D, cols);
  be.axpby(rows, cols, S(-1), T, cols, S(1), D, cols);  // D = P − T
  const double target_energy = be.dot(count, T, T);
  const double value = be.dot(count, D, D) / target_energy;
  be.axpby(rows, cols, S(2 / target_energy), D, cols, S(0), D, cols);
  return value;
}

}  // namespace qkvlab::engine
