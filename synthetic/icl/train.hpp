// Training and evaluation shared by the trained experiments of docs/math/icl.md
// (icl train, sweep, anchor, depth): Adam on fresh batches with linear warmup
// and cosine decay, gradient clipping by global norm, and the held-out loss
// E‖ŷ − y_{n+1}‖² estimated on a large independent sample with its standard
// error. Convention-free: models come in as callables.
//
// Determinism: a run's batches come from the Rng stream it is given and its
// initial weights from another, so the numbers depend only on (seed, stream
// names), never on how runs are spread over threads (run_parallel).
#pragma once

#include "core/icl/prompt.hpp"
#include "engine/parameters.hpp"
#include "core/statistics.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace qkvlab::icl {

struct TrainConfig {
  int steps = 2000;
  int batch = 128;
  double lr = 1e-2;        // peak learning rate
  double lr_floor = 1e-2;  // final learning rate as a fraction of the peak
  int warmup = 100;        // steps of linear warmup (capped at steps/10)
  double clip = 10.0;      // global gradient-norm clip
  int log_every = 50;      // one curve point per this many steps (mean training loss over them)
};
void validate(const TrainConfig& config);  // throws UsageError

struct Curve {
  std::vector<double> step, loss;  // step: last step of the window; loss: mean batch loss over it
};

// The loss on one fresh batch (the callable draws it from its own stream),
// with its gradient added to the parameters' gradients.
using BatchLoss = std::function<double()>;

// Adam (no weight decay) on `params` through engine/trainer.hpp's step (clipping
// by global norm, AdamW at the warmup-cosine rate); throws NumericalError when
// a batch loss or a gradient is not finite.
Curve train_adam(engine::Backend<double>& backend, engine::ParameterSet<double>& params, const BatchLoss& batch_loss,
                 const TrainConfig& config);

// train_adam on fresh prompts: every step draws config.batch prompts from
// `data`, and model.add_gradient(prompts) is the batch's loss and gradient.
template <class Model>
Curve train_on_fresh_prompts(Model& model, const Task& task, Rng& data, const TrainConfig& config) {
  return train_adam(
      model.backend(), model.params(),
      [&] {
        std::vector<Prompt> prompts;
        prompts.reserve(std::size_t(config.batch));
        for (int b = 0; b < config.batch; ++b) prompts.push_back(draw_prompt(task, data));
        return model.add_gradient(prompts);
      },
      config);
}

// Per-prompt losses ‖ŷ_b − y_b‖² and their mean with its standard error
// (two-pass: the mean, then the centered sum of squares).
struct LossEstimate : Estimate {
  std::vector<double> per_prompt;
};
LossEstimate estimate(std::vector<double> per_prompt);
// Mean and standard error of the paired difference a − b (same prompts).
LossEstimate paired_difference(const LossEstimate& a, const LossEstimate& b);

// `samples` held-out prompts drawn from Rng(seed, stream) in chunks of `chunk`;
// predict maps a chunk to its B × d predictions (rows ŷ_bᵀ).
//
// Every trained model here is linear in x_{n+1} given D = (X, Y): the query
// token is no key/value source (P), so x_{n+1} enters only through the query
// row, linearly (tested for each model). So ŷ = U(D) x_{n+1}, and each prompt
// contributes the exact conditional expectation of its loss over (x_{n+1}, ε_{n+1}):
//   E[‖U x_{n+1} − y_{n+1}‖² | W*, D] = ‖U − W*‖²_F + d σ²,
// with U's columns read off as the predictions at x_{n+1} = e_1 … e_d (a
// Rao–Blackwellized estimate of the same mean E‖ŷ − y_{n+1}‖², with a smaller
// standard error).
using Predictor = std::function<MatD(const std::vector<Prompt>&)>;
LossEstimate held_out_loss(const Task& task, const Predictor& predict, int samples, std::uint64_t seed,
                           const std::string& stream, int chunk = 2000);

// The zero predictor's loss, the task's loss scale: zero_predictor_loss (core/icl/prompt.hpp).

// Whether a trained run has diverged: its held-out loss is more than `kDivergedFactor` times both
// the zero predictor's loss and the same model's held-out loss before training, on the same prompts
// (training made it an order of magnitude worse than where it started and than predicting nothing).
// A non-finite loss or gradient is detected while training (train_adam).
inline constexpr double kDivergedFactor = 10;
bool diverged(const Task& task, double trained_loss, double initial_loss);

// Held-out prompts (the first of the evaluation set) on which a run's loss before and after training
// is compared to detect divergence: min(eval_samples, kDivergenceProbe).
inline constexpr int kDivergenceProbe = 2000;
int divergence_prompts(int eval_samples);

// The one divergence check of every trained icl experiment (icl train, sweep, anchor, depth):
// `trained` holds the run's per-prompt held-out losses in the order drawn, `initial` the untrained
// model's mean loss on the first divergence_prompts(trained.size()) of the same prompts. Empty when
// `diverged` says no; else why, naming the run `what`: "training diverged: WHAT ends at held-out loss
// ... on the first 2000 held-out prompts, more than 10 times both its loss before training (...) and
// the zero predictor's E|y|^2 = ...".
std::string divergence(const Task& task, const std::string& what, const std::vector<double>& trained, double initial);

// A trained model as a Predictor: model.predict(make_batch(prompts)).
// The model must outlive the Predictor.
template <class Model, class MakeBatch>
Predictor trained_predictor(Model& model, MakeBatch make_batch) {
  return [&model, make_batch](const std::vector<Prompt>& prompts) { return model.predict(make_batch(prompts)); };
}


}  // namespace qkvlab::icl
