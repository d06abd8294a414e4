// Checks a tape's gradient against central finite differences, in double.
//
// f builds y = f(x_1, …, x_k) on a tape from leaf variables. The check
// contracts y with a fixed random direction R, φ(x) = Σ R ⊙ f(x), so every
// output entry takes part: the tape's gradient is backward(y, R), and the
// finite-difference gradient is (φ(x + h e) − φ(x − h e)) / (2h) for each
// input entry e. The result is rel_err = ‖g_fd − g_tape‖ / ‖g_fd‖ over all
// inputs together (docs/math/conventions.md's rel_err with the finite differences as
// the reference).
//
// Accuracy: the truncation error of central differences is about h² |φ'''| / 6
// and the rounding error about u |φ| / h (u = 2^-53); with h = 1e-5 and O(1)
// derivatives both stay near 1e-10, so a correct gradient gives rel_err far
// below 1e-6, and a wrong one gives rel_err of order one.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/tape.hpp"

namespace qkvlab::engine {

using GradFunction = std::function<Var<double>(Tape<double>&, const std::vector<Var<double>>&)>;

double gradcheck_rel_err(const GradFunction& f, const std::vector<Mat<double>>& inputs, double h = 1e-5,
                         std::uint64_t seed = 1);

}  // namespace qkvlab::engine
