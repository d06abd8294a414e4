// Experiment 5 of docs/math/icl.md: depth. L-layer linear self-attention with
// residual on the concatenated format (LinearAttentionStack, two heads per
// layer), MHA against SkipV1 (layers ≥ 2 take half of their heads' values from
// the first layer's input) for L = 1, 2, …, and a layerwise probe: the
// prediction after layer l (the query's y-slot of Z_l) against the l-th
// iterate of gradient descent from zero on ½ Σ_i ‖W x_i − y_i‖²
// (column convention):
//   W_0 = 0,  W_k = W_{k−1} − η (W_{k−1} X − Y) Xᵀ,  ŷ_k = W_k x_{n+1},
// with, for each k, the constant step η_k that minimizes the held-out loss of
// ŷ_k (golden-section search). The probe reports, over the held-out prompts,
//   cosine = Σ_b ⟨ŷ_l,b, ŷ_k,b⟩ / sqrt(Σ_b ‖ŷ_l,b‖² Σ_b ‖ŷ_k,b‖²)  and
//   relative distance = sqrt(Σ_b ‖ŷ_l,b − ŷ_k,b‖² / Σ_b ‖ŷ_k,b‖²)  for k = l.
// W_0 = 0 (the GD iterates start at the prior mean).
#pragma once

#include "synthetic/icl/train.hpp"

namespace qkvlab::icl {

// ŷ_1 … ŷ_K for every prompt: result[k−1] is B × d.
std::vector<MatD> gd_predictions(const std::vector<Prompt>& prompts, double eta, int steps);

struct GdStep {
  int steps = 0;
  double eta = 0, loss = 0;  // loss: mean over the prompts given
};
// η minimizing the mean loss of ŷ_steps on `prompts`, searched in (0, 2/(sqrt(n)+sqrt(d))²].
GdStep best_gd_step(const std::vector<Prompt>& prompts, int steps);

struct DepthConfig {
  Task task;  // W0 must be zero
  TrainConfig train;
  std::vector<int> layers{1, 2, 3, 4};
  int heads = 2;
  int eval_samples = 20000;
  std::uint64_t seed = 1;
  int threads = 1;
};
void validate(const DepthConfig& config);  // throws UsageError

struct LayerProbe {
  int layer = 0;
  GdStep gd;                   // best constant-step GD with `layer` steps
  double model_loss = 0;       // held-out loss of the layer-l prediction
  double cosine = 0, relative_distance = 0;
};

struct DepthRun {
  int layers = 0;
  bool skipv1 = false;
  LossEstimate trained;
  Curve curve;
  std::vector<LayerProbe> probes;  // l = 1 … layers
  // Empty, or why the run diverged (train.hpp: divergence, icl train's rule): then `trained` is no
  // loss to report. `icl depth` refuses such a run (exit 3); `reproduce icl-depth` records it as diverged.
  std::string diverged;
};

// One run per (L, model): MHA for every L, SkipV1 for L ≥ 2 (at L = 1 it is MHA).
std::vector<DepthRun> run_depth(const DepthConfig& config, const std::function<void(int, int)>& progress = {});

}  // namespace qkvlab::icl
