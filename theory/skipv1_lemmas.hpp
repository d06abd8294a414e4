// The statements of Appendix A (SkipV1Former) as Monte Carlo checks: each reports
// a per-prompt statistic whose expectation is 0 when the statement holds, its
// mean, standard error, and a verdict (holds within Monte Carlo error when
// |mean| ≤ lemma_budget · SE). Column convention; B_D = Y Xᵀ; Û the predictor
// of the chosen form (posterior.hpp); x_{n+1}, ε_{n+1} integrated in closed
// form (E[‖U x − y‖² | W*, D] = ‖U − W*‖² + d σ²); W*, D drawn from the prior.
//
// Random weights (drawn once per check from Rng(seed, "icl/lemmas/<id>/weights")):
// A ∈ R^{a×d}, B ∈ R^{(d−a)×d} (a = ⌊d/2⌋ unless set), W^h, R^h with N(0, 1/d)
// entries and M^h = R^h [A; 0] / (2n), so that Σ_h W^h G M^h is of the order of Û
// (G grows like 2n).
//
// skipv1.lemma1 (k = 1 MHA, 2 SkipV1): L_k − C − E‖U_k − Û‖² at random weights, per prompt
//     [‖U − W*‖² + dσ²] − [‖Û − W*‖² + dσ²] − ‖U − Û‖² = 2⟨U − Û, Û − W*⟩.
//   Holds for any prior when Û is the posterior mean (E[W* | D] = Û); fails for the
//   ridge form under W_0 ≠ 0 (E[Û_ridge − W* | D] = −σ² W_0 (XXᵀ+σ²I)⁻¹, so its mean is
//   −2 E⟨U − Û_ridge, σ² W_0 (XXᵀ+σ²I)⁻¹⟩; the U-part has a random sign at random weights,
//   so the control runs at U = 0, where the mean is +2 σ² E⟨Û_ridge, W_0 (XXᵀ+σ²I)⁻¹⟩ > 0
//   for W_0 = c I).
// skipv1.lemma2: Eqs. 9–10's parts N_1, N_2, N_3 built term by term (models.hpp's
//   lemma2_parts), an identity N_1 + N_2 + N_3 = U (reported as the mean over prompts of
//   ‖N_1 + N_2 + N_3 − U‖_F / ‖U‖_F, held to lemma2_identity_budget), and the cross term
//   E⟨Û − N_3, N_1 + N_2⟩ as the statistic. N_3 is odd in Y and N_1 + N_2 even by their
//   formulas, so the identity makes them U's odd and even parts; the cross term is zero when
//   (X, Y) and (X, −Y) are equally likely and Û is odd in Y: W_0 = 0. The statement holds
//   when both do.
// skipv1.lemma3 (t1, t2): isotropy of E[b_i b_iᵀ] and E[b_i (Û)_{i,:}], b_i = (B_{i,:})ᵀ,
//   with one scalar for every i. The stack (m_1 … m_d) minus τ I (τ the mean
//   diagonal entry) is the anisotropic part a(D); the statistic is the unbiased
//   split estimate of ‖E a‖² / ‖τ I‖²: ⟨a(D), ā_2⟩/(d² τ_2²) averaged over prompts of
//   one half, with ā_2, τ_2 the means over an independent half (stream "…/half2").
//   Its mean is 0 exactly when E a = 0, and its SE is the SD over the first half.
// skipv1.lemma4: L̃(W̃, M̃) − E‖Λ B_D − h‖² is the same at two points (W̃^h ∈ R^{d×2d},
//   M̃^h ∈ R^{2d×d}): h = J Y Xᵀ J / n (head 1 W̃ = (0, J), M̃ = (J; 0)/n, head 2 zero;
//   J = diag(1, −1, 0, …)) and the origin h = 0; per prompt −2⟨Û − Λ B_D, J B_D J/n⟩, Λ
//   estimated in-sample (delta method). Why this point: with W* = c I + G, Û − ΛB ≈
//   W*(I − S/(n+d+1)), S = X Xᵀ, and for h = P B Q the leading term of E⟨Û − ΛB, h⟩ is
//   c² n (d tr(PQ) − tr P tr Q)/(n+d+1), which vanishes for P or Q ∝ I (so h = X Yᵀ/n
//   cannot see a W_0 ≠ 0) and is largest for traceless P = Q; a random point's margin
//   under W_0 = c I depended on its draw (3.7 SE at one seed).
// skipv1.thm2 (skipv1): L_2 at the paper's construction (A = I, W^1 = −½Λ, W^2 = Λ,
//   M^h = I, through models.hpp's reduced SkipV1 map) minus C + C_3, per prompt
//   [‖U − W*‖²] − [‖Û − W*‖²] − ‖Û‖² + ‖Λ B_D‖². Holds for any prior (Λ is the
//   per-row optimum, so E‖Û − ΛB‖² = E‖Û‖² − E‖ΛB‖²).
// skipv1.thm2 (mha): the decomposition behind the MHA bound at random MHA weights
//   (a = ⌊d/2⌋): L_1 = C + E‖U_even‖² + C_3 + E‖Λ B_D − U_odd‖² (Lemmas 1, 2 and 4 with
//   h = N_3); per prompt [‖U − W*‖²] − [‖Û − W*‖²] − ‖U_even‖² − ‖Û‖² + 2⟨ΛB, U_odd⟩ − ‖U_odd‖².
//   With rank U_odd ≤ a this gives L_1 ≥ C + C_3 + c_a (Eckart–Young).
#pragma once

