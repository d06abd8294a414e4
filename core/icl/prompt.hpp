// Prompts of the in-context linear-regression task behind the SkipV1 theorem
// (docs/math/icl.md, "Data"). Column convention: tokens are columns.
//
// W* ~ N(W_0, I_{d²}), x_i ~ N(0, I_d), ε_i ~ N(0, σ² I_d), y_i = W* x_i + ε_i
// for i = 1 … n+1. X = (x_1 … x_n), Y = (y_1 … y_n) ∈ R^{d×n}; the query is
// (x_{n+1}, y_{n+1}). Draws are made in double from core's generator, so a
// prompt depends only on the generator's (seed, stream) and the draw order:
// W*, then X, then Y's noise, then x_{n+1}, then its noise.
#pragma once

#include "core/rng.hpp"
#include "core/types.hpp"

#include <string>

namespace qkvlab::icl {

struct Task {
  int d = 4;
  int n = 16;
  double sigma = 0.5;
  MatD W0;  // d×d prior mean of W*; empty means zero

  MatD prior_mean() const;  // W0, or the d×d zero matrix when W0 is empty
};

struct Prompt {
  MatD W;        // W*, d×d
  MatD X, Y;     // d×n
  VecD x_query;  // x_{n+1}
  VecD y_query;  // y_{n+1} (the target)
};

Prompt draw_prompt(const Task& task, Rng& rng);

// E = (x_1, y_1, …, x_n, y_n, x_{n+1}) ∈ R^{d×(2n+1)}.
MatD prompt_tokens(const Prompt& p);

// The zero predictor's loss E‖y_{n+1}‖² = ‖W_0‖²_F + d² + dσ² (ŷ = 0; E‖W* x‖² = E‖W*‖²_F):
// the task's loss scale, what predicting nothing costs.
double zero_predictor_loss(const Task& task);

// Throws UsageError unless d ≥ 1, n ≥ 1, σ ≥ 0, W0 is empty or d×d, and the loss scale
// zero_predictor_loss is a finite double (every loss is measured in its units; σ and W_0 so
// large that it overflows, dσ² + ‖W_0‖²_F > 1.8e308, have no loss to report).
void validate(const Task& task);

// " at sigma = …, |W_0|_F = …", for a NumericalError whose non-finite value may be overflow:
// names the options (--sigma, --w0-scale) that set the prompts' scale.
std::string scale_note(const Task& task);

}  // namespace qkvlab::icl
