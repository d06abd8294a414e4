// The two Monte Carlo passes behind estimate_theory (theory.hpp), as moments
// of per-prompt feature vectors, and the arithmetic that turns moments into
// estimates. Private to theory*.cpp and their tests.
#pragma once

#include "core/icl/monte_carlo.hpp"
#include "synthetic/icl/theory.hpp"

#include <string>

namespace qkvlab::icl {

inline const std::string theory_stream = "icl/theory";

// Pass 1, per prompt: c, ‖Ŵ‖², loss (posterior, ridge), num (d), den (d), R_post (d²), R_ridge (d²).
struct Pass1Layout {
  int d;
  int num() const { return 4; }
  int den() const { return 4 + d; }
  int r_post() const { return 4 + 2 * d; }
  int r_ridge() const { return 4 + 2 * d + d * d; }
  int size() const { return 4 + 2 * d + 2 * d * d; }
};

// Pass 2's quantities f (then ψ and g, monte_carlo.hpp): C3, ‖ΛB‖², c_a, skipv1, mha, gap (each a = 0 … d).
struct Pass2Layout {
  int d;
  int a_count() const { return d + 1; }
  int ca() const { return 2; }
  int skip() const { return 2 + a_count(); }
  int mha() const { return 2 + 2 * a_count(); }
  int gap() const { return 2 + 3 * a_count(); }
  int quantities() const { return 2 + 4 * a_count(); }  // Q
};

struct TheoryMoments {
  Moments pass1;   // Pass1Layout, no cross products
  LambdaSums lam;  // estimated from pass1
  Moments pass2;   // lambda_dependent layout at lam
};

// Λ from pass 1's sums: λ_i = Σ num_i / Σ den_i. Throws NumericalError when a den is zero.
LambdaSums lambda_sums(const Moments& pass1, int d);

// Whether pass 1's per-prompt X Xᵀ, Y Xᵀ, Ŵ_D, c(D) fit in options.cache_bytes.
bool cache_fits(const Task& task, const TheoryOptions& options);

TheoryMoments theory_moments_cpu(const Task& task, const TheoryOptions& options);

}  // namespace qkvlab::icl
