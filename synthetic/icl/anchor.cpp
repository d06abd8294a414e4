#include "synthetic/icl/anchor.hpp"

#include "core/errors.hpp"
#include "core/parallel.hpp"
#include "engine/cpu_backend.hpp"
#include "synthetic/icl/linear_attention_models.hpp"

#include <mutex>

namespace qkvlab::icl {

double one_step_gd_loss(int d, int n, double sigma, double eta) {
  const double dd = double(d) * d, s2 = sigma * sigma;
  return eta * eta * n * dd * (n + d + 1 + s2) - 2 * eta * n * dd + dd + d * s2;
}

OneStepGd best_one_step_gd(int d, int n, double sigma) {
  const double s2 = sigma * sigma, eta = 1 / (n + d + 1 + s2);
  return {eta, one_step_gd_loss(d, n, sigma, eta)};
}

MatD one_step_gd_predictions(const std::vector<Prompt>& prompts, double eta) {
  MatD out(Eigen::Index(prompts.size()), prompts.front().X.rows());
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    const Prompt& p = prompts[b];
    out.row(Eigen::Index(b)) = (eta * (p.Y * (p.X.transpose() * p.x_query))).transpose();
  }
  return out;
}

void validate(const AnchorConfig& c) {
  validate(c.task);
  if (c.task.W0.size() != 0 && c.task.W0.norm() != 0)
    throw UsageError("the one-step anchor is defined for W0 = 0");
  validate(c.train);
  if (c.restarts < 1) throw UsageError("restarts must be at least 1");
  if (c.eval_samples < 2) throw UsageError("held-out samples must be at least 2");
  if (c.threads < 0) throw UsageError("threads must be non-negative (0: one per hardware thread)");
}

AnchorResult run_anchor(const AnchorConfig& c, const std::function<void(int, int)>& progress) {
  validate(c);
  AnchorResult r;
  r.analytic = best_one_step_gd(c.task.d, c.task.n, c.task.sigma);
  const std::string eval_stream = "icl/anchor/eval";
  r.gd_monte_carlo = held_out_loss(
      c.task, [&](const std::vector<Prompt>& p) { return one_step_gd_predictions(p, r.analytic.eta); },
      c.eval_samples, c.seed, eval_stream);
  r.runs.resize(std::size_t(c.restarts));
  std::mutex mutex;
  int done = 0;
  parallel_for(c.restarts, c.threads, [&](int i) {
    const std::string tag = "restart=" + std::to_string(i);
    Rng init(c.seed, "icl/anchor/init/" + tag), data(c.seed, "icl/anchor/batches/" + tag);
    engine::CpuBackend<double> backend(1);  // one run per thread
    LinearAttentionStack model(backend, {c.task.d, c.task.n, 1, 1, VariantKind::vanilla}, init);
    AnchorRun& run = r.runs[std::size_t(i)];
    const Predictor predict = trained_predictor(model, make_concat_batch);
    // The untrained model's loss on the first held-out prompts, against which divergence is judged.
    const double initial = held_out_loss(c.task, predict, divergence_prompts(c.eval_samples), c.seed, eval_stream).value;
    run.curve = train_on_fresh_prompts(model, c.task, data, c.train);
    run.selection_loss = held_out_loss(c.task, predict, c.eval_samples, c.seed, "icl/anchor/select").value;
    run.trained = held_out_loss(c.task, predict, c.eval_samples, c.seed, eval_stream);
    if (const std::string why = divergence(c.task, "restart " + std::to_string(i), run.trained.per_prompt, initial); !why.empty())
      throw NumericalError(why);  // icl train's rule and outcome: exit 3, nothing written
    run.gap_to_gd = paired_difference(run.trained, r.gd_monte_carlo);
    std::lock_guard lock(mutex);
    if (progress) progress(++done, c.restarts);
  });
  for (std::size_t i = 1; i < r.runs.size(); ++i)
    if (r.runs[i].selection_loss < r.runs[std::size_t(r.best)].selection_loss) r.best = int(i);
  return r;
}

}  // namespace qkvlab::icl
