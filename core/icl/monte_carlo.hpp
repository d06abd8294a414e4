// Monte Carlo over prompts in chunks, deterministic in the thread count, and
// the delta method for quantities that depend on the estimated Λ.
//
// A run draws `prompts` prompts in chunks of chunk_size; chunk j draws from
// Rng(seed, stream + "/chunk/" + j). Each chunk accumulates the per-prompt
// vectors f ∈ R^p (sums, sums of squares, and cross products of the first
// `full` entries); chunks are merged in chunk order after all have run, so
// the sums are bitwise the same for any number of threads. A second pass may
// visit, instead of the prompts, items computed from them and kept in memory
// (synthetic/icl/theory.cpp): the same chunks in the same order give the same sums.
#pragma once

#include "core/errors.hpp"
#include "core/parallel.hpp"
#include "core/icl/prompt.hpp"
#include "core/statistics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace qkvlab::icl {

inline constexpr long chunk_size = 512;

// sqrt(variance / n). A negative variance (cancellation) is reported as a
// NumericalError with its value, never clamped to zero.
inline double standard_error(double variance, long n) {
  if (variance < 0) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "a Monte Carlo variance is negative (%.3g over %ld samples): cancellation", variance, n);
    throw NumericalError(buf);
  }
  return std::sqrt(variance / double(n));
}

// A variance computed in floating point, with `rounding` a bound on its rounding error: a value within
// that bound of zero is zero to working precision (an influence that is identically zero in exact
// arithmetic, whose variance cancels to a few units in the last place of its terms), and gives SE 0;
// a value below −rounding cannot come from rounding and is reported as a NumericalError. An
// overflowed variance or bound gives NaN, which the callers' finiteness checks report.
inline double standard_error(double variance, double rounding, long n) {
  if (!std::isfinite(variance) || !std::isfinite(rounding)) return std::numeric_limits<double>::quiet_NaN();
  if (std::abs(variance) <= rounding) return 0;
  if (variance < 0) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "a delta-method variance is negative (%.3g, beyond its rounding bound %.3g, over %ld samples): "
                  "cancellation beyond rounding",
                  variance, rounding, n);
    throw NumericalError(buf);
  }
  return std::sqrt(variance / double(n));
}

// γ_k = k u / (1 − k u), u the unit roundoff (Higham, Accuracy and Stability, §3.1).
inline double gamma_rounding(double k) {
  const double u = std::numeric_limits<double>::epsilon() / 2;
  return k * u / (1 - k * u);
}

// Per-prompt vectors' sums (the means are sum / count, as they always were) and
// their centered second moments, by Welford's update and Chan et al.'s merge
// (numerically stable: no sum of squares minus a squared sum).
struct Moments {
  long count = 0;
  VecD sum;
  VecD center, m2;  // running mean; Σ (f − mean)², entry by entry
  MatD cross;       // Σ (f − mean)(f − mean)ᵀ of the first `full` entries (lower triangle)
  long depth = 0;   // the longest chain of rounded additions into any sum: 1 per add, 1 per merge

  Moments(int p, int full)
      : sum(VecD::Zero(p)), center(VecD::Zero(p)), m2(VecD::Zero(p)), cross(MatD::Zero(full, full)) {}
  void add(const VecD& f);
  void merge(const Moments& o);
  double mean(int i) const { return sum(i) / double(count); }
  // Sample covariance (N − 1) of entries i, j (both < full, or i == j).
  double covariance(int i, int j) const {
    const double s = i == j ? m2(i) : cross(std::max(i, j), std::min(i, j));
    return s / double(count - 1);
  }
  Estimate estimate(int i) const { return {mean(i), standard_error(covariance(i, i), count)}; }
  // r_i with |rounding error of covariance(i, j)| <= r_i r_j. Each centered sum is accumulated along
  // at most `depth` rounded additions of terms with a few roundings each (δ = f − running mean, the
  // product, Welford's or Chan's weight), and the terms' absolute values sum to at most
  // 20 N s_i s_j, s the root mean square of f (Σ δ² <= 2 Σ f² + 2 Σ mean_t² <= 10 Σ f² by Hardy's
  // inequality, once for the adds and once for the merges). So to first order in u
  // |error| <= γ_{depth+4} 20 N/(N − 1) s_i s_j (Higham §4.2; Chan, Golub and LeVeque 1983).
  double covariance_rounding(int i) const {
    const double n = double(count), rms2 = m2(i) / n + mean(i) * mean(i);
    return std::sqrt(gamma_rounding(double(depth + 4)) * 20 * n / (n - 1) * rms2);
  }
};

