#include "synthetic/icl/train.hpp"

#include "core/errors.hpp"
#include "engine/trainer.hpp"
#include "results/value.hpp"

#include <algorithm>
#include <cmath>

namespace qkvlab::icl {

void validate(const TrainConfig& c) {
  if (c.steps < 1) throw UsageError("steps must be at least 1 (got " + std::to_string(c.steps) + ")");
  if (c.batch < 1) throw UsageError("batch must be at least 1 (got " + std::to_string(c.batch) + ")");
  if (!(c.lr > 0) || !std::isfinite(c.lr)) throw UsageError("the learning rate must be a positive number, got " + std::to_string(c.lr));
  if (!(c.lr_floor >= 0 && c.lr_floor <= 1)) throw UsageError("the learning-rate floor must be in [0, 1]");
  if (!(c.clip > 0)) throw UsageError("the gradient clip must be positive");
  if (c.log_every < 1) throw UsageError("the logging interval must be at least 1");
}

Curve train_adam(engine::Backend<double>& backend, engine::ParameterSet<double>& params, const BatchLoss& batch_loss,
                 const TrainConfig& config) {
  validate(config);
  engine::TrainConfig schedule;
  schedule.steps = config.steps, schedule.lr = config.lr, schedule.min_lr = config.lr * config.lr_floor;
  schedule.warmup = std::min(config.warmup, config.steps / 10), schedule.clip = config.clip;
  schedule.adamw = engine::AdamWConfig{};  // Adam: β = (0.9, 0.999), ε = 1e-8, no weight decay
  engine::Trainer<double> trainer(backend, params, schedule);
  Curve curve;
  double window = 0;
  int in_window = 0;
  for (int step = 0; step < config.steps; ++step) {
    const engine::StepStats stats = trainer.step([&](int) {
      const double value = batch_loss();
      if (!std::isfinite(value))
        throw NumericalError("training diverged: the batch loss is not finite at step " + std::to_string(step));
      return engine::MicroLoss{value, 1};
    });
    if (!std::isfinite(stats.grad_norm))
      throw NumericalError("training diverged: the gradient is not finite at step " + std::to_string(step));
    window += stats.loss, ++in_window;
    if (in_window == config.log_every || step + 1 == config.steps) {
      curve.step.push_back(step + 1), curve.loss.push_back(window / in_window);
      window = 0, in_window = 0;
    }
  }
  return curve;
}

bool diverged(const Task& task, double trained_loss, double initial_loss) {
  return !(trained_loss <= kDivergedFactor * std::max(zero_predictor_loss(task), initial_loss));
}

int divergence_prompts(int eval_samples) { return std::min(eval_samples, kDivergenceProbe); }

std::string divergence(const Task& task, const std::string& what, const std::vector<double>& trained, double initial) {
  const int probe = divergence_prompts(int(trained.size()));
  double loss = 0;
  for (int k = 0; k < probe; ++k) loss += trained[std::size_t(k)] / probe;
  if (!diverged(task, loss, initial)) return "";
  using results::short_number;
  return "training diverged: " + what + " ends at held-out loss " + short_number(loss) + " on the first " +
         std::to_string(probe) + " held-out prompts, more than " + std::to_string(int(kDivergedFactor)) +
         " times both its loss before training (" + short_number(initial) + ") and the zero predictor's E|y|^2 = " +
         short_number(zero_predictor_loss(task));
}

LossEstimate estimate(std::vector<double> per_prompt) {
  LossEstimate e;
  const double n = double(per_prompt.size());
  for (double v : per_prompt) e.value += v / n;
  double var = 0;
  for (double v : per_prompt) var += (v - e.value) * (v - e.value);
  e.se = n > 1 ? std::sqrt(var / (n - 1) / n) : 0.0;
  if (!std::isfinite(e.value) || !std::isfinite(e.se)) throw NumericalError("a held-out loss is not finite");
  e.per_prompt = std::move(per_prompt);
  return e;
}

LossEstimate paired_difference(const LossEstimate& a, const LossEstimate& b) {
  if (a.per_prompt.size() != b.per_prompt.size()) throw std::invalid_argument("paired_difference: sizes differ");
  std::vector<double> diff(a.per_prompt.size());
  for (std::size_t i = 0; i < diff.size(); ++i) diff[i] = a.per_prompt[i] - b.per_prompt[i];
  return estimate(std::move(diff));
}

LossEstimate held_out_loss(const Task& task, const Predictor& predict, int samples, std::uint64_t seed,
                           const std::string& stream, int chunk) {
  Rng rng(seed, stream);
  std::vector<double> per_prompt;
  per_prompt.reserve(std::size_t(samples));
  for (int begin = 0; begin < samples; begin += chunk) {
    std::vector<Prompt> prompts;
    for (int i = begin; i < std::min(samples, begin + chunk); ++i) prompts.push_back(draw_prompt(task, rng));
    // Prompt b with x_{n+1} = e_k is probe b d + k; its prediction is U(D_b) e_k.
    const int d = task.d;
    std::vector<Prompt> probes;
    for (const Prompt& p : prompts)
      for (int k = 0; k < d; ++k) {
        probes.push_back(p);
        probes.back().x_query = VecD::Unit(d, k);
      }
    const MatD u = predict(probes);
    for (std::size_t b = 0; b < prompts.size(); ++b) {
      const MatD U = u.middleRows(Eigen::Index(b) * d, d).transpose();
      per_prompt.push_back((U - prompts[b].W).squaredNorm() + d * task.sigma * task.sigma);
    }
  }
  return estimate(std::move(per_prompt));
}

}  // namespace qkvlab::icl
