#include "engine/trainer.hpp"

#include <stdexcept>

namespace qkvlab::engine {

namespace {

std::function<double(std::int64_t)> schedule_of(const TrainConfig& c) {
  if (c.schedule == TrainConfig::Schedule::one_cycle_linear)
    return OneCycleLinear(c.start_lr, c.lr, c.min_lr, double(c.warmup), c.steps);
  return WarmupCosine(c.lr, c.min_lr, c.warmup, c.steps);
}

}  // namespace

template <class S>
Trainer<S>::Trainer(Backend<S>& backend, ParameterSet<S>& params, const TrainConfig& config)
    : backend_(backend),
      params_(params),
      config_(config),
      schedule_(schedule_of(config)),
      adamw_(backend, params.layout.total()) {
  if (config.accum < 1) throw std::invalid_argument("training: accum must be at least 1");
}

template <class S>
StepStats Trainer<S>::step(const std::function<MicroLoss(int micro)>& micro) {
  backend_.fill(params_.grads.size(), S(0), params_.grads.data());
  MicroLoss total;
  for (int i = 0; i < config_.accum; ++i) {
    const MicroLoss m = micro(i);
    total.sum += m.sum, total.count += m.count;
  }
  StepStats stats;
  stats.loss = total.count ? total.sum / double(total.count) : 0.0;
  stats.grad_norm = clip_gradients(backend_, params_, config_.clip);
  stats.lr = schedule_(adamw_.t);
  adamw_.step(backend_, params_, config_.adamw, stats.lr);
  return stats;
}

template class Trainer<float>;
template class Trainer<double>;

}  // namespace qkvlab::engine
