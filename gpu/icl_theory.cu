// Implementation of gpu/icl_theory.hpp: one block per prompt, its d×d
// matrices in shared memory, written to be read next to synthetic/icl/theory.cpp
// (the CPU code computes the same features, prompt by prompt).
#include "gpu/icl_theory.hpp"

#include "gpu/block_sum.cuh"
#include "gpu/cuda_check.cuh"
#include "gpu/device.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace qkvlab::gpu::icl {
namespace {

constexpr int threads = 256;  // per block, a power of two (block_sum)

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}

void require_shape(int batch, int d) {
  require(batch >= 0 && d >= 1 && d <= max_d, "icl kernels: need 1 <= d <= " + std::to_string(max_d) +
                                                   " and batch >= 0 (got d = " + std::to_string(d) + ")");
  if (!device_status().available) throw std::runtime_error(device_status().description);
}

// Column-major d×d: entry (i, j) at i + j·d.
__device__ inline int at(int i, int j, int d) { return i + j * d; }

// ---- (A + shift I)⁻¹ ------------------------------------------------------------
//
// Gauss–Jordan in place: for each pivot k (p = M_kk, the Schur complement),
//   M_kk ← 1/p,  M_kj ← M_kj/p,  M_ik ← −M_ik/p,  M_ij ← M_ij − M_ik M_kj / p  (i, j ≠ k);
// after d pivots M = (A + shift I)⁻¹. Row and column k are copied first, so
// every thread updates its entries from the old values.
__global__ void spd_inverse_kernel(int d, double shift, const double* A, double* Inv, int* failures) {
  extern __shared__ double shared[];
  double* M = shared;              // d²
  double* row = M + d * d;         // d: old M_kj
  double* col = row + d;           // d: old M_ik
  const double* a = A + std::size_t(blockIdx.x) * d * d;
  for (int e = threadIdx.x; e < d * d; e += blockDim.x) M[e] = a[e] + (e % (d + 1) == 0 ? shift : 0.0);
  __syncthreads();
  bool failed = false;
  for (int k = 0; k < d && !failed; ++k) {
    const double p = M[at(k, k, d)];
    failed = !(p > 0);  // every thread reads the same p, so all leave together
    if (failed) break;
    for (int t = threadIdx.x; t < d; t += blockDim.x) {
      row[t] = M[at(k, t, d)];
      col[t] = M[at(t, k, d)];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < d * d; e += blockDim.x) {
      const int i = e % d, j = e / d;
      if (i == k && j == k) M[e] = 1 / p;
      else if (i == k) M[e] = row[j] / p;
      else if (j == k) M[e] = -col[i] / p;
      else M[e] -= col[i] * row[j] / p;
    }
    __syncthreads();
  }
  double* inv = Inv + std::size_t(blockIdx.x) * d * d;
  for (int e = threadIdx.x; e < d * d; e += blockDim.x) inv[e] = M[e];
  if (failed && threadIdx.x == 0) failures[blockIdx.x] = 1;
}

__global__ void irreducible_loss_kernel(int batch, int d, double sigma, const double* Inv, double* c) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  double trace = 0;
  for (int i = 0; i < d; ++i) trace += Inv[std::size_t(b) * d * d + at(i, i, d)];
  c[b] = d * sigma * sigma * (1 + trace);
}

// ---- Pass 1 -----------------------------------------------------------------------

__global__ void pass1_kernel(int d, double sigma, const double* c, const double* B, const double* W_hat,
                             const double* W_ridge, const double* W, double* F) {
  const int p = 4 + 2 * d + 2 * d * d, dd = d * d;
  const std::size_t m = std::size_t(blockIdx.x) * dd;
  double* f = F + std::size_t(blockIdx.x) * p;
  double acc[3] = {0, 0, 0};  // ‖Ŵ‖², ‖Ŵ − W‖², ‖W_r − W‖²
  for (int e = threadIdx.x; e < dd; e += blockDim.x) {
    const double w = W_hat[m + e], r_post = w - W[m + e], r_ridge = W_ridge[m + e] - W[m + e];
    acc[0] += w * w;
    acc[1] += r_post * r_post;
    acc[2] += r_ridge * r_ridge;
    f[4 + 2 * d + e] = r_post;
    f[4 + 2 * d + dd + e] = r_ridge;
  }
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    double num = 0, den = 0;
    for (int j = 0; j < d; ++j) {
      const double b = B[m + at(i, j, d)];
      num += W_hat[m + at(i, j, d)] * b;
      den += b * b;
    }
    f[4 + i] = num;
    f[4 + d + i] = den;
  }
  detail::block_sum<3, threads>(acc);
  if (threadIdx.x == 0) {
    f[0] = c[blockIdx.x];
    f[1] = acc[0];
    f[2] = acc[1] + d * sigma * sigma;
    f[3] = acc[2] + d * sigma * sigma;
  }
}

