// The closed-form quantities of the SkipV1 theorem (docs/math/icl.md, Appendix A
// of SkipV1Former) by Monte Carlo over prompts, each with its standard error.
// Column convention: tokens are columns; B_D = Y Xᵀ.
//
// What each estimate averages (N independent prompts D = (X, Y), W* drawn from
// the prior; x_{n+1}, ε_{n+1} integrated in closed form, posterior.hpp):
//   C                 c(D) = d σ² (1 + tr (X Xᵀ + σ² I)⁻¹)              (Rao–Blackwellized over W* | D)
//   λ_i               Σ (Ŵ_D)_{i,:} B_{i,:}ᵀ / Σ ‖B_{i,:}‖²             (ratio of means)
//   C_3               ‖Ŵ_D − Λ B_D‖²_F; with Λ at its in-sample optimum its mean equals
//                     mean ‖Ŵ_D‖² − mean ‖Λ B_D‖² exactly (the paper's definition)
//   c_a               Σ_{j>a} s_j(Λ B_D)² (Eckart–Young: ‖ΛB − R_a(ΛB)‖²), a = 0 … d
//   mha_bound[a]      c(D) + ‖Ŵ_D − Λ B_D‖² + c_a-term for a < d (C + C_3 + c_a);
//                     c(D) + ‖Ŵ_D‖² for a = d (B empty: N_3 = 0, L_1 ≥ C + E‖Ŵ_D‖²)
//   skipv1_value[a]   c(D) + ‖Λ K_a − Ŵ_D‖², the SkipV1 loss L_2 at the paper's
//                     construction W^1 = −½Λ, W^2 = Λ, W_Kᵀ W_Q = I, restricted to the
//                     coordinate copying layer A = [I_a 0], B = [0 I_{d−a}] (so M^h =
//                     diag(I_a, 0)); K_a = (G_2^2 − ½ G_{1,D}) diag(I_a, 0). At a = d this is
//                     the paper's point (K_d = Y Xᵀ, L_2 = C + C_3); for a < d the paper
//                     gives no SkipV1 point, and this restriction is an achieved value,
//                     i.e. an upper bound on min L_2 at that a.
//   gap[a]            mha_bound[a] − skipv1_value[a] (per-prompt difference).
// Standard errors: sample SD / sqrt(N) of the per-prompt values. Quantities
// that depend on the estimated Λ use the delta method: the per-prompt
// influence f + Σ_i ḡ_i ψ_i with ψ_i = (num_i − λ_i den_i)/mean(den_i) and ḡ_i
// the mean of ∂f/∂λ_i (for C_3 ḡ = 0 at the optimum). Prompts are drawn in
// chunks of 512, chunk j from Rng(seed, "icl/theory/chunk/j"), and sums are
// combined in chunk order, so results do not depend on the thread count.
// Pass 2 reuses pass 1's per-prompt X Xᵀ, Y Xᵀ, Ŵ_D, c(D) when they fit in
// options.cache_bytes, and otherwise draws the prompts again (same numbers).
#pragma once

#include "core/icl/posterior.hpp"
#include "core/icl/prompt.hpp"
#include "core/statistics.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace qkvlab::icl {

struct TheoryOptions {
  long prompts = 200000;
  std::uint64_t seed = 1;
  int threads = 0;  // 0 = hardware
  // Memory pass 1 may keep for pass 2 (X Xᵀ, Y Xᵀ, Ŵ_D and c(D): about 24 d² bytes a
  // prompt); past it pass 2 draws the prompts again. The numbers are the same either way.
  long cache_bytes = 512L << 20;
};

// The memory estimate_theory would allocate, in bytes, roughly: the per-chunk
// moments of both passes (chunks of 512 prompts, merged at the end), pass 1's
// kept statistics and each thread's prompt. Commands refuse sizes past the
// memory budget with it before anything is allocated.
double theory_memory_bytes(const Task& task, const TheoryOptions& options);

// A predictor form's first-order residual R = E[(U x_{n+1} − y_{n+1}) x_{n+1}ᵀ]
// = E[U − W*] (d×d) and its prediction loss E‖U x_{n+1} − y_{n+1}‖².
struct FormReport {
  Estimate residual;        // ‖R̂‖_F; se = sqrt(Σ se_ij²), the noise floor of ‖R̂‖_F when R = 0
  double residual_chi2 = 0;  // Σ (R̂_ij / se_ij)²: ~ χ² with d² degrees of freedom when R = 0
  Estimate loss;
};

struct Theory {
  Task task;
  TheoryOptions options;
  std::vector<Estimate> lambda;  // λ_i, i = 1 … d (index 0 … d−1)
  Estimate C, C3;
  Estimate W_hat_sq;          // E‖Ŵ_D‖²_F
  Estimate LambdaB_sq;        // E‖Λ Y Xᵀ‖²_F
  std::vector<Estimate> c_a, skipv1_value, mha_bound, gap;  // indexed a = 0 … d
  FormReport posterior, ridge;
  double wall_seconds = 0, cpu_seconds = 0;  // both passes, all threads
};

// Whether mha_bound is a lower bound on MHA's loss L_1: the proof's Lemmas 2–4 need W_0 = 0 (Ŵ_D odd
// in Y; they are measured to fail under W_0 = cI: icl lemmas), so where W_0 ≠ 0 mha_bound is the
// formula's value, not a bound (trained MHA at W_0 = 6I ends far below it).
bool mha_bound_holds(const Task& task);
// mha_bound's label at copy width a (a = −1: every a): "MHA lower bound C + C3 + c_a" (a < d),
// "... C + E|W_D|^2" (a = d); where it does not hold "MHA bound formula ... (not a bound: W_0 != 0)"
// (at a = −1 without the formula: a figure's key).
std::string mha_bound_label(const Task& task, int a);

// Throws UsageError for an invalid task or option, NumericalError when a
// prompt's X Xᵀ + σ² I is singular or a value is not finite.
Theory estimate_theory(const Task& task, const TheoryOptions& options);

}  // namespace qkvlab::icl
