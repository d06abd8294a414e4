// The per-prompt work of the SkipV1 theorem's Monte Carlo (synthetic/icl/theory.cpp)
// on the device, for `batch` prompts at once. No CUDA in this header.
//
// Every pointer is device memory holding doubles. Prompt b's d×d matrices lie
// one after another (matrix b at b·d²), column-major as Eigen stores them;
// its feature vector (what the CPU code calls f) is column b of a p × batch
// matrix, so feature j of prompt b is at b·p + j. Work is queued on the
// default stream. Errors (no device, a failed launch) throw std::runtime_error;
// inconsistent sizes throw std::invalid_argument. d is at most max_d.
#pragma once

#include <cstddef>

namespace qkvlab::gpu::icl {

inline constexpr int max_d = 64;

// Inv_b = (A_b + shift I)⁻¹ by Gauss–Jordan elimination without pivoting (every
// pivot is a Schur complement, positive for a positive definite matrix).
// Returns how many of the batch had a pivot that was not positive (not
// positive definite); their Inv_b is not meaningful.
int spd_inverse_batched(int batch, int d, double shift, const double* A, double* Inv);

// c_b = d σ² (1 + tr Inv_b), the irreducible loss c(D).
void irreducible_loss_batched(int batch, int d, double sigma, const double* Inv, double* c);

// Pass 1, p = 4 + 2d + 2d² features a prompt, in theory.cpp's order:
// c, ‖Ŵ‖², ‖Ŵ − W‖² + dσ², ‖W_r − W‖² + dσ², num (d), den (d), Ŵ − W (d²), W_r − W (d²),
// with num_i = Σ_j Ŵ_ij B_ij, den_i = Σ_j B_ij², Ŵ the posterior mean, W_r the ridge form.
int theory_pass1_size(int d);
void theory_pass1_features(int batch, int d, double sigma, const double* c, const double* B, const double* W_hat,
                           const double* W_ridge, const double* W, double* F);

// Pass 2 at Λ = diag(lambda) (lambda and mean_den: d values in device memory).
// Q = 2 + 4(d + 1) quantities f with gradients g (Q × d) and the influence ψ (d):
// F_full (Q + d features: f, then ψ) and F_grad (Q·d: g column-major, g(q, i) at i·Q + q),
// exactly theory.cpp's pass 2 — C_3, ‖ΛB‖², the tail energies c_a (one-sided Jacobi SVD of
// ΛB), the SkipV1 values at the construction, the MHA bounds and the gaps, a = 0 … d.
int theory_pass2_quantities(int d);  // Q
void theory_pass2_features(int batch, int d, const double* lambda, const double* mean_den, const double* c,
                           const double* XXt, const double* B, const double* W_hat, double* F_full, double* F_grad);

// Running moments over prompts of a p × batch feature matrix F: sum[j] += Σ_b F(j, b) and
// sumsq[j] += Σ_b F(j, b)², each summed in prompt order (deterministic).
void add_feature_moments(int p, int batch, const double* F, double* sum, double* sumsq);

}  // namespace qkvlab::gpu::icl
