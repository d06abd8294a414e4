#include "synthetic/icl/depth.hpp"

#include "core/errors.hpp"
#include "core/parallel.hpp"
#include "engine/cpu_backend.hpp"
#include "synthetic/icl/linear_attention_models.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>

namespace qkvlab::icl {

std::vector<MatD> gd_predictions(const std::vector<Prompt>& prompts, double eta, int steps) {
  const Eigen::Index B = Eigen::Index(prompts.size()), d = prompts.front().X.rows();
  std::vector<MatD> out(std::size_t(steps), MatD(B, d));
  for (Eigen::Index b = 0; b < B; ++b) {
    const Prompt& p = prompts[std::size_t(b)];
    const MatD S = p.X * p.X.transpose(), YXt = p.Y * p.X.transpose();
    MatD W = MatD::Zero(d, d);
    for (int k = 0; k < steps; ++k) {
      W -= eta * (W * S - YXt);
      out[std::size_t(k)].row(b) = (W * p.x_query).transpose();
    }
  }
  return out;
}

namespace {

double mean_loss(const MatD& y_hat, const std::vector<Prompt>& prompts) {
  double sum = 0;
  for (std::size_t b = 0; b < prompts.size(); ++b)
    sum += (y_hat.row(Eigen::Index(b)).transpose() - prompts[b].y_query).squaredNorm();
  return sum / double(prompts.size());
}

}  // namespace

GdStep best_gd_step(const std::vector<Prompt>& prompts, int steps) {
  const double d = double(prompts.front().X.rows()), n = double(prompts.front().X.cols());
  const double hi = 2 / std::pow(std::sqrt(n) + std::sqrt(d), 2);
  auto loss = [&](double eta) { return mean_loss(gd_predictions(prompts, eta, steps).back(), prompts); };
  const double g = (std::sqrt(5.0) - 1) / 2;
  double a = 0, b = hi, x1 = b - g * (b - a), x2 = a + g * (b - a), f1 = loss(x1), f2 = loss(x2);
  for (int it = 0; it < 40; ++it) {
    if (f1 < f2) b = x2, x2 = x1, f2 = f1, x1 = b - g * (b - a), f1 = loss(x1);
    else a = x1, x1 = x2, f1 = f2, x2 = a + g * (b - a), f2 = loss(x2);
  }
  const double eta = (a + b) / 2;
  return {steps, eta, loss(eta)};
}

void validate(const DepthConfig& c) {
  validate(c.task);
  if (c.task.W0.size() != 0 && c.task.W0.norm() != 0) throw UsageError("the depth probe is defined for W0 = 0");
  validate(c.train);
  if (c.layers.empty()) throw UsageError("the list of depths L is empty");
  for (int L : c.layers)
    if (L < 1 || L > 16) throw UsageError("each depth L must be in [1, 16] (got " + std::to_string(L) + ")");
  if (c.heads < 2 || c.heads % 2 != 0) throw UsageError("heads must be even and at least 2 (SkipV1 splits them), got " + std::to_string(c.heads));
  if (c.eval_samples < 2) throw UsageError("held-out samples must be at least 2");
  if (c.threads < 0) throw UsageError("threads must be non-negative (0: one per hardware thread)");
}

std::vector<DepthRun> run_depth(const DepthConfig& c, const std::function<void(int, int)>& progress) {
  validate(c);
  std::vector<DepthRun> runs;
  int max_layers = 0;
  for (int L : c.layers) {
    runs.push_back({L, false, {}, {}, {}, {}});
    if (L >= 2) runs.push_back({L, true, {}, {}, {}, {}});
    max_layers = std::max(max_layers, L);
  }
  // The held-out prompts, and the best GD step for each number of steps on them.
  Rng eval_rng(c.seed, "icl/depth/eval");
  std::vector<Prompt> eval;
  for (int i = 0; i < c.eval_samples; ++i) eval.push_back(draw_prompt(c.task, eval_rng));
  std::vector<GdStep> gd(static_cast<std::size_t>(max_layers));
  std::vector<MatD> gd_pred(static_cast<std::size_t>(max_layers));
  parallel_for(max_layers, c.threads, [&](int k) {
    gd[std::size_t(k)] = best_gd_step(eval, k + 1);
    gd_pred[std::size_t(k)] = gd_predictions(eval, gd[std::size_t(k)].eta, k + 1).back();
  });
  std::mutex mutex;
  int done = 0;
  parallel_for(int(runs.size()), c.threads, [&](int i) {
    DepthRun& run = runs[std::size_t(i)];
    const std::string tag = "L=" + std::to_string(run.layers) + "/" + (run.skipv1 ? "skipv1" : "mha");
    Rng init(c.seed, "icl/depth/init/" + tag), data(c.seed, "icl/depth/batches/L=" + std::to_string(run.layers));
    engine::CpuBackend<double> backend(1);  // one run per thread
    const VariantKind variant = run.skipv1 ? VariantKind::skipv1 : VariantKind::vanilla;
    LinearAttentionStack model(backend, {c.task.d, c.task.n, run.layers, c.heads, variant}, init);
    // The untrained model's loss on the first held-out prompts, against which divergence is judged.
    const std::vector<Prompt> first(eval.begin(), eval.begin() + divergence_prompts(int(eval.size())));
    const double initial = mean_loss(model.query_states(make_concat_batch(first)).back().rightCols(c.task.d), first);
    run.curve = train_on_fresh_prompts(model, c.task, data, c.train);
    // Layer-l predictions on the held-out prompts, in chunks.
    std::vector<MatD> layer_pred(std::size_t(run.layers), MatD(Eigen::Index(eval.size()), c.task.d));
    constexpr std::size_t chunk = 2000;
    for (std::size_t begin = 0; begin < eval.size(); begin += chunk) {
      const std::vector<Prompt> part(eval.begin() + long(begin), eval.begin() + long(std::min(eval.size(), begin + chunk)));
      const std::vector<MatD> states = model.query_states(make_concat_batch(part));
      for (int l = 0; l < run.layers; ++l)
        layer_pred[std::size_t(l)].middleRows(Eigen::Index(begin), Eigen::Index(part.size())) =
            states[std::size_t(l)].rightCols(c.task.d);
    }
    std::vector<double> per_prompt;
    for (int l = 1; l <= run.layers; ++l) {
      const MatD& y_hat = layer_pred[std::size_t(l - 1)];
      const MatD& g = gd_pred[std::size_t(l - 1)];
      LayerProbe probe;
      probe.layer = l, probe.gd = gd[std::size_t(l - 1)], probe.model_loss = mean_loss(y_hat, eval);
      probe.cosine = (y_hat.array() * g.array()).sum() / std::sqrt(y_hat.squaredNorm() * g.squaredNorm());
      probe.relative_distance = (y_hat - g).norm() / g.norm();
      if (!std::isfinite(probe.cosine) || !std::isfinite(probe.relative_distance))
        throw NumericalError("depth probe: a layer's prediction is not finite");
      run.probes.push_back(probe);
      if (l == run.layers)
        for (std::size_t b = 0; b < eval.size(); ++b)
          per_prompt.push_back((y_hat.row(Eigen::Index(b)).transpose() - eval[b].y_query).squaredNorm());
    }
    run.trained = estimate(std::move(per_prompt));
    run.diverged = divergence(c.task, (run.skipv1 ? "skipv1" : "mha") + std::string(" at L = ") + std::to_string(run.layers),
                              run.trained.per_prompt, initial);
    std::lock_guard lock(mutex);
    if (progress) progress(++done, int(runs.size()));
  });
  return runs;
}

}  // namespace qkvlab::icl
