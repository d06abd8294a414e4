// The checks of lemmas.hpp. Each check draws its prompts from its own stream
// "icl/lemmas/<id>/<variant>" and its random weights from ".../weights".
#include "theory/skipv1_lemmas.hpp"

#include "core/parallel.hpp"

#include "core/errors.hpp"
#include "core/icl/monte_carlo.hpp"

#include <cmath>
#include <cstdio>

namespace qkvlab::icl {
namespace {

struct RandomPoint {
  MatD A, B;
  ReducedWeights<double> r;
};

int copy_width(const Task& task, const LemmaOptions& o) {
  if (o.a > task.d) throw UsageError("a must be at most d = " + std::to_string(task.d));
  return o.a >= 0 ? o.a : task.d / 2;
}

RandomPoint random_point(const Task& task, int a, Rng& rng) {
  const int d = task.d;
  const double s = 1.0 / std::sqrt(double(d));
  RandomPoint p{rng.gaussian(a, d, s), rng.gaussian(d - a, d, s), {}};
  const MatD Aq = query_embedding<double>(p.A, d);
  for (int h = 0; h < 2; ++h) {
    p.r.W[h] = rng.gaussian(d, d, s);
    p.r.M[h] = rng.gaussian(d, d, s) * Aq / (2.0 * task.n);
  }
  return p;
}

// The per-prompt pieces every check needs.
struct PromptView {
  MatD XXt, B, W_hat;  // B = Y Xᵀ, W_hat the form's predictor
};

PromptView view(const Prompt& p, const Task& task, Form form) {
  PromptView v{p.X * p.X.transpose(), p.Y * p.X.transpose(), {}};
  const double s = form == Form::ridge_sigma_typo ? task.sigma : task.sigma * task.sigma;
  v.W_hat = predictor(form, v.B, task.prior_mean(), task.sigma, regularized_gram(v.XXt, s));
  return v;
}

// The task's own checks, and W_D defined: every statement is about it.
void validate_lemma_task(const Task& task) {
  validate(task);
  require_posterior(task);
}

double dot(const MatD& a, const MatD& b) { return a.cwiseProduct(b).sum(); }

// `scale`: the size of the statistic's terms, for its rounding; a loss-valued statistic's is the task's
// loss scale E‖y‖² (the default, scale < 0), a normalized one's 1.
LemmaResult result(const Task& task, std::string id, std::string variant, std::string statement, Estimate e,
                   std::string note = "", double scale = -1) {
  if (!std::isfinite(e.value) || !std::isfinite(e.se))
    throw NumericalError(id + ": statistic is not finite" + scale_note(task));
  LemmaResult r{.id = std::move(id), .variant = std::move(variant), .statement = std::move(statement), .residual = e,
                .note = std::move(note)};
  // A mean within the rounding of its terms is zero: its z is 0 (at σ = 0 a statistic can be zero at
  // every prompt, its se 0 and its mean a few ulps of the loss scale E‖y‖², which a z of the mean over
  // its se alone called infinite: "DOES NOT" for a statement that holds, and a control "rejected").
  const double rounding = lemma2_identity_budget(task) * (scale < 0 ? zero_predictor_loss(task) : scale);
  r.z = std::abs(e.value) <= rounding ? 0 : e.se > 0 ? std::abs(e.value) / e.se : INFINITY;
  r.holds = r.z <= lemma_budget;
  return r;
}

std::string arch_name(qkv::VariantKind a) { return a == qkv::VariantKind::vanilla ? "k=1 (MHA)" : "k=2 (SkipV1)"; }

template <class F> Estimate scalar_mc(const Task& task, const LemmaOptions& o, const std::string& stream, F f) {
  return run_chunks(task, o.prompts, o.seed, stream, o.threads, 1, 0,
                    [&](const Prompt& p, auto& out) { out(0) = f(p); })
      .estimate(0);
}

LambdaSums lambda_sums(const Task& task, const LemmaOptions& o, const std::string& stream) {
  const int d = task.d;
  const Moments m = run_chunks(task, o.prompts, o.seed, stream, o.threads, 2 * d, 0, [&](const Prompt& p, auto& f) {
    const PromptView v = view(p, task, o.form);
    f.head(d) = v.W_hat.cwiseProduct(v.B).rowwise().sum();
    f.tail(d) = v.B.rowwise().squaredNorm();
  });
  LambdaSums s{VecD(d), VecD(d)};
  for (int i = 0; i < d; ++i) {
    s.mean_den(i) = m.mean(d + i);
    s.lambda(i) = m.mean(i) / s.mean_den(i);
  }
  return s;
}

// Runs a Λ-dependent per-prompt statistic f(v, p, λ, g) on one stream, both passes.
template <class F> Estimate lambda_mc(const Task& task, const LemmaOptions& o, const std::string& stream, F stat) {
  const LambdaSums lam = lambda_sums(task, o, stream);
  return lambda_dependent(task.d, o.prompts, o.threads, lam, 1, PromptChunks{task, o.prompts, o.seed, stream},
                          [&](const Prompt& p, const VecD& lambda, auto& f, auto& g, auto& num, auto& den) {
                            const PromptView v = view(p, task, o.form);
                            num = v.W_hat.cwiseProduct(v.B).rowwise().sum();
                            den = v.B.rowwise().squaredNorm();
                            VecD grad(task.d);
                            f(0) = stat(v, p, lambda, grad);
                            g.row(0) = grad.transpose();
                          })
      .values[0];
}

}  // namespace

double lemmas_memory_bytes(const Task& task, const LemmaOptions& o) {
  const double d = task.d, n = task.n, chunks = std::ceil(double(o.prompts) / double(chunk_size));
  return chunks * 32 * (d * d * d + 1) + double(worker_count(o.threads)) * 8 * (6 * d * n + 40 * d * d);
}

double lemma2_identity_budget(const Task& task) {
  return 64 * (task.n + 2.0 * task.d) * unit_roundoff<double>();
}

double theorem_w0_scale(const Task& task) {
  return task.sigma > 0 ? 1.5 * 2.0 * std::sqrt(double(task.d)) * task.sigma : 1.0;
}

LemmaResult check_lemma1(const Task& task, const LemmaOptions& o, qkv::VariantKind arch) {
  validate_lemma_task(task);
  const std::string stream = std::string("icl/lemmas/lemma1/") + (arch == qkv::VariantKind::vanilla ? "mha" : "skipv1");
  Rng wrng(o.seed, stream + "/weights");
  RandomPoint w = random_point(task, copy_width(task, o), wrng);
  if (o.zero_weights) w.r.W = {MatD::Zero(task.d, task.d), MatD::Zero(task.d, task.d)};
  const Estimate e = scalar_mc(task, o, stream, [&](const Prompt& p) {
    const PromptView v = view(p, task, o.form);
    const MatD U = reduced_map<double>(p.X, p.Y, w.A, w.B, w.r, arch);
    // ‖U − W*‖² − ‖Ŵ − W*‖² − ‖U − Ŵ‖² = 2⟨U − Ŵ, Ŵ − W*⟩ (U − W* = (U − Ŵ) + (Ŵ − W*))
    return 2 * dot(U - v.W_hat, v.W_hat - p.W);
  });
  return result(task, "skipv1.lemma1", arch_name(arch), "L_k = C + E||sum_h W^h G M^h - W_D||^2 at random weights", e,
                std::string("form ") + form_name(o.form) + (o.zero_weights ? ", U = 0" : ""));
}

namespace {

std::string lemma2_stream(qkv::VariantKind arch) {
  return std::string("icl/lemmas/lemma2/") + (arch == qkv::VariantKind::vanilla ? "mha" : "skipv1");
}

RandomPoint lemma2_weights(const Task& task, const LemmaOptions& o, qkv::VariantKind arch) {
  // At a = 0 every M^h = R^h [A; 0]/(2n) is 0, so U ≡ 0 and so are its parts: the identity is 0 = 0
  // with no map to tie the parts to (its relative error 0/0) and the cross term is 0 by construction.
  if (copy_width(task, o) == 0)
    throw UsageError("lemma 2 needs a copy width a of at least 1: at a = 0 the random weights' map U is 0 and the "
                     "statement is vacuous");
  Rng wrng(o.seed, lemma2_stream(arch) + "/weights");
  return random_point(task, copy_width(task, o), wrng);
}

// One prompt's reduced map U and Eqs. 9–10's parts (of o.parts_of's equation, read as o.reading).
struct Lemma2Point {
  MatD U;
  Lemma2Parts<double> N;
  double identity_rel_err() const { return (N.N1 + N.N2 + N.N3 - U).norm() / U.norm(); }
};

Lemma2Point lemma2_point(const Prompt& p, const RandomPoint& w, const LemmaOptions& o, qkv::VariantKind arch) {
  return {reduced_map<double>(p.X, p.Y, w.A, w.B, w.r, arch),
          lemma2_parts<double>(p.X, p.Y, w.A, w.B, w.r, o.parts_of.value_or(arch), o.reading)};
}

}  // namespace

IdentityResult lemma2_identity(const Task& task, const LemmaOptions& o, qkv::VariantKind arch) {
  validate_lemma_task(task);
  const RandomPoint w = lemma2_weights(task, o, arch);
  const Moments m = run_chunks(task, o.prompts, o.seed, lemma2_stream(arch), o.threads, 1, 0,
                               [&](const Prompt& p, auto& out) { out(0) = lemma2_point(p, w, o, arch).identity_rel_err(); });
  return {m.mean(0), lemma2_identity_budget(task)};
}

LemmaResult check_lemma2(const Task& task, const LemmaOptions& o, qkv::VariantKind arch) {
  validate_lemma_task(task);
  const RandomPoint w = lemma2_weights(task, o, arch);
  const Moments m = run_chunks(task, o.prompts, o.seed, lemma2_stream(arch), o.threads, 2, 0, [&](const Prompt& p, auto& out) {
    const PromptView v = view(p, task, o.form);
    const Lemma2Point q = lemma2_point(p, w, o, arch);
    out(0) = dot(v.W_hat - q.N.N3, q.N.N1 + q.N.N2);
    out(1) = q.identity_rel_err();
  });
  const IdentityResult identity{m.mean(1), lemma2_identity_budget(task)};
  char identity_note[96];
  std::snprintf(identity_note, sizeof identity_note, "; identity: mean |N_1+N_2+N_3-U|/|U| = %.2g (budget %.2g)",
                identity.rel_err, identity.budget);
  LemmaResult r = result(task, "skipv1.lemma2", arch_name(arch),
                         "U = N_1 + N_2 + N_3 (Eqs. 9-10) and cross term E<W_D - N_3, N_1 + N_2> = 0 at random weights",
                         m.estimate(0), std::string("form ") + form_name(o.form) + identity_note);
  r.identity = identity;
  r.holds = r.holds && identity.holds();
  return r;
}

LemmaResult check_lemma3(const Task& task, const LemmaOptions& o, Lemma3Part part) {
  validate_lemma_task(task);
  const int d = task.d;
  const std::string stream = std::string("icl/lemmas/lemma3/") + (part == Lemma3Part::t1 ? "t1" : "t2");
  // a(D): the stack (m_1 … m_d) minus τ I, flattened; τ = Σ_i tr m_i / d².
  auto anisotropic = [&](const Prompt& p, Eigen::Ref<VecD> a) {
    const PromptView v = view(p, task, o.form);
    MatD stack(d, d * d);
    for (int i = 0; i < d; ++i)
      stack.middleCols(i * d, d) = v.B.row(i).transpose() * (part == Lemma3Part::t1 ? v.B.row(i) : v.W_hat.row(i));
    double tau = 0;
    for (int i = 0; i < d; ++i) tau += stack.middleCols(i * d, d).trace();
    tau /= double(d) * d;
    for (int i = 0; i < d; ++i) stack.middleCols(i * d, d).diagonal().array() -= tau;
    a.head(d * d * d) = stack.reshaped();
    a(d * d * d) = tau;
  };
  LemmaOptions half = o;
  half.prompts = std::max(2L, o.prompts / 2);
  const Moments m2 = run_chunks(task, half.prompts, o.seed, stream + "/half2", o.threads, d * d * d + 1, 0,
                                [&](const Prompt& p, auto& a) { anisotropic(p, a); });
  const VecD abar = m2.sum.head(d * d * d) / double(m2.count);
  const double tau = m2.mean(d * d * d), scale = double(d) * d * tau * tau;
  const Estimate e = run_chunks(task, half.prompts, o.seed, stream + "/half1", o.threads, 1, 0,
                                [&](const Prompt& p, auto& out) {
                                  VecD a(d * d * d + 1);
                                  anisotropic(p, a);
                                  out(0) = a.head(d * d * d).dot(abar) / scale;
                                })
                         .estimate(0);
  const double rel = std::sqrt(abar.squaredNorm() / scale);
  return result(task, "skipv1.lemma3", part == Lemma3Part::t1 ? "t1" : "t2",
                part == Lemma3Part::t1 ? "E[X Y_i^T Y_i X^T] = t_1 I for every i (isotropy)"
                                       : "E[X Y_i^T (W_D)_i] = t_2 I for every i (isotropy)",
                e,
                "squared relative anisotropy (unbiased split estimate); plug-in relative distance " +
                    std::to_string(rel) + ", t = " + std::to_string(tau),
                1.0);  // normalized by d² τ²: its terms are of size 1
}

LemmaResult check_lemma4(const Task& task, const LemmaOptions& o) {
  validate_lemma_task(task);
  const int d = task.d;
  const std::string stream = "icl/lemmas/lemma4";
  // Point 0: head 1 W~ = (0, J), M~ = (J; 0)/n, head 2 zero, so h = J Y Xᵀ J / n with
  // J = diag(1, −1, 0, …) (J = 1 when d = 1). Point 1: the origin (h = 0).
  std::array<std::array<MatD, 2>, 2> Wt, Mt;  // [point][head]
  MatD J = MatD::Zero(d, d);
  J(0, 0) = 1;
  if (d > 1) J(1, 1) = -1;
  for (int k = 0; k < 2; ++k)
    for (int h = 0; h < 2; ++h) Wt[k][h] = MatD::Zero(d, 2 * d), Mt[k][h] = MatD::Zero(2 * d, d);
  Wt[0][0].rightCols(d) = J;
  Mt[0][0].topRows(d) = J / double(task.n);
  const Estimate e = lambda_mc(task, o, stream, [&](const PromptView& v, const Prompt&, const VecD& lambda, VecD& g) {
    MatD Gp = MatD::Zero(2 * d, 2 * d);
    Gp.topRightCorner(d, d) = v.B.transpose();
    Gp.bottomLeftCorner(d, d) = v.B;
    MatD dh = MatD::Zero(d, d);
    for (int h = 0; h < 2; ++h) dh += Wt[0][h] * Gp * Mt[0][h] - Wt[1][h] * Gp * Mt[1][h];
    g = 2 * v.B.cwiseProduct(dh).rowwise().sum();
    return -2 * dot(v.W_hat - lambda.asDiagonal() * v.B, dh);
  });
  return result(task, "skipv1.lemma4", "JYX^TJ/n vs 0",
                "L~(W~,M~) - E||Lambda Y X^T - h||^2 is the same at h = J Y X^T J/n and h = 0", e,
                std::string("form ") + form_name(o.form));
}

LemmaResult check_thm2(const Task& task, const LemmaOptions& o, Thm2Part part) {
  validate_lemma_task(task);
  const int d = task.d;
  if (part == Thm2Part::skipv1) {
    // The construction through the reduced SkipV1 map with Λ = I: K = (G_2^2 − ½ G_1), U = Λ K.
    const MatD I = MatD::Identity(d, d), A = I, B(0, d);
    ReducedWeights<double> r;
    r.W = {-0.5 * I, I};
    r.M = {I, I};
    const Estimate e =
        lambda_mc(task, o, "icl/lemmas/thm2/skipv1", [&](const PromptView& v, const Prompt& p, const VecD& lambda,
                                                         VecD& g) {
          const MatD K = reduced_map<double>(p.X, p.Y, A, B, r, qkv::VariantKind::skipv1);
          const MatD U = lambda.asDiagonal() * K, LB = lambda.asDiagonal() * v.B;
          g = 2 * (U - p.W).cwiseProduct(K).rowwise().sum() + 2 * lambda.cwiseProduct(v.B.rowwise().squaredNorm());
          return (U - p.W).squaredNorm() - (v.W_hat - p.W).squaredNorm() - v.W_hat.squaredNorm() + LB.squaredNorm();
        });
    return result(task, "skipv1.thm2", "skipv1", "L_2 at the construction (a = d) = C + C_3", e,
                  std::string("form ") + form_name(o.form));
  }
  const std::string stream = "icl/lemmas/thm2/mha";
  Rng wrng(o.seed, stream + "/weights");
  const RandomPoint w = random_point(task, copy_width(task, o), wrng);
  const Estimate e = lambda_mc(task, o, stream, [&](const PromptView& v, const Prompt& p, const VecD& lambda, VecD& g) {
    const MatD U = reduced_map<double>(p.X, p.Y, w.A, w.B, w.r, qkv::VariantKind::vanilla);
    const auto N = lemma2_parts<double>(p.X, p.Y, w.A, w.B, w.r, qkv::VariantKind::vanilla);
    const MatD odd = N.N3, even = N.N1 + N.N2;
    g = 2 * v.B.cwiseProduct(odd).rowwise().sum();
    return (U - p.W).squaredNorm() - (v.W_hat - p.W).squaredNorm() - even.squaredNorm() - v.W_hat.squaredNorm() +
           2 * dot(lambda.asDiagonal() * v.B, odd) - odd.squaredNorm();
  });
  return result(task, "skipv1.thm2", "mha", "L_1 = C + E||N_1+N_2||^2 + C_3 + E||Lambda Y X^T - N_3||^2 (MHA bound)", e,
                std::string("form ") + form_name(o.form));
}

std::vector<LemmaResult> check_all_lemmas(const Task& task, const LemmaOptions& o) {
  return {check_lemma1(task, o, qkv::VariantKind::vanilla),     check_lemma1(task, o, qkv::VariantKind::skipv1),
          check_lemma2(task, o, qkv::VariantKind::vanilla),     check_lemma2(task, o, qkv::VariantKind::skipv1),
          check_lemma3(task, o, Lemma3Part::t1),        check_lemma3(task, o, Lemma3Part::t2),
          check_lemma4(task, o),                        check_thm2(task, o, Thm2Part::skipv1),
          check_thm2(task, o, Thm2Part::mha)};
}

}  // namespace qkvlab::icl
