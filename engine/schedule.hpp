// Learning-rate schedules, stepped once per update (steps count from 0).
//
// WarmupCosine: linear warmup to the peak, then cosine decay to a floor.
//   step < W:        η = peak (step + 1) / W
//   W ≤ step < T:    η = floor + (peak − floor) (1 + cos(π (step − W) / (T − W))) / 2
//   step ≥ T:        η = floor
// with W = warmup_steps, T = total_steps; steps count from 0. So the last
// warmup step and step W both give the peak, step W + (T − W)/2 gives
// (peak + floor)/2, and step T the floor.
//
// OneCycleLinear: PyTorch's OneCycleLR with anneal_strategy 'linear' and cycle_momentum off, as
// torch/optim/lr_scheduler.py computes it: two phases ending at e1 = W − 1 and e2 = T − 1,
//   step ≤ e1:        η = start + (peak − start) step / e1
//   e1 < step < e2:   η = peak + (floor − peak) (step − e1) / (e2 − e1)
//   step ≥ e2:        η = floor
// with W = warmup_steps = OneCycleLR's pct_start·T (not necessarily whole; below 1 the first phase
// is empty) and T = total_steps. The released probe of SkipV1Former (dense_skip's
// optim/train_linear_p_skip.py) runs it with start = peak/100 (div_factor 100), W = T/10 and
// floor = start/0.1 = peak/10 (final_div_factor 0.1).
#pragma once

#include <cstdint>

namespace qkvlab::engine {

class WarmupCosine {
 public:
  // Throws std::invalid_argument unless 0 ≤ floor ≤ peak and 0 ≤ W < T.
  WarmupCosine(double peak, double floor, std::int64_t warmup_steps, std::int64_t total_steps);

  double operator()(std::int64_t step) const;

 private:
  double peak_, floor_;
  std::int64_t warmup_, total_;
};

class OneCycleLinear {
 public:
  // Throws std::invalid_argument unless 0 ≤ start, floor ≤ peak, 0 ≤ W < T and W ≠ 1 (where
  // OneCycleLR divides 0 by 0).
  OneCycleLinear(double start, double peak, double floor, double warmup_steps, std::int64_t total_steps);

  double operator()(std::int64_t step) const;

 private:
  double start_, peak_, floor_, e1_, e2_;
};

}  // namespace qkvlab::engine
