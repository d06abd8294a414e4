#include "engine/schedule.hpp"

#include <cmath>
#include <numbers>

#include <stdexcept>

namespace qkvlab::engine {

WarmupCosine::WarmupCosine(double peak, double floor, std::int64_t warmup_steps, std::int64_t total_steps)
    : peak_(peak), floor_(floor), warmup_(warmup_steps), total_(total_steps) {
  if (!(0 <= floor && floor <= peak)) throw std::invalid_argument("WarmupCosine: need 0 <= floor <= peak");
  if (!(0 <= warmup_steps && warmup_steps < total_steps))
    throw std::invalid_argument("WarmupCosine: need 0 <= warmup_steps < total_steps");
}

double WarmupCosine::operator()(std::int64_t step) const {
  if (step < warmup_) return peak_ * double(step + 1) / double(warmup_);
  if (step >= total_) return floor_;
  const double progress = double(step - warmup_) / double(total_ - warmup_);
  return floor_ + (peak_ - floor_) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
}

OneCycleLinear::OneCycleLinear(double start, double peak, double floor, double warmup_steps, std::int64_t total_steps)
    : start_(start), peak_(peak), floor_(floor), e1_(warmup_steps - 1), e2_(double(total_steps) - 1) {
  if (!(0 <= start && start <= peak && 0 <= floor && floor <= peak))
    throw std::invalid_argument("OneCycleLinear: need 0 <= start, floor <= peak");
  if (!(0 <= warmup_steps && warmup_steps < double(total_steps) && warmup_steps != 1))
    throw std::invalid_argument("OneCycleLinear: need 0 <= warmup_steps < total_steps, warmup_steps != 1");
}

double OneCycleLinear::operator()(std::int64_t step) const {
  const double t = double(step);
  if (t <= e1_) return start_ + (peak_ - start_) * (t / e1_);
  if (t >= e2_) return floor_;
  return peak_ + (floor_ - peak_) * ((t - e1_) / (e2_ - e1_));
}

}  // namespace qkvlab::engine
