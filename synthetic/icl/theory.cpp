// estimate_theory: the two passes described in theory.hpp. Pass 1 (stream
// "icl/theory"): the Λ-independent quantities and Λ's sums; pass 2 (the same
// prompts again): the Λ-dependent ones at the estimated Λ, with delta-method SEs.
// This file has the passes and the moments-to-estimates step (the passes run on the CPU only:
// the CUDA path was slower than this one on an H100 with 16 host cores and was deleted;
// docs/benchmarks.md).
#include "synthetic/icl/theory.hpp"

#include "core/errors.hpp"
#include "core/icl/construction.hpp"
#include "core/icl/monte_carlo.hpp"
#include "synthetic/icl/theory_passes.hpp"

#include <Eigen/SVD>

#include "core/parallel.hpp"

#include <chrono>
#include <cmath>
#include <ctime>

namespace qkvlab::icl {
namespace {

void validate(const Task& task, const TheoryOptions& o) {
  icl::validate(task);
  require_posterior(task);
  if (o.prompts < 2) throw UsageError("prompts must be at least 2 (got " + std::to_string(o.prompts) + ")");
  if (o.threads < 0) throw UsageError("threads must be non-negative (0 = one per hardware thread)");
}

void require_finite(const Estimate& e, const std::string& what, const Task& task) {
  if (!std::isfinite(e.value) || !std::isfinite(e.se)) throw NumericalError(what + " is not finite" + scale_note(task));
}

FormReport form_report(const Moments& m, int loss_index, int residual_offset, int d) {
  FormReport f;
  f.loss = m.estimate(loss_index);
  double norm2 = 0, floor2 = 0;
  for (int k = 0; k < d * d; ++k) {
    const Estimate e = m.estimate(residual_offset + k);
    norm2 += e.value * e.value;
    floor2 += e.se * e.se;
    f.residual_chi2 += e.se > 0 ? (e.value / e.se) * (e.value / e.se) : 0.0;
  }
  f.residual = {std::sqrt(norm2), std::sqrt(floor2)};
  return f;
}

// Tail energy Σ_{j ≥ a} s_j² of K = Λ B for every a = 0 … d, and its gradient in λ:
// ∂s_j/∂λ_i = u_{ij} (B_{i,:} v_j), so ∂(s_j²)/∂λ_i = 2 s_j u_{ij} (B_{i,:} v_j).
void tail_energies(const MatD& LB, const MatD& B, Eigen::Ref<VecD> tail, Eigen::Ref<MatD> grad) {
  const int d = int(LB.rows());
  Eigen::BDCSVD<MatD> svd(LB, Eigen::ComputeFullU | Eigen::ComputeFullV);  // Jacobi below 16×16
  const VecD& s = svd.singularValues();
  const MatD BV = B * svd.matrixV();  // (B_{i,:} v_j)
  tail.setZero();
  grad.setZero();
  for (int a = d - 1; a >= 0; --a) {
    tail(a) = tail(a + 1) + s(a) * s(a);
    grad.row(a) = grad.row(a + 1) + 2 * s(a) * svd.matrixU().col(a).cwiseProduct(BV.col(a)).transpose();
  }
}

// What pass 2 needs of a prompt; computed by the same code in both passes, so
// pass 2 gets the same numbers whether pass 1 kept them or the prompt is drawn again.
struct PromptStats {
  MatD XXt, B, W_hat;  // X Xᵀ, Y Xᵀ, the posterior mean Ŵ_D
  double c = 0;        // c(D)
};

PromptStats prompt_stats(const Prompt& p, const MatD& W0, double sigma, Regularized& r) {
  PromptStats s;
  s.XXt = p.X * p.X.transpose();
  s.B = p.Y * p.X.transpose();
  r = regularized_gram(s.XXt, sigma * sigma);
  s.W_hat = predictor(Form::posterior_mean, s.B, W0, sigma, r);
  s.c = irreducible_loss(int(W0.rows()), sigma, r);
  return s;
}

}  // namespace

bool cache_fits(const Task& task, const TheoryOptions& o) {
  const double per_prompt = 8.0 * (3.0 * task.d * task.d + 1) + 128;  // three matrices' data and headers
  return double(o.prompts) * per_prompt <= double(o.cache_bytes);
}

LambdaSums lambda_sums(const Moments& pass1, int d) {
  const Pass1Layout L{d};
  LambdaSums lam{VecD(d), VecD(d)};
  for (int i = 0; i < d; ++i) {
    lam.mean_den(i) = pass1.mean(L.den() + i);
    if (!(lam.mean_den(i) > 0)) throw NumericalError("E||(Y X^T)_{i,:}||^2 is zero: lambda is undefined");
    lam.lambda(i) = pass1.mean(L.num() + i) / lam.mean_den(i);
  }
  return lam;
}

TheoryMoments theory_moments_cpu(const Task& task, const TheoryOptions& options) {
  const int d = task.d;
  const double sigma = task.sigma;
  const MatD W0 = task.prior_mean();
  const Pass1Layout L{d};

  const PromptChunks prompts{task, options.prompts, options.seed, theory_stream};
  std::vector<PromptStats> kept(cache_fits(task, options) ? std::size_t(options.prompts) : 0);
  Moments m1 = accumulate_chunks(options.prompts, options.threads, L.size(), 0, prompts,
                                 [&](const Prompt& p, long index, auto& f) {
                                   Regularized r;
                                   PromptStats s = prompt_stats(p, W0, sigma, r);
                                   const MatD W_ridge = predictor(Form::ridge, s.B, W0, sigma, r);
                                   f(0) = s.c;
                                   f(1) = s.W_hat.squaredNorm();
                                   f(2) = (s.W_hat - p.W).squaredNorm() + d * sigma * sigma;
                                   f(3) = (W_ridge - p.W).squaredNorm() + d * sigma * sigma;
                                   f.segment(L.num(), d) = s.W_hat.cwiseProduct(s.B).rowwise().sum();
                                   f.segment(L.den(), d) = s.B.rowwise().squaredNorm();
                                   f.segment(L.r_post(), d * d) = (s.W_hat - p.W).reshaped();
                                   f.segment(L.r_ridge(), d * d) = (W_ridge - p.W).reshaped();
                                   if (!kept.empty()) kept[std::size_t(index)] = std::move(s);
                                 });
  LambdaSums lam = lambda_sums(m1, d);

  const Pass2Layout P{d};
  const int A = P.a_count(), o_ca = P.ca(), o_skip = P.skip(), o_mha = P.mha(), o_gap = P.gap();
  const auto pass2 = [&](const PromptStats& s, const VecD& lambda, auto& f, auto& g, auto& num, auto& den) {
    num = s.W_hat.cwiseProduct(s.B).rowwise().sum();
    den = s.B.rowwise().squaredNorm();
    const MatD LB = lambda.asDiagonal() * s.B, diff = s.W_hat - LB;
    f(0) = diff.squaredNorm();
    g.row(0) = -2 * diff.cwiseProduct(s.B).rowwise().sum().transpose();
    f(1) = LB.squaredNorm();
    g.row(1) = 2 * lambda.cwiseProduct(den).transpose();
    tail_energies(LB, s.B, f.segment(o_ca, A), g.middleRows(o_ca, A));
    for (int a = 0; a <= d; ++a) {
      const MatD K = skipv1_construction_map(s.XXt, s.B, a), e = lambda.asDiagonal() * K - s.W_hat;
      f(o_skip + a) = s.c + e.squaredNorm();
      g.row(o_skip + a) = 2 * e.cwiseProduct(K).rowwise().sum().transpose();
      if (a < d) {
        f(o_mha + a) = s.c + f(0) + f(o_ca + a);
        g.row(o_mha + a) = g.row(0) + g.row(o_ca + a);
      } else {
        f(o_mha + a) = s.c + s.W_hat.squaredNorm();
        g.row(o_mha + a).setZero();
      }
      f(o_gap + a) = f(o_mha + a) - f(o_skip + a);
      g.row(o_gap + a) = g.row(o_mha + a) - g.row(o_skip + a);
    }
  };
  // Pass 2 visits pass 1's kept statistics, or the same prompts drawn again.
  const auto kept_chunks = [&](long j, auto each) {
    for (long k = j * chunk_size; k < std::min(options.prompts, (j + 1) * chunk_size); ++k) each(kept[std::size_t(k)], k);
  };
  const auto redrawn_chunks = [&](long j, auto each) {
    prompts(j, [&](const Prompt& p, long k) {
      Regularized r;
      each(prompt_stats(p, W0, sigma, r), k);
    });
  };
  const int Q = P.quantities();
  Moments m2 = kept.empty() ? lambda_dependent_moments(d, options.prompts, options.threads, lam, Q, redrawn_chunks, pass2)
                            : lambda_dependent_moments(d, options.prompts, options.threads, lam, Q, kept_chunks, pass2);
  return {std::move(m1), std::move(lam), std::move(m2)};
}

bool mha_bound_holds(const Task& task) { return task.prior_mean().isZero(0); }

std::string mha_bound_label(const Task& task, int a) {
  const std::string formula = a < 0           ? "C + C3 + c_a (C + E|W_D|^2 at a = d)"
                              : a < task.d    ? "C + C3 + c_a"
                                              : "C + E|W_D|^2";
  if (mha_bound_holds(task)) return "MHA lower bound " + formula;
  // Over every a the formula is left to the tables: with it the label is too wide for a figure's key.
  return a < 0 ? "MHA bound formula (not a bound: W_0 != 0)" : "MHA bound formula " + formula + " (not a bound: W_0 != 0)";
}

double theory_memory_bytes(const Task& task, const TheoryOptions& o) {
  const double d = task.d, n = task.n, chunks = std::ceil(double(o.prompts) / double(chunk_size));
  const int Q = Pass2Layout{task.d}.quantities();
  const double p1 = Pass1Layout{task.d}.size(), p2 = lambda_dependent_size(task.d, Q),
               full2 = lambda_dependent_full(task.d, Q);
  const double moments = chunks * 8 * (4 * p1 + 4 * p2 + full2 * full2);
  const double kept = cache_fits(task, o) ? double(o.prompts) * (8.0 * (3 * d * d + 1) + 128) : 0;
  const double per_thread = 8 * (6 * d * n + 40 * d * d);
  return moments + kept + double(worker_count(o.threads)) * per_thread;
}

Theory estimate_theory(const Task& task, const TheoryOptions& options) {
  validate(task, options);
  const auto wall0 = std::chrono::steady_clock::now();
  const std::clock_t cpu0 = std::clock();
  const int d = task.d;
  const TheoryMoments m = theory_moments_cpu(task, options);
  const Pass1Layout L{d};
  const Pass2Layout P{d};
  const Moments& m1 = m.pass1;
  const LambdaDependent m2 = finish_lambda_dependent(m.pass2, m.lam, P.quantities());
  const int o_ca = P.ca(), o_skip = P.skip(), o_mha = P.mha(), o_gap = P.gap();

  Theory t;
  t.task = task;
  t.options = options;
  t.lambda = m2.lambda;
  t.C = m1.estimate(0);
  t.W_hat_sq = m1.estimate(1);
  t.posterior = form_report(m1, 2, L.r_post(), d);
  t.ridge = form_report(m1, 3, L.r_ridge(), d);
  t.C3 = m2.values[0];
  t.LambdaB_sq = m2.values[1];
  for (int a = 0; a <= d; ++a) {
    t.c_a.push_back(m2.values[std::size_t(o_ca + a)]);
    t.skipv1_value.push_back(m2.values[std::size_t(o_skip + a)]);
    t.mha_bound.push_back(m2.values[std::size_t(o_mha + a)]);
    t.gap.push_back(m2.values[std::size_t(o_gap + a)]);
  }
  for (const auto& e : t.lambda) require_finite(e, "lambda", task);
  for (const auto* v : {&t.c_a, &t.skipv1_value, &t.mha_bound, &t.gap})
    for (const auto& e : *v) require_finite(e, "a bound", task);
  for (const auto& e : {t.C, t.C3, t.W_hat_sq, t.LambdaB_sq, t.posterior.loss, t.ridge.loss})
    require_finite(e, "a Monte Carlo estimate", task);
  t.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  t.cpu_seconds = double(std::clock() - cpu0) / CLOCKS_PER_SEC;
  return t;
}

}  // namespace qkvlab::icl