inline void Moments::add(const VecD& f) {
  ++count, ++depth;
  sum += f;
  const VecD delta = f - center;
  center += delta / double(count);
  m2 += delta.cwiseProduct(f - center);
  const Eigen::Index k = cross.rows();
  if (k > 0) cross.selfadjointView<Eigen::Lower>().rankUpdate(delta.head(k), double(count - 1) / double(count));
}

inline void Moments::merge(const Moments& o) {
  if (o.count == 0) return;
  if (count == 0) {
    *this = o;
    return;
  }
  const double na = double(count), nb = double(o.count), n = na + nb;
  const VecD delta = o.center - center;
  count += o.count;
  depth = std::max(depth, o.depth) + 1;
  sum += o.sum;
  center += delta * (nb / n);
  m2 += o.m2 + delta.cwiseAbs2() * (na * nb / n);
  cross += o.cross;
  const Eigen::Index k = cross.rows();
  if (k > 0) cross.selfadjointView<Eigen::Lower>().rankUpdate(delta.head(k), na * nb / n);
}

// The chunk skeleton: `items` items in chunks of chunk_size; visit_chunk(j, each)
// calls each(item, index) for chunk j's items in order (index = j·chunk_size + k),
// and per_item(item, index, f) fills f (size p). Chunks run in parallel; their
// moments are merged in chunk order.
template <class VisitChunk, class PerItem>
Moments accumulate_chunks(long items, int threads, int p, int full, VisitChunk visit_chunk, PerItem per_item) {
  const long chunks = (items + chunk_size - 1) / chunk_size;
  std::vector<Moments> parts(std::size_t(chunks), Moments(p, full));
  parallel_for(chunks, threads, [&](std::int64_t j) {
    VecD f(p);
    visit_chunk(long(j), [&](const auto& item, long index) {
      per_item(item, index, f);
      parts[std::size_t(j)].add(f);
    });
  });
  Moments total(p, full);
  for (const auto& m : parts) total.merge(m);
  return total;
}

// Chunk j of a run's prompts: drawn in order from Rng(seed, stream + "/chunk/" + j).
struct PromptChunks {
  const Task& task;
  long prompts;
  std::uint64_t seed;
  std::string stream;

  template <class Each>
  void operator()(long j, Each each) const {
    Rng rng(seed, stream + "/chunk/" + std::to_string(j));
    const long count = std::min(chunk_size, prompts - j * chunk_size);
    for (long k = 0; k < count; ++k) each(draw_prompt(task, rng), j * chunk_size + k);
  }
};

// per_prompt(const Prompt&, Eigen::Ref<VecD> f) fills f (size p) for one prompt.
template <class PerPrompt>
Moments run_chunks(const Task& task, long prompts, std::uint64_t seed, const std::string& stream, int threads, int p,
                   int full, PerPrompt per_prompt) {
  return accumulate_chunks(prompts, threads, p, full, PromptChunks{task, prompts, seed, stream},
                           [&](const Prompt& pr, long, auto& f) { per_prompt(pr, f); });
}

// Λ's per-prompt sufficient statistics: num_i = (Û)_{i,:} B_{i,:}ᵀ and
// den_i = ‖B_{i,:}‖², B = Y Xᵀ; λ_i = Σ num_i / Σ den_i.
struct LambdaSums {
  VecD lambda, mean_den;
};

// Quantities f_q(λ; D), q < Q, with gradients g_{q,i} = ∂f_q/∂λ_i, evaluated
// at the estimated λ (a second pass over the same prompts, same streams).
// Returns λ's estimates (delta method: SE of mean ψ_i, ψ_i = (num_i − λ_i den_i)/mean den_i)
// and each f_q's with the influence f_q + Σ_i ḡ_{q,i} ψ_i.
struct LambdaDependent {
  std::vector<Estimate> lambda, values;
};

