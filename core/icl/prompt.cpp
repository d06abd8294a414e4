#include "core/icl/prompt.hpp"

#include "core/errors.hpp"

#include <cmath>
#include <cstdio>
#include <string>

namespace qkvlab::icl {

MatD Task::prior_mean() const { return W0.size() == 0 ? MatD::Zero(d, d) : W0; }

void validate(const Task& task) {
  if (task.d < 1) throw UsageError("d must be at least 1 (got " + std::to_string(task.d) + ")");
  if (task.n < 1) throw UsageError("n must be at least 1 (got " + std::to_string(task.n) + ")");
  if (!(task.sigma >= 0)) throw UsageError("sigma must be a non-negative number");
  if (task.W0.size() != 0 && (task.W0.rows() != task.d || task.W0.cols() != task.d))
    throw UsageError("W0 must be " + std::to_string(task.d) + "x" + std::to_string(task.d) + " (got " +
                     std::to_string(task.W0.rows()) + "x" + std::to_string(task.W0.cols()) + ")");
  if (!std::isfinite(zero_predictor_loss(task))) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "sigma = %g with |W_0|_F = %g: the loss scale E|y|^2 = |W_0|_F^2 + d^2 + d sigma^2 overflows a double "
                  "(it must stay below 1.8e308)",
                  task.sigma, task.prior_mean().stableNorm());
    throw UsageError(buf);
  }
}

double zero_predictor_loss(const Task& task) {
  return task.prior_mean().squaredNorm() + double(task.d) * task.d + task.d * task.sigma * task.sigma;
}

std::string scale_note(const Task& task) {
  char buf[240];
  std::snprintf(buf, sizeof buf,
                " at sigma = %g, |W_0|_F = %g (a scale whose products overflow double precision: lower --sigma or "
                "--w0-scale)",
                task.sigma, task.prior_mean().stableNorm());
  return buf;
}

Prompt draw_prompt(const Task& task, Rng& rng) {
  const int d = task.d, n = task.n;
  Prompt p;
  p.W = task.prior_mean() + rng.gaussian(d, d);
  p.X = rng.gaussian(d, n);
  p.Y = p.W * p.X + rng.gaussian(d, n, task.sigma);
  p.x_query = rng.gaussian(d, 1);
  p.y_query = p.W * p.x_query + rng.gaussian(d, 1, task.sigma);
  return p;
}

MatD prompt_tokens(const Prompt& p) {
  const Eigen::Index d = p.X.rows(), n = p.X.cols();
  MatD E(d, 2 * n + 1);
  for (Eigen::Index i = 0; i < n; ++i) {
    E.col(2 * i) = p.X.col(i);
    E.col(2 * i + 1) = p.Y.col(i);
  }
  E.col(2 * n) = p.x_query;
  return E;
}

}  // namespace qkvlab::icl
