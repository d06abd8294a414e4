#include "core/icl/posterior.hpp"

#include "core/errors.hpp"

#include <string>

namespace qkvlab::icl {

Regularized regularized_gram(const MatD& XXt, double s) {
  Regularized r;
  r.llt.compute(XXt + s * MatD::Identity(XXt.rows(), XXt.cols()));
  if (r.llt.info() != Eigen::Success)
    throw NumericalError("X X^T + sigma^2 I is singular (sigma = 0 needs n >= d)");
  r.inverse = r.llt.solve(MatD::Identity(XXt.rows(), XXt.cols()));
  return r;
}

MatD predictor(Form form, const MatD& YXt, const MatD& W0, double sigma, const Regularized& r) {
  // (…)⁻¹ is symmetric, so M (…)⁻¹ = ((…)⁻¹ Mᵀ)ᵀ.
  if (form == Form::posterior_mean) return (sigma * sigma * W0 + YXt) * r.inverse;
  return YXt * r.inverse;
}

double irreducible_loss(int d, double sigma, const Regularized& r) {
  return d * sigma * sigma * (1.0 + r.inverse.trace());
}

void require_posterior(const Task& task) {
  if (task.sigma == 0 && task.n < task.d)
    throw UsageError("sigma = 0 needs n >= d (got n = " + std::to_string(task.n) + ", d = " + std::to_string(task.d) +
                     "): X X^T has rank n, so the posterior mean is undefined");
}

const char* form_name(Form form) {
  switch (form) {
    case Form::posterior_mean: return "posterior_mean";
    case Form::ridge: return "ridge";
    case Form::ridge_sigma_typo: return "ridge_sigma_typo";
  }
  return "?";
}

}  // namespace qkvlab::icl
