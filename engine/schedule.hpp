// Learning-rate schedule: linear warmup to the peak, then cosine decay to a floor.
//   step < W:        η = peak (step + 1) / W
//   W ≤ step < T:    η = floor + (peak − floor) (1 + cos(π (step − W) / (T − W))) / 2
//   step ≥ T:        η = floor
// with W = warmup_steps, T = total_steps; steps count from 0. So the last
// warmup step and step W both give the peak, step W + (T − W)/2 gives
// (peak + floor)/2, and step T the floor.
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

}  // namespace qkvlab::engine