#include "core/icl/models.hpp"
#include "core/icl/posterior.hpp"
#include "core/statistics.hpp"

#include <optional>
#include <string>
#include <vector>

namespace qkvlab::icl {

inline constexpr double lemma_budget = 4;  // z-score within which a statement "holds"

struct LemmaOptions {
  long prompts = 20000;
  std::uint64_t seed = 1;
  int threads = 0;
  int a = -1;                          // copying width for the random weights; −1: ⌊d/2⌋
  Form form = Form::posterior_mean;    // the Ŵ_D the statement is checked with
  bool zero_weights = false;           // lemma1 only: all W^h = 0 (U = 0) instead of random
  // lemma2 only (controls): build the parts of this architecture's equation, and read Eq. 10 so.
  std::optional<qkv::VariantKind> parts_of = std::nullopt;
  Eq10Reading reading = Eq10Reading::as_the_map;
};

// lemma2's identity N_1 + N_2 + N_3 = U: the parts and U sum the same products (inner
// dimensions n and d) in another order, so their relative difference is a few (n + 2d) u.
double lemma2_identity_budget(const Task& task);

struct IdentityResult {
  double rel_err = 0;  // mean over prompts of ‖N_1 + N_2 + N_3 − U‖_F / ‖U‖_F
  double budget = 0;   // lemma2_identity_budget
  bool holds() const { return rel_err <= budget; }
};

struct LemmaResult {
  std::string id, variant, statement;
  Estimate residual;  // the statistic's mean and SE; expected 0
  double z = 0;       // |mean| / SE
  bool holds = false;  // z ≤ lemma_budget (and, for lemma2, identity->holds())
  std::string note;
  std::optional<IdentityResult> identity = std::nullopt;  // lemma2's identity
};

enum class Lemma3Part { t1, t2 };
enum class Thm2Part { skipv1, mha };

LemmaResult check_lemma1(const Task& task, const LemmaOptions& o, qkv::VariantKind arch);
LemmaResult check_lemma2(const Task& task, const LemmaOptions& o, qkv::VariantKind arch);
// lemma2's identity alone, at the weights and prompts check_lemma2 draws with the same options.
IdentityResult lemma2_identity(const Task& task, const LemmaOptions& o, qkv::VariantKind arch);
LemmaResult check_lemma3(const Task& task, const LemmaOptions& o, Lemma3Part part);
LemmaResult check_lemma4(const Task& task, const LemmaOptions& o);
LemmaResult check_thm2(const Task& task, const LemmaOptions& o, Thm2Part part);

// Every check above, in ledger order.
std::vector<LemmaResult> check_all_lemmas(const Task& task, const LemmaOptions& o);

// The memory check_all_lemmas would allocate, in bytes, roughly: its largest
// per-chunk moments (sums, running means and centered squares of d³ + 1 entries, chunks of 512 prompts) and each thread's prompt.
double lemmas_memory_bytes(const Task& task, const LemmaOptions& o);

// W_0 = c I with c the smallest "round" multiple making σ_d(W_0) > 2 sqrt(d) σ:
// c = 1.5 · 2 sqrt(d) σ (or 1 when σ = 0).
double theorem_w0_scale(const Task& task);

}  // namespace qkvlab::icl
