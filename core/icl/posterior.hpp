// The in-context predictors of docs/math/icl.md and the closed forms behind the
// Monte Carlo estimators. Column convention: X, Y ∈ R^{d×n}, tokens are columns.
//
// Prior: the rows of W* are independent N(W_0 row, I_d); y_i = W* x_i + ε_i,
// ε_i ~ N(0, σ² I). Row r of W* has posterior precision I + X Xᵀ/σ² and mean
// (σ² w0_r + Y_r Xᵀ)(X Xᵀ + σ² I)⁻¹, so
//   posterior mean  Ŵ_D = (σ² W_0 + Y Xᵀ)(X Xᵀ + σ² I)⁻¹,
//   posterior cov   of each row: σ² (X Xᵀ + σ² I)⁻¹.
// The paper's ridge form Y Xᵀ(X Xᵀ + σ² I)⁻¹ equals Ŵ_D only when W_0 = 0;
// Appendix A also prints σ I in place of σ² I once (the "typo" form).
//
// For any U that depends on D only, x_{n+1} ~ N(0, I) and ε_{n+1} independent:
//   E[‖U x_{n+1} − y_{n+1}‖² | W*, D] = ‖U − W*‖²_F + d σ²,
//   E[(U x_{n+1} − y_{n+1}) x_{n+1}ᵀ | W*, D] = U − W*,
// and, averaging W* over its posterior,
//   E[‖U x_{n+1} − y_{n+1}‖² | D] = ‖U − Ŵ_D‖²_F + c(D),
//   c(D) = d σ² (1 + tr (X Xᵀ + σ² I)⁻¹),  so  C = E c(D).
#pragma once

#include "core/icl/prompt.hpp"
#include "core/types.hpp"

#include <Eigen/Cholesky>

namespace qkvlab::icl {

enum class Form { posterior_mean, ridge, ridge_sigma_typo };

// (X Xᵀ + s I) factored once per prompt; s = σ² (σ for the typo form).
struct Regularized {
  Eigen::LLT<MatD> llt;
  MatD inverse;  // (X Xᵀ + s I)⁻¹
};

// Throws NumericalError when X Xᵀ + s I is not positive definite (σ = 0 with n < d, which
// require_posterior refuses beforehand).
Regularized regularized_gram(const MatD& XXt, double s);

// Throws UsageError when σ = 0 and n < d: X Xᵀ (rank n) is then singular and Ŵ_D undefined.
void require_posterior(const Task& task);

// Ŵ for the form: (σ² W_0 + Y Xᵀ)(…)⁻¹, Y Xᵀ(X Xᵀ + σ² I)⁻¹ or Y Xᵀ(X Xᵀ + σ I)⁻¹.
MatD predictor(Form form, const MatD& YXt, const MatD& W0, double sigma, const Regularized& r);

// c(D) = d σ² (1 + tr (X Xᵀ + σ² I)⁻¹): the posterior expected loss of Ŵ_D given D.
double irreducible_loss(int d, double sigma, const Regularized& r);

const char* form_name(Form form);

}  // namespace qkvlab::icl