// Pass 2's moments: per prompt, f (Q), ψ (d) with full cross products, then g (Q·d,
// column-major, g(q, i) at i·Q + q) as sums only.
inline int lambda_dependent_full(int d, int Q) { return Q + d; }
inline int lambda_dependent_size(int d, int Q) { return Q + d + Q * d; }

// per_item(const Item&, const VecD& lambda, Eigen::Ref<VecD> f, Eigen::Ref<MatD> g,
//          Eigen::Ref<VecD> num, Eigen::Ref<VecD> den), over the items visit_chunk visits
// (accumulate_chunks); Item is a Prompt, or anything computed from one.
template <class VisitChunk, class PerItem>
Moments lambda_dependent_moments(int d, long items, int threads, const LambdaSums& lam, int Q, VisitChunk visit_chunk,
                                 PerItem per_item) {
  return accumulate_chunks(items, threads, lambda_dependent_size(d, Q), lambda_dependent_full(d, Q), visit_chunk,
                           [&](const auto& item, long, auto& out) {
                             VecD f(Q), num(d), den(d);
                             MatD g(Q, d);
                             per_item(item, lam.lambda, f, g, num, den);
                             out.head(Q) = f;
                             out.segment(Q, d) = (num - lam.lambda.cwiseProduct(den)).cwiseQuotient(lam.mean_den);
                             out.tail(Q * d) = g.reshaped();
                           });
}

// The variance of f_q's influence f_q + Σ_i ḡ_i ψ_i, vᵀ C v with v = (1, ḡ) and C the covariance of
// (f_q, ψ), and the bound on its rounding error: the covariances' (covariance_rounding), which
// sum to at most (Σ_a |v_a| r_a)², plus the quadratic form's own 1 + 2d + d² products' summation.
struct VarianceWithRounding {
  double variance = 0, rounding = 0;
};

inline VarianceWithRounding influence_variance(const Moments& m, int q, int Q, const VecD& gbar) {
  const int d = int(gbar.size());
  double var = m.covariance(q, q), magnitude = std::abs(var), accumulated = m.covariance_rounding(q);
  for (int i = 0; i < d; ++i) {
    const double cross = 2 * gbar(i) * m.covariance(q, Q + i);
    var += cross, magnitude += std::abs(cross);
    accumulated += std::abs(gbar(i)) * m.covariance_rounding(Q + i);
    for (int j = 0; j < d; ++j) {
      const double term = gbar(i) * gbar(j) * m.covariance(Q + i, Q + j);
      var += term, magnitude += std::abs(term);
    }
  }
  return {var, gamma_rounding(1 + 2 * d + d * d) * magnitude + accumulated * accumulated};
}

inline double standard_error(const VarianceWithRounding& v, long n) { return standard_error(v.variance, v.rounding, n); }

// λ's and each f_q's estimates from pass 2's moments (the delta method above).
inline LambdaDependent finish_lambda_dependent(const Moments& m, const LambdaSums& lam, int Q) {
  const int d = int(lam.lambda.size()), full = lambda_dependent_full(d, Q);
  LambdaDependent r;
  for (int i = 0; i < d; ++i)
    r.lambda.push_back({lam.lambda(i), standard_error(m.covariance(Q + i, Q + i), m.count)});
  for (int q = 0; q < Q; ++q) {
    VecD gbar(d);
    for (int i = 0; i < d; ++i) gbar(i) = m.mean(full + i * Q + q);
    r.values.push_back({m.mean(q), standard_error(influence_variance(m, q, Q, gbar), m.count)});
  }
  return r;
}

template <class VisitChunk, class PerItem>
LambdaDependent lambda_dependent(int d, long items, int threads, const LambdaSums& lam, int Q, VisitChunk visit_chunk,
                                 PerItem per_item) {
  return finish_lambda_dependent(lambda_dependent_moments(d, items, threads, lam, Q, visit_chunk, per_item), lam, Q);
}

}  // namespace qkvlab::icl
