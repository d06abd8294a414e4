// Experiment 4 of docs/math/icl.md, the external anchor: a one-layer linear
// self-attention on the concatenated format (LinearAttentionStack with one
// layer and one head; von Oswald et al. 2023, Ahn et al. 2023, Mahankali et
// al. 2023) trained with Adam, against the best single step of gradient
// descent from zero on the in-context least-squares loss ½ Σ_i ‖W x_i − y_i‖²:
//   W_1 = η Y Xᵀ,   ŷ = η Y Xᵀ x_{n+1}   (column convention, X, Y ∈ R^{d×n}).
//
// Closed form for W_0 = 0 (W* entries i.i.d. N(0, 1), x ~ N(0, I_d), noise σ²),
// with S = X Xᵀ (Wishart, E S = n I, E S² = n (n + d + 1) I):
//   E‖y_{n+1}‖²                    = d² + d σ²
//   E⟨W x, η (W S + ε Xᵀ) x⟩       = η d E[xᵀ S x] = η n d²
//   E‖(W S + ε Xᵀ) x‖²             = d E tr S² + σ² d E‖Xᵀ x‖² = n d² (n + d + 1) + σ² n d²
// so L(η) = η² n d² (n + d + 1 + σ²) − 2 η n d² + d² + d σ², minimized at
//   η* = 1 / (n + d + 1 + σ²),   L(η*) = d σ² + d² (d + 1 + σ²) / (n + d + 1 + σ²).
// (tests/icl_train_test.cpp checks L(η) against Monte Carlo.)
#pragma once

#include "synthetic/icl/train.hpp"

namespace qkvlab::icl {

// L(η) above.
double one_step_gd_loss(int d, int n, double sigma, double eta);

struct OneStepGd {
  double eta = 0, loss = 0;
};
OneStepGd best_one_step_gd(int d, int n, double sigma);

// Rows (η Y Xᵀ x_{n+1})ᵀ, one per prompt.
MatD one_step_gd_predictions(const std::vector<Prompt>& prompts, double eta);

struct AnchorConfig {
  Task task;  // W0 must be zero
  TrainConfig train;
  int restarts = 2;
  int eval_samples = 40000;
  std::uint64_t seed = 1;
  int threads = 1;
};
void validate(const AnchorConfig& config);  // throws UsageError

struct AnchorRun {
  LossEstimate trained;     // held-out loss of the trained attention
  double selection_loss = 0;  // on other prompts, the same for every restart: it chooses the best
  LossEstimate gap_to_gd;   // paired trained − η* step on the same prompts
  Curve curve;
};

struct AnchorResult {
  OneStepGd analytic;
  LossEstimate gd_monte_carlo;  // the η* predictor on the held-out prompts
  std::vector<AnchorRun> runs;
  int best = 0;  // index of the run with the lowest selection_loss (its held-out loss is then unbiased)
  double relative_gap() const { return (runs[std::size_t(best)].trained.value - analytic.loss) / analytic.loss; }
};

// progress(done, total) after each finished restart (may be empty). A restart that diverges
// (train.hpp: divergence, icl train's rule) throws NumericalError naming it.
AnchorResult run_anchor(const AnchorConfig& config, const std::function<void(int, int)>& progress = {});

}  // namespace qkvlab::icl
