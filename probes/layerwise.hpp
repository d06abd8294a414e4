// `qkvlab probe`: layerwise linear probes of a frozen model (SkipV1Former App. C.1, Fig. 12).
//
// For each layer output h_ℓ (ℓ = 0 the embedding output, ℓ = 1 … L the blocks' outputs,
// before the final norm) and each learning rate of the grid, a probe (probes/probe.hpp) is
// trained for `steps` AdamW steps (0: evaluated as initialized) (β = 0.9, 0.95, weight decay 0.1 on U, warmup then cosine to
// lr/10, clipping at 1) on B windows of T training tokens a step, drawn at offsets from
// Rng(seed, "probe/step=s"); the model runs once per batch (eval pass) and is never
// backpropagated through. Targets: the next token, or the Brown tag of the word each token
// belongs to (position t's own tag; <|endoftext|> is not predicted).
// Validation: consecutive windows of T tokens of the validation stream (at most
// `eval_windows`); per layer, the mean loss over the windows with its std and se, at the
// learning rate of the grid with the lowest mean. The slope: least squares of that loss
// against ℓ over the deeper half (ℓ = ⌊(L+1)/2⌋ … L), with its standard error.
//
// The released recipe (SkipV1Former's dense_skip, optim/train_linear_p_skip.py) differs in four
// ways and nothing else: transformers' AdamW (ε 1e-6 added before the bias correction, the decay
// after the update, on every parameter; engine/adamw_config.hpp), OneCycleLR with linear annealing
// from lr/100 up to lr over the warmup and down to lr/10 at the last step (engine/schedule.hpp),
// the norm without a bias, and validation windows at random offsets (Rng(seed, "probe/validation"))
// instead of consecutive ones.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/statistics.hpp"
#include "lm/model.hpp"
#include "probes/probe.hpp"
#include "results/figure.hpp"
#include "results/value.hpp"

namespace qkvlab::probes {

struct ProbeData {
  std::vector<std::int32_t> train, validation;          // token streams
  std::vector<std::int32_t> train_tags, validation_tags;  // per token (tags target), else empty
  int tags = 0;                                           // number of tag classes
};

struct ProbeOptions {
  bool tags = false;          // target: false the next token, true the tag
  bool init_model = true;     // start from the model's final norm and unembedding (next token only)
  std::vector<double> lr_grid = {1e-4, 2e-4, 3e-4};
  std::int64_t steps = 200, warmup = -1;  // warmup −1: a tenth of the steps
  int batch = 8, seq_len = 128, eval_windows = 64;
  ProbeRecipe recipe = ProbeRecipe::qkvlab;
  std::uint64_t seed = 1;
};

// The least-squares slope of y against x, and its standard error (NaN with fewer than 3 points);
// the fitted line passes through (x_mean, y_mean).
struct Slope {
  double slope = 0, se = 0;
  double x_mean = 0, y_mean = 0;
};

// One layer output's probe: the validation loss at the chosen learning rate (mean, std, se over the
// windows), that rate, and the mean loss at every rate of the grid (NaN: the probe diverged).
struct ProbeLayer {
  int layer = 0;  // 0: the embedding output; 1 … L the blocks' outputs
  Summary loss;
  double lr = 0;
  std::vector<double> loss_by_lr;
};

struct ProbeReport {
  results::Value settings;  // recipe, target, init, outputs, steps, warmup, batch, seq_len, seed, validation_windows, lr_grid
  std::vector<ProbeLayer> layers;
  Slope deeper_half;     // the slope over the deeper half of the layers, from_layer … the last
  int from_layer = 0;
  results::Table table;
  results::Figure figure;
  // Set when a layer's validation loss is non-finite at every learning rate ("layer 2: …"):
  // then nothing is summarised, and the command reports it, exit 1. A learning rate whose
  // loss is not finite (a diverged probe) is never picked: loss_by_lr holds null for it.
  std::string nonfinite;

  // The settings, then layers [{layer, loss, std, se, lr, loss_by_lr}] and deeper_half_slope
  // {from_layer, to_layer, slope, se}.
  results::Value to_value() const;
};

Slope least_squares_slope(const std::vector<double>& x, const std::vector<double>& y);

ProbeReport run_probes(lm::Model<float>& model, const ProbeData& data, const ProbeOptions& options,
                       const std::function<void(std::int64_t done, std::int64_t total)>& progress = {});

}  // namespace qkvlab::probes