// ---- Pass 2 -----------------------------------------------------------------------

// One-sided Jacobi (Hestenes) on the d×d matrix A, accumulating V (starting at I):
// columns p, q are rotated until every pair is orthogonal to relative sqrt(d)·ε
// (LAPACK's dgesvj criterion; at most 60 sweeps), so that at the end A = U Σ (column j has norm s_j) and the
// input is A V⁻¹ = U Σ Vᵀ. Pairs follow the round-robin schedule (the circle
// method on m = d rounded up to even players; player d is a bye when d is odd),
// so the m/2 pairs of a round are disjoint and rotated at once, one thread each.
__device__ void jacobi_svd(int d, double* A, double* V, int* rotated) {
  const int m = d + (d & 1);
  const double tol = sqrt(double(d)) * 2.220446049250313e-16;
  for (int e = threadIdx.x; e < d * d; e += blockDim.x) V[e] = (e % (d + 1) == 0) ? 1.0 : 0.0;
  for (int sweep = 0; sweep < 60; ++sweep) {
    if (threadIdx.x == 0) *rotated = 0;
    __syncthreads();
    for (int round = 0; round < m - 1; ++round) {
      const int k = threadIdx.x;
      if (k < m / 2) {
        int p = k == 0 ? round : (round + k) % (m - 1);
        int q = k == 0 ? m - 1 : (round - k + (m - 1)) % (m - 1);
        if (p > q) { const int t = p; p = q; q = t; }
        if (q < d) {
          double alpha = 0, beta = 0, gamma = 0;
          for (int i = 0; i < d; ++i) {
            const double ap = A[at(i, p, d)], aq = A[at(i, q, d)];
            alpha += ap * ap;
            beta += aq * aq;
            gamma += ap * aq;
          }
          if (gamma != 0 && fabs(gamma) > tol * sqrt(alpha * beta)) {
            const double zeta = (beta - alpha) / (2 * gamma);
            const double t = (zeta >= 0 ? 1.0 : -1.0) / (fabs(zeta) + sqrt(1 + zeta * zeta));
            const double cs = 1 / sqrt(1 + t * t), sn = cs * t;
            for (int i = 0; i < d; ++i) {
              const double ap = A[at(i, p, d)], aq = A[at(i, q, d)];
              A[at(i, p, d)] = cs * ap - sn * aq;
              A[at(i, q, d)] = sn * ap + cs * aq;
              const double vp = V[at(i, p, d)], vq = V[at(i, q, d)];
              V[at(i, p, d)] = cs * vp - sn * vq;
              V[at(i, q, d)] = sn * vp + cs * vq;
            }
            *rotated = 1;
          }
        }
      }
      __syncthreads();
    }
    const bool again = *rotated != 0;
    __syncthreads();  // all have read the flag before thread 0 clears it
    if (!again) break;
  }
}

