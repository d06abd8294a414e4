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

}  // namespace qkvlab::engine
