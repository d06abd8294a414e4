// theory_moments_gpu: estimate_theory's two passes with the per-prompt work on a
// CUDA device. The prompts are the CPU path's (the same chunked Rng streams, drawn
// on the host by worker threads and uploaded a batch of chunks at a time); the
// device forms X Xᵀ and Y Xᵀ by batched cuBLAS products, inverts X Xᵀ + σ² I,
// forms Ŵ_D and the ridge form by batched products, and fills the feature
// vectors of gpu/icl_theory.hpp, whose moments it sums in prompt order. The
// results agree with theory_moments_cpu to rounding (tests/icl_gpu_test.cpp),
// not to the last bit: different summation orders, Gauss–Jordan for the CPU's
// Cholesky and a Jacobi SVD for Eigen's.
#include "core/errors.hpp"
#include "gpu/device.hpp"
#include "synthetic/icl/theory_passes.hpp"

#ifdef QKVLAB_HAVE_CUDA
#include "core/parallel.hpp"
#include "gpu/device_buffer.hpp"
#include "gpu/icl_theory.hpp"
#include "gpu/ops.hpp"

#include <algorithm>
#include <cstring>
#endif

#include <stdexcept>

namespace qkvlab::icl {

#ifndef QKVLAB_HAVE_CUDA

TheoryMoments theory_moments_gpu(const Task&, const TheoryOptions&) {
  throw std::runtime_error(gpu::device_status().description);
}

#else

namespace {

using gpu::DeviceBuffer;
using gpu::Op;

constexpr double batch_bytes = 1 << 30;  // device memory for one batch's prompts and features

// Per-prompt device matrices of one batch: X, Y (d×n), W*, X Xᵀ, Y Xᵀ, (X Xᵀ + σ² I)⁻¹,
// the ridge form, Ŵ_D (d×d) and c(D); and pass 1's and pass 2's features.
struct Batch {
  int d, n;
  long capacity;
  DeviceBuffer<double> X, Y, W, XXt, B, inverse, W_ridge, W_hat, c, features, features_grad;
  Batch(int d, int n, long capacity, int p1, int full2, int grad2)
      : d(d), n(n), capacity(capacity), X(std::size_t(capacity) * d * n), Y(X.size()),
        W(std::size_t(capacity) * d * d), XXt(W.size()), B(W.size()), inverse(W.size()), W_ridge(W.size()),
        W_hat(W.size()), c(std::size_t(capacity)), features(std::size_t(capacity) * std::max(p1, full2)),
        features_grad(std::size_t(capacity) * grad2) {}
};

// The statistics pass 2 reads, for prompts [first, first + count): in the kept buffers
// (all prompts) or in the batch's own.
struct StatsView {
  double *XXt, *B, *W_hat, *c;
};

// Chunks [first_chunk, first_chunk + chunks) drawn on the host and uploaded into the batch;
// returns the number of prompts.
long upload_prompts(const PromptChunks& prompts, long first_chunk, long chunks, int threads, Batch& batch) {
  const int d = batch.d, n = batch.n;
  const long first = first_chunk * chunk_size;
  const long count = std::min(prompts.prompts - first, chunks * chunk_size);
  std::vector<double> X(std::size_t(count) * d * n), Y(X.size()), W(std::size_t(count) * d * d);
  parallel_for(chunks, threads, [&](std::int64_t j) {
    prompts(first_chunk + long(j), [&](const Prompt& p, long index) {
      const std::size_t k = std::size_t(index - first);
      std::memcpy(X.data() + k * d * n, p.X.data(), sizeof(double) * d * n);
      std::memcpy(Y.data() + k * d * n, p.Y.data(), sizeof(double) * d * n);
      std::memcpy(W.data() + k * d * d, p.W.data(), sizeof(double) * d * d);
    });
  });
  batch.X.upload(X.data(), X.size());
  batch.Y.upload(Y.data(), Y.size());
  batch.W.upload(W.data(), W.size());
  return count;
}

// X Xᵀ, Y Xᵀ, the inverse, W_r = Y Xᵀ (…)⁻¹, Ŵ = W_r + σ² W_0 (…)⁻¹ and c for `count` prompts
// of the batch, the first three (and c) written to `to`.
void prompt_stats(Batch& batch, long count, double sigma, const DeviceBuffer<double>& W0, double* XXt, double* B,
                  double* W_hat, double* c) {
  const int d = batch.d, n = batch.n, batch_count = int(count);
  const std::int64_t dd = std::int64_t(d) * d, dn = std::int64_t(d) * n;
  gpu::gemm_strided_batched<double>(Op::none, Op::transpose, d, d, n, 1.0, batch.X.data(), dn, batch.X.data(), dn,
                                    0.0, XXt, dd, batch_count);
  gpu::gemm_strided_batched<double>(Op::none, Op::transpose, d, d, n, 1.0, batch.Y.data(), dn, batch.X.data(), dn,
                                    0.0, B, dd, batch_count);
  if (gpu::icl::spd_inverse_batched(batch_count, d, sigma * sigma, XXt, batch.inverse.data()) != 0)
    throw NumericalError("X X^T + sigma^2 I is singular (sigma = 0 needs n >= d)");
  gpu::gemm_strided_batched<double>(Op::none, Op::none, d, d, d, 1.0, B, dd, batch.inverse.data(), dd, 0.0,
                                    batch.W_ridge.data(), dd, batch_count);
  gpu::copy<double>(std::size_t(count * dd), batch.W_ridge.data(), W_hat);
  gpu::gemm_strided_batched<double>(Op::none, Op::none, d, d, d, sigma * sigma, W0.data(), 0, batch.inverse.data(),
                                    dd, 1.0, W_hat, dd, batch_count);
  gpu::icl::irreducible_loss_batched(batch_count, d, sigma, batch.inverse.data(), c);
}

std::vector<double> download(const DeviceBuffer<double>& buffer) {
  std::vector<double> host(buffer.size());
  buffer.download(host.data(), host.size());
  return host;
}

DeviceBuffer<double> zeros(std::size_t size) {
  DeviceBuffer<double> b(std::max<std::size_t>(size, 1));
  b.zero();
  return b;
}

}  // namespace

TheoryMoments theory_moments_gpu(const Task& task, const TheoryOptions& options) {
  if (!gpu::device_status().available) throw std::runtime_error(gpu::device_status().description);
  if (task.d > gpu::icl::max_d)
    throw UsageError("the CUDA path handles d up to " + std::to_string(gpu::icl::max_d) + " (got " +
                     std::to_string(task.d) + ")");
  const int d = task.d, n = task.n;
  const long N = options.prompts;
  const Pass1Layout L{d};
  const Pass2Layout P{d};
  const int Q = P.quantities(), full2 = lambda_dependent_full(d, Q), grad2 = Q * d;
  const PromptChunks prompts{task, N, options.seed, theory_stream};

  // A batch is a whole number of chunks, sized to batch_bytes of device memory.
  const double per_prompt = 8.0 * (2.0 * d * n + 6.0 * d * d + 1 + std::max(L.size(), full2) + grad2);
  const long chunks = (N + chunk_size - 1) / chunk_size;
  const long batch_chunks = std::clamp(long(batch_bytes / (per_prompt * chunk_size)), 1L, chunks);
  Batch batch(d, n, batch_chunks * chunk_size, L.size(), full2, grad2);
  DeviceBuffer<double> W0(std::size_t(d) * d);
  const MatD w0 = task.prior_mean();
  W0.upload(w0.data(), w0.size());

  // Pass 2 reads pass 1's statistics where they fit (the CPU path's rule), else recomputes them.
  const bool keep = cache_fits(task, options);
  const std::size_t kept_size = keep ? std::size_t(N) * d * d : 0;
  DeviceBuffer<double> kept_XXt(std::max<std::size_t>(kept_size, 1)), kept_B(kept_XXt.size()),
      kept_W_hat(kept_XXt.size()), kept_c(keep ? std::size_t(N) : 1);
  // Where prompts [first, …)'s statistics live: the kept buffers, or the batch's own.
  const auto stats_at = [&](long first) {
    if (!keep) return StatsView{batch.XXt.data(), batch.B.data(), batch.W_hat.data(), batch.c.data()};
    const std::size_t m = std::size_t(first) * d * d;
    return StatsView{kept_XXt.data() + m, kept_B.data() + m, kept_W_hat.data() + m, kept_c.data() + first};
  };
  const auto stats_of = [&](long first, long count) {
    const StatsView s = stats_at(first);
    prompt_stats(batch, count, task.sigma, W0, s.XXt, s.B, s.W_hat, s.c);
    return s;
  };

  // Pass 1.
  DeviceBuffer<double> sum1 = zeros(std::size_t(L.size())), sumsq1 = zeros(std::size_t(L.size()));
  for (long j = 0; j < chunks; j += batch_chunks) {
    const long first = j * chunk_size, count = upload_prompts(prompts, j, std::min(batch_chunks, chunks - j),
                                                              options.threads, batch);
    const StatsView s = stats_of(first, count);
    gpu::icl::theory_pass1_features(int(count), d, task.sigma, s.c, s.B, s.W_hat, batch.W_ridge.data(),
                                    batch.W.data(), batch.features.data());
    gpu::icl::add_feature_moments(L.size(), int(count), batch.features.data(), sum1.data(), sumsq1.data());
  }
  TheoryMoments m{Moments(L.size(), 0), {}, Moments(lambda_dependent_size(d, Q), full2)};
  const std::vector<double> s1 = download(sum1), q1 = download(sumsq1);
  m.pass1 = Moments::from_sums(N, Eigen::Map<const VecD>(s1.data(), L.size()),
                               Eigen::Map<const VecD>(q1.data(), L.size()), MatD(0, 0));
  m.lam = lambda_sums(m.pass1, d);

  // Pass 2 at the estimated Λ.
  DeviceBuffer<double> lambda{std::size_t(d)}, mean_den{std::size_t(d)};
  lambda.upload(m.lam.lambda.data(), std::size_t(d));
  mean_den.upload(m.lam.mean_den.data(), std::size_t(d));
  DeviceBuffer<double> sum_full = zeros(std::size_t(full2)), sumsq_full = zeros(std::size_t(full2)),
                       sum_grad = zeros(std::size_t(grad2)), sumsq_grad = zeros(std::size_t(grad2)),
                       cross = zeros(std::size_t(full2) * full2);
  for (long j = 0; j < chunks; j += batch_chunks) {
    const long first = j * chunk_size, count = std::min(N - first, std::min(batch_chunks, chunks - j) * chunk_size);
    if (!keep) upload_prompts(prompts, j, std::min(batch_chunks, chunks - j), options.threads, batch);
    const StatsView s = keep ? stats_at(first) : stats_of(first, count);
    gpu::icl::theory_pass2_features(int(count), d, lambda.data(), mean_den.data(), s.c, s.XXt, s.B, s.W_hat,
                                    batch.features.data(), batch.features_grad.data());
    gpu::icl::add_feature_moments(full2, int(count), batch.features.data(), sum_full.data(), sumsq_full.data());
    gpu::icl::add_feature_moments(grad2, int(count), batch.features_grad.data(), sum_grad.data(), sumsq_grad.data());
    gpu::gemm<double>(Op::none, Op::transpose, full2, full2, int(count), 1.0, batch.features.data(),
                      batch.features.data(), 1.0, cross.data());
  }
  const std::vector<double> sf = download(sum_full), qf = download(sumsq_full), sg = download(sum_grad),
                            qg = download(sumsq_grad), cr = download(cross);
  VecD sum2(full2 + grad2), sumsq2(full2 + grad2);
  sum2 << Eigen::Map<const VecD>(sf.data(), full2), Eigen::Map<const VecD>(sg.data(), grad2);
  sumsq2 << Eigen::Map<const VecD>(qf.data(), full2), Eigen::Map<const VecD>(qg.data(), grad2);
  m.pass2 = Moments::from_sums(N, sum2, sumsq2, Eigen::Map<const MatD>(cr.data(), full2, full2));
  return m;
}

#endif

}  // namespace qkvlab::icl