// Layout of pass 2's f (theory.cpp): C3, ‖ΛB‖², c_a (d+1), skipv1 (d+1), mha (d+1), gap (d+1);
// F_full = [f; ψ], F_grad = g (Q × d, column-major).
__global__ void pass2_kernel(int d, const double* lambda, const double* mean_den, const double* c_all,
                             const double* XXt, const double* B, const double* W_hat, double* F_full,
                             double* F_grad) {
  const int dd = d * d, A1 = d + 1, Q = 2 + 4 * A1;
  const int o_ca = 2, o_skip = 2 + A1, o_mha = 2 + 2 * A1, o_gap = 2 + 3 * A1;
  extern __shared__ double shared[];
  double* A = shared;                // d²: ΛB, then U Σ, then 2 (UΣ) ⊙ (B V)
  double* V = A + dd;                // d²
  double* E = V + dd;                // (d+1)·d: Σ_j e_ij² of the SkipV1 residual at each a
  double* s2 = E + A1 * d;           // d: s_j², column j of A
  double* g0 = s2 + d;               // d: ∂C3/∂λ_i
  double* tail = g0 + d;             // d + 1: Σ over the columns of rank ≥ a of s_j²
  int* rank = reinterpret_cast<int*>(tail + A1);  // d: rank of column j (0 = largest s_j)
  int* order = rank + d;                          // d: column of rank r
  int* rotated = order + d;

  const std::size_t m = std::size_t(blockIdx.x) * dd;
  const double c = c_all[blockIdx.x];
  double* f = F_full + std::size_t(blockIdx.x) * (Q + d);
  double* g = F_grad + std::size_t(blockIdx.x) * Q * d;  // g(q, i) at i·Q + q

  // C3 = ‖Ŵ − ΛB‖², ‖ΛB‖², num, den, ψ.
  for (int e = threadIdx.x; e < dd; e += blockDim.x) A[e] = lambda[e % d] * B[m + e];
  double acc[2] = {0, 0};
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    double nu = 0, de = 0, diff2 = 0, diff_b = 0, lb2 = 0;
    for (int j = 0; j < d; ++j) {
      const double b = B[m + at(i, j, d)], w = W_hat[m + at(i, j, d)], diff = w - lambda[i] * b;
      nu += w * b;
      de += b * b;
      diff2 += diff * diff;
      diff_b += diff * b;
      lb2 += lambda[i] * b * lambda[i] * b;
    }
    g0[i] = -2 * diff_b;
    acc[0] += diff2;
    acc[1] += lb2;
    f[Q + i] = (nu - lambda[i] * de) / mean_den[i];
    g[i * Q + 0] = -2 * diff_b;
    g[i * Q + 1] = 2 * lambda[i] * de;
  }
  detail::block_sum<2, threads>(acc);  // also the barrier before the SVD reads A
  const double C3 = acc[0];
  if (threadIdx.x == 0) f[0] = C3, f[1] = acc[1];

  // c_a: singular values of ΛB by Jacobi; ∂(s_j²)/∂λ_i = 2 (UΣ)_ij (B V)_ij.
  jacobi_svd(d, A, V, rotated);
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    double n2 = 0;
    for (int i = 0; i < d; ++i) n2 += A[at(i, j, d)] * A[at(i, j, d)];
    s2[j] = n2;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    int r = 0;
    for (int k = 0; k < d; ++k) r += s2[k] > s2[j] || (s2[k] == s2[j] && k < j);
    rank[j] = r;
    order[r] = j;
  }
  for (int e = threadIdx.x; e < dd; e += blockDim.x) {
    const int i = e % d, j = e / d;
    double bv = 0;
    for (int k = 0; k < d; ++k) bv += B[m + at(i, k, d)] * V[at(k, j, d)];
    A[e] *= 2 * bv;  // each thread reads and writes only its own entries of A
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    tail[d] = 0;
    for (int a = d - 1; a >= 0; --a) tail[a] = tail[a + 1] + s2[order[a]];
  }
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    double suffix = 0;  // Σ over ranks ≥ a of 2 (UΣ)_ij (BV)_ij
    g[i * Q + o_ca + d] = 0;
    for (int a = d - 1; a >= 0; --a) {
      suffix += A[at(i, order[a], d)];
      g[i * Q + o_ca + a] = suffix;
    }
  }

  // SkipV1 at the construction, e = Λ K_a − Ŵ with K_a = (Y Xᵀ)[:, :a] + ½[0; (X Xᵀ − Y Xᵀ)[a:, :a]].
  for (int t = threadIdx.x; t < A1 * d; t += blockDim.x) {
    const int a = t / d, i = t % d;
    double e2 = 0, ek = 0;
    for (int j = 0; j < d; ++j) {
      const double b = B[m + at(i, j, d)];
      const double K = j >= a ? 0.0 : b + (i >= a ? 0.5 * (XXt[m + at(i, j, d)] - b) : 0.0);
      const double e = lambda[i] * K - W_hat[m + at(i, j, d)];
      e2 += e * e;
      ek += e * K;
    }
    E[t] = e2;
    g[i * Q + o_skip + a] = 2 * ek;
  }
  __syncthreads();  // E, and g's c_a and skip rows, are written (by other threads) before they are read
  for (int a = threadIdx.x; a <= d; a += blockDim.x) {
    double e2 = 0, w2 = 0;
    for (int i = 0; i < d; ++i) e2 += E[a * d + i];
    for (int e = 0; e < dd && a == d; ++e) w2 += W_hat[m + e] * W_hat[m + e];
    const double skip = c + e2, mha = a < d ? c + C3 + tail[a] : c + w2;
    f[o_ca + a] = tail[a];
    f[o_skip + a] = skip;
    f[o_mha + a] = mha;
    f[o_gap + a] = mha - skip;
  }
  for (int t = threadIdx.x; t < A1 * d; t += blockDim.x) {
    const int a = t / d, i = t % d;
    const double mha = a < d ? g0[i] + g[i * Q + o_ca + a] : 0.0;
    g[i * Q + o_mha + a] = mha;
    g[i * Q + o_gap + a] = mha - g[i * Q + o_skip + a];
  }
}

