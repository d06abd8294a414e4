// The one training loop of every model on a backend (engine/backend.hpp):
// each optimizer step zeroes the gradients, runs `accum` micro-batches (each a
// forward and backward pass that adds its gradient), clips the gradients by
// their global norm, and takes an AdamW step at the scheduled learning rate
// (linear warmup, cosine decay to a floor: engine/schedule.hpp).
//
// A micro-batch returns the sum of its per-position losses and their count;
// it must scale its gradient by 1/(the step's total count) itself (it knows
// its batch shape), so that the step minimizes the mean loss over the step.
// The optimizer's state (moments and step count) and the parameters are the
// whole state of a run: restoring them (lm/checkpoint.hpp) and feeding the same
// micro-batches continues bit for bit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>

#include "engine/optimizer.hpp"
#include "engine/schedule.hpp"

namespace qkvlab::engine {

struct TrainConfig {
  std::int64_t steps = 1000;
  double lr = 1e-3, min_lr = 1e-4;  // peak and floor of the schedule
  std::int64_t warmup = 100;
  double clip = 1.0;                // ≤ 0: no clipping
  int accum = 1;                    // micro-batches per step
  AdamWConfig adamw{0.9, 0.95, 1e-8, 0.1};
  // warmup_cosine: WarmupCosine(lr, min_lr, warmup, steps); one_cycle_linear:
  // OneCycleLinear(start_lr, lr, min_lr, warmup, steps) (engine/schedule.hpp).
  enum class Schedule { warmup_cosine, one_cycle_linear } schedule = Schedule::warmup_cosine;
  double start_lr = 0;
};

// The warmup a run of `steps` steps gets unless told: a twentieth of them, at least 1, and below
// `steps` (0 for a single step), as WarmupCosine needs.
inline std::int64_t default_warmup(std::int64_t steps) {
  return steps < 2 ? 0 : std::max<std::int64_t>(1, steps / 20);
}

struct StepStats {
  double loss = 0;       // mean over the step's predicted positions
  double grad_norm = 0;  // before clipping
  double lr = 0;
};

struct MicroLoss {
  double sum = 0;
  std::int64_t count = 0;
};

template <class S>
class Trainer {
 public:
  // Throws std::invalid_argument for a schedule its class refuses, or accum < 1.
  Trainer(Backend<S>& backend, ParameterSet<S>& params, const TrainConfig& config);

  // Step step_count() of the schedule; micro(i) for i < accum.
  StepStats step(const std::function<MicroLoss(int micro)>& micro);

  std::int64_t step_count() const { return adamw_.t; }
  AdamWState<S>& optimizer() { return adamw_; }
  const TrainConfig& config() const { return config_; }

 private:
  Backend<S>& backend_;
  ParameterSet<S>& params_;
  TrainConfig config_;
  std::function<double(std::int64_t)> schedule_;
  AdamWState<S> adamw_;
};

extern template class Trainer<float>;
extern template class Trainer<double>;

}  // namespace qkvlab::engine