std::size_t pass2_shared_bytes(int d) {
  return sizeof(double) * (2 * d * d + (d + 1) * d + 2 * d + (d + 1)) + sizeof(int) * (2 * d + 1);
}

// ---- Moments over prompts -------------------------------------------------------------

__global__ void feature_moments_kernel(int p, int batch, const double* F, double* sum, double* sumsq) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= p) return;
  double s = 0, s2 = 0;
  for (int b = 0; b < batch; ++b) {  // neighbouring threads read neighbouring features
    const double x = F[std::size_t(b) * p + j];
    s += x;
    s2 += x * x;
  }
  sum[j] += s;
  sumsq[j] += s2;
}

int blocks_of(int count) { return (count + threads - 1) / threads; }

}  // namespace

int spd_inverse_batched(int batch, int d, double shift, const double* A, double* Inv) {
  require_shape(batch, d);
  if (batch == 0) return 0;
  int* failures = nullptr;
  QKVLAB_CUDA_CHECK(cudaMalloc(&failures, sizeof(int) * batch));
  QKVLAB_CUDA_CHECK(cudaMemset(failures, 0, sizeof(int) * batch));
  spd_inverse_kernel<<<batch, threads, sizeof(double) * (d * d + 2 * d)>>>(d, shift, A, Inv, failures);
  QKVLAB_KERNEL_CHECK();
  std::vector<int> host(static_cast<std::size_t>(batch));
  const cudaError_t copied = cudaMemcpy(host.data(), failures, sizeof(int) * batch, cudaMemcpyDeviceToHost);
  cudaFree(failures);
  QKVLAB_CUDA_CHECK(copied);
  return int(std::count_if(host.begin(), host.end(), [](int f) { return f != 0; }));
}

void irreducible_loss_batched(int batch, int d, double sigma, const double* Inv, double* c) {
  require_shape(batch, d);
  if (batch == 0) return;
  irreducible_loss_kernel<<<blocks_of(batch), threads>>>(batch, d, sigma, Inv, c);
  QKVLAB_KERNEL_CHECK();
}

int theory_pass1_size(int d) { return 4 + 2 * d + 2 * d * d; }

void theory_pass1_features(int batch, int d, double sigma, const double* c, const double* B, const double* W_hat,
                           const double* W_ridge, const double* W, double* F) {
  require_shape(batch, d);
  if (batch == 0) return;
  pass1_kernel<<<batch, threads>>>(d, sigma, c, B, W_hat, W_ridge, W, F);
  QKVLAB_KERNEL_CHECK();
}

int theory_pass2_quantities(int d) { return 2 + 4 * (d + 1); }

void theory_pass2_features(int batch, int d, const double* lambda, const double* mean_den, const double* c,
                           const double* XXt, const double* B, const double* W_hat, double* F_full, double* F_grad) {
  require_shape(batch, d);
  if (batch == 0) return;
  const std::size_t bytes = pass2_shared_bytes(d);  // 99 KiB at d = 64: above the 48 KiB default
  QKVLAB_CUDA_CHECK(cudaFuncSetAttribute(pass2_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  pass2_kernel<<<batch, threads, bytes>>>(d, lambda, mean_den, c, XXt, B, W_hat, F_full, F_grad);
  QKVLAB_KERNEL_CHECK();
}

void add_feature_moments(int p, int batch, const double* F, double* sum, double* sumsq) {
  require(p >= 0 && batch >= 0, "add_feature_moments: negative size");
  if (p == 0 || batch == 0) return;
  if (!device_status().available) throw std::runtime_error(device_status().description);
  feature_moments_kernel<<<blocks_of(p), threads>>>(p, batch, F, sum, sumsq);
  QKVLAB_KERNEL_CHECK();
}

}  // namespace qkvlab::gpu::icl
