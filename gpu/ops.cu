// Implementation of gpu/ops.hpp: cuBLAS for the products, plain CUDA kernels
// for the rest, written to be read next to engine/ops/*.hpp.
//
// Kernel shapes. Matrices are column-major (element (i, j) of an n×d matrix
// at i + j·n) with rows as tokens, so:
// - elementwise kernels run one thread per entry over a grid-stride loop;
// - row-wise kernels (softmax, normalization, row comparison) run one thread
//   per row and loop over the columns: neighbouring threads read neighbouring
//   rows of the same column, so every access is coalesced;
// - column sums (bias and gain gradients) run one block per column;
// - reductions to a host value run a fixed grid of blocks, each summing in
//   double, and the host adds the per-block sums in block order, so results
//   are deterministic.
//
// Row-major operands of gemm (the one trick to know). cuBLAS is column-major.
// A row-major buffer of a matrix M, read column-major, is Mᵀ. So row-major
// C = op(A) op(B) is computed as the column-major product
//   Cᵀ = op(B)ᵀ op(A)ᵀ,
// i.e. the same call with A and B swapped and m and n swapped; the op flags
// stay as they are, because op(A)ᵀ is op applied to the column-major view Aᵀ.
#include "gpu/block_sum.cuh"
#include "gpu/cuda_check.cuh"
#include "gpu/device.hpp"
#include "gpu/device_buffer.hpp"
#include "gpu/ops.hpp"

#include <cublas_v2.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

namespace qkvlab::gpu {

namespace {

constexpr int threads = 256;            // per block, a power of two (block_sum needs it)
constexpr int max_blocks = 8192;        // grid-stride loops cover any count
constexpr int reduction_blocks = 256;   // fixed, for deterministic sums
constexpr int max_sums = 3;             // values summed at once by one reduction

int blocks_for(std::size_t count) {
  return int(std::min<std::size_t>((count + threads - 1) / threads, max_blocks));
}

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}

// ---- cuBLAS -------------------------------------------------------------------

// cuBLAS is opened with dlopen on first use instead of being linked: linking
// it costs every process that contains qkvlab_gpu (the qkvlab program
// included) about 0.2 s and 220 MB at start-up, for its 360,000 relocations,
// whether or not a GPU is ever used. These are the functions ops.cu calls.
struct Cublas {
  decltype(&cublasCreate) create;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasGetStatusName) status_name;
  decltype(&cublasSgemm) sgemm;
  decltype(&cublasDgemm) dgemm;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched;
  decltype(&cublasDgemmStridedBatched) dgemm_strided_batched;
  cublasHandle_t handle = nullptr;  // one for the process; TF32 off (default math)
};

template <class F>
void load_symbol(void* library, const char* name, F& function) {
  function = reinterpret_cast<F>(dlsym(library, name));
  if (!function) throw std::runtime_error(std::string("cuBLAS: symbol ") + name + " not found");
}

const Cublas& cublas_library() {
  static const Cublas library = [] {
    if (!device_status().available) throw std::runtime_error(device_status().description);
    void* so = dlopen(QKVLAB_CUBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!so) so = dlopen(QKVLAB_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!so) throw std::runtime_error(std::string("cannot load cuBLAS: ") + dlerror());
    Cublas c{};
    // cublas_v2.h maps cublasCreate, cublasSgemm and cublasDgemm to *_v2.
    load_symbol(so, "cublasCreate_v2", c.create);
    load_symbol(so, "cublasSetMathMode", c.set_math_mode);
    load_symbol(so, "cublasGetStatusName", c.status_name);
    load_symbol(so, "cublasSgemm_v2", c.sgemm);
    load_symbol(so, "cublasDgemm_v2", c.dgemm);
    load_symbol(so, "cublasSgemmStridedBatched", c.sgemm_strided_batched);
    load_symbol(so, "cublasDgemmStridedBatched", c.dgemm_strided_batched);
    if (cublasStatus_t s = c.create(&c.handle); s != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error(std::string("cuBLAS error: ") + c.status_name(s) + " (cublasCreate)");
    if (cublasStatus_t s = c.set_math_mode(c.handle, CUBLAS_DEFAULT_MATH); s != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error(std::string("cuBLAS error: ") + c.status_name(s) + " (cublasSetMathMode)");
    return c;  // the library stays open and the handle alive until the process ends
  }();
  return library;
}

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLAS error: ") + cublas_library().status_name(status) + " (" + call +
                             " at " + file + ":" + std::to_string(line) + ")");
}
#define QKVLAB_CUBLAS_CHECK(call) check_cublas((call), #call, __FILE__, __LINE__)

cublasOperation_t to_cublas(Op op) { return op == Op::none ? CUBLAS_OP_N : CUBLAS_OP_T; }

cublasStatus_t gemm_call(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
                         const float* A, int lda, long long sa, const float* B, int ldb, long long sb,
                         const float* beta, float* C, int ldc, long long sc, int batch) {
  const Cublas& c = cublas_library();
  if (batch == 1) return c.sgemm(c.handle, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  return c.sgemm_strided_batched(c.handle, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

cublasStatus_t gemm_call(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const double* alpha,
                         const double* A, int lda, long long sa, const double* B, int ldb, long long sb,
                         const double* beta, double* C, int ldc, long long sc, int batch) {
  const Cublas& c = cublas_library();
  if (batch == 1) return c.dgemm(c.handle, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  return c.dgemm_strided_batched(c.handle, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

// Column-major, packed: op(A) m×k is stored m×k (lda = m) or k×m (lda = k).
template <class T>
void gemm_col_major(Op op_a, Op op_b, int m, int n, int k, T alpha, const T* A, std::int64_t sa, const T* B,
                    std::int64_t sb, T beta, T* C, std::int64_t sc, int batch) {
  const int lda = std::max(1, op_a == Op::none ? m : k);
  const int ldb = std::max(1, op_b == Op::none ? k : n);
  const int ldc = std::max(1, m);
  QKVLAB_CUBLAS_CHECK(gemm_call(to_cublas(op_a), to_cublas(op_b), m, n, k, &alpha, A, lda, sa, B, ldb, sb, &beta, C,
                                ldc, sc, batch));
}

// ---- Device math, overloaded for float and double ----------------------------

__device__ inline float erf_(float x) { return erff(x); }
__device__ inline double erf_(double x) { return erf(x); }
__device__ inline float exp_(float x) { return expf(x); }
__device__ inline double exp_(double x) { return exp(x); }
__device__ inline float sqrt_(float x) { return sqrtf(x); }
__device__ inline double sqrt_(double x) { return sqrt(x); }

// Φ(x) = (1 + erf(x/√2))/2 and φ(x) = exp(−x²/2)/√(2π), as engine/ops/activation.hpp
// writes them (nvcc 13 with CMake 3.25 compiles CUDA as C++17: no std::numbers).
constexpr double sqrt2 = 1.41421356237309504880, inv_sqrt_2pi = 0.39894228040143267794;
template <class T> __device__ T normal_cdf(T x) { return T(0.5) * (T(1) + erf_(x / T(sqrt2))); }
template <class T> __device__ T normal_pdf(T x) { return exp_(T(-0.5) * x * x) * T(inv_sqrt_2pi); }

#define QKVLAB_GRID_STRIDE(i, count) \
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < (count); i += std::size_t(gridDim.x) * blockDim.x)

// ---- Elementwise kernels -------------------------------------------------------

template <class T> __global__ void scale_kernel(std::size_t count, T alpha, T* X) {
  QKVLAB_GRID_STRIDE(i, count) X[i] *= alpha;
}
template <class T> __global__ void axpy_kernel(std::size_t count, T alpha, const T* X, T* Y) {
  QKVLAB_GRID_STRIDE(i, count) Y[i] += alpha * X[i];
}
template <class T> __global__ void add_bias_kernel(std::size_t n, std::size_t count, const T* X, const T* b, T* Y) {
  QKVLAB_GRID_STRIDE(i, count) Y[i] = X[i] + b[i / n];  // column j = i / n
}
template <class T> __global__ void gelu_kernel(std::size_t count, const T* X, T* Y) {
  QKVLAB_GRID_STRIDE(i, count) Y[i] = X[i] * normal_cdf(X[i]);
}
template <class T> __global__ void gelu_backward_kernel(std::size_t count, const T* X, const T* dY, T* dX) {
  QKVLAB_GRID_STRIDE(i, count) dX[i] += dY[i] * (normal_cdf(X[i]) + X[i] * normal_pdf(X[i]));
}
template <class T> __global__ void relu_kernel(std::size_t count, const T* X, T* Y) {
  QKVLAB_GRID_STRIDE(i, count) Y[i] = X[i] > T(0) ? X[i] : T(0);
}
template <class T> __global__ void relu_backward_kernel(std::size_t count, const T* X, const T* dY, T* dX) {
  QKVLAB_GRID_STRIDE(i, count) if (X[i] > T(0)) dX[i] += dY[i];
}
template <class T> __global__ void mse_backward_kernel(std::size_t count, const T* P, const T* G, T c, T* dP) {
  QKVLAB_GRID_STRIDE(i, count) dP[i] += c * (P[i] - G[i]);
}

// Zeroes entry (i, j) of each n×m matrix where the causal mask hides it (j > i).
template <class T> __global__ void causal_mask_kernel(std::size_t n, std::size_t m, std::size_t count, T* P) {
  QKVLAB_GRID_STRIDE(idx, count) {
    const std::size_t local = idx % (n * m), i = local % n, j = local / n;
    if (j > i) P[idx] = T(0);
  }
}

// θ update of AdamW, one entry per thread (engine/optim.hpp AdamW::step).
template <class T>
__global__ void adamw_kernel(std::size_t count, T b1, T b2, T eps, T m_hat_scale, T v_hat_scale, T decay, T eta,
                             bool apply_decay, T* theta, const T* g, T* m, T* v) {
  QKVLAB_GRID_STRIDE(i, count) {
    m[i] = b1 * m[i] + (T(1) - b1) * g[i];
    v[i] = b2 * v[i] + (T(1) - b2) * (g[i] * g[i]);
    T value = theta[i];
    if (apply_decay) value -= decay * value;
    value -= eta * (m_hat_scale * m[i]) / (sqrt_(v_hat_scale * v[i]) + eps);
    theta[i] = value;
  }
}

// ---- Row-wise kernels (one thread per row; entry j of a row at stride n) -------

// Each row of each n×m matrix becomes its softmax over the visible keys, the rest 0.
template <class T> __global__ void masked_softmax_rows_kernel(std::size_t batch, std::size_t n, std::size_t m,
                                                              bool causal, T* S) {
  QKVLAB_GRID_STRIDE(row, batch * n) {
    const std::size_t b = row / n, i = row % n;
    T* s = S + b * n * m + i;
    const std::size_t visible = causal ? i + 1 : m;
    T max = s[0];
    for (std::size_t j = 1; j < visible; ++j) max = s[j * n] > max ? s[j * n] : max;
    T sum = 0;
    for (std::size_t j = 0; j < visible; ++j) {
      s[j * n] = exp_(s[j * n] - max);
      sum += s[j * n];
    }
    for (std::size_t j = 0; j < visible; ++j) s[j * n] /= sum;
    for (std::size_t j = visible; j < m; ++j) s[j * n] = T(0);
  }
}

// dS = A ⊙ (dA − rowsum(A ⊙ dA)), in place of dA.
template <class T> __global__ void softmax_backward_rows_kernel(std::size_t batch, std::size_t n, std::size_t m,
                                                                const T* A, T* dA) {
  QKVLAB_GRID_STRIDE(row, batch * n) {
    const std::size_t offset = (row / n) * n * m + row % n;
    const T* a = A + offset;
    T* da = dA + offset;
    T dot = 0;
    for (std::size_t j = 0; j < m; ++j) dot += a[j * n] * da[j * n];
    for (std::size_t j = 0; j < m; ++j) da[j * n] = a[j * n] * (da[j * n] - dot);
  }
}

template <class T> __global__ void normalize_rows_kernel(std::size_t n, std::size_t d, const T* X, const T* g, T eps,
                                                         bool center, T* Y, T* N, T* r) {
  QKVLAB_GRID_STRIDE(i, n) {
    T mean = 0;
    if (center) {
      for (std::size_t j = 0; j < d; ++j) mean += X[i + j * n];
      mean /= T(d);
    }
    T squares = 0;
    for (std::size_t j = 0; j < d; ++j) {
      const T c = X[i + j * n] - mean;
      squares += c * c;
    }
    const T r_i = T(1) / sqrt_(squares / T(d) + eps);
    r[i] = r_i;
    for (std::size_t j = 0; j < d; ++j) {
      const T n_ij = (X[i + j * n] - mean) * r_i;
      N[i + j * n] = n_ij;
      Y[i + j * n] = n_ij * g[j];
    }
  }
}

template <class T> __global__ void normalize_rows_backward_kernel(std::size_t n, std::size_t d, const T* dY,
                                                                  const T* g, const T* N, const T* r, bool center,
                                                                  T* dX) {
  QKVLAB_GRID_STRIDE(i, n) {
    T dn_sum = 0, dn_dot_n = 0;
    for (std::size_t j = 0; j < d; ++j) {
      const T dn = dY[i + j * n] * g[j];
      dn_sum += dn;
      dn_dot_n += dn * N[i + j * n];
    }
    const T dn_mean = center ? dn_sum / T(d) : T(0);
    dn_dot_n /= T(d);
    for (std::size_t j = 0; j < d; ++j)
      dX[i + j * n] += r[i] * (dY[i + j * n] * g[j] - dn_mean - N[i + j * n] * dn_dot_n);
  }
}

// ---- Column sums: out[j] += Σ_i A(i, j) (B(i, j) when B is given), one block per column

template <class T> __global__ void column_sums_kernel(std::size_t n, const T* A, const T* B, T* out) {
  const std::size_t j = blockIdx.x;
  double acc[1] = {0};
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x)
    acc[0] += B ? double(A[i + j * n]) * double(B[i + j * n]) : double(A[i + j * n]);
  detail::block_sum<1, threads>(acc);
  if (threadIdx.x == 0) out[j] += T(acc[0]);
}

template <class T> void column_sums(int n, int d, const T* A, const T* B, T* out) {
  if (n == 0 || d == 0) return;
  column_sums_kernel<<<d, threads>>>(std::size_t(n), A, B, out);
  QKVLAB_KERNEL_CHECK();
}

// ---- Reductions to the host ------------------------------------------------------

// f(i, acc) adds item i's K contributions to acc; the per-block sums go to
// `partial` and are added on the host in block order.
template <int K, class F> __global__ void reduce_kernel(std::size_t count, F f, double* partial) {
  double acc[K] = {};
  QKVLAB_GRID_STRIDE(i, count) f(i, acc);
  detail::block_sum<K, threads>(acc);
  if (threadIdx.x == 0)
    for (int k = 0; k < K; ++k) partial[blockIdx.x * K + k] = acc[k];
}

template <int K, class F> std::array<double, K> reduce(std::size_t count, F f) {
  std::array<double, K> total{};
  if (count == 0) return total;
  const int blocks = std::min(reduction_blocks, blocks_for(count));
  // Per-block sums; one buffer per host thread, allocated once (cudaMalloc and
  // cudaFree would cost a device synchronization at every reduction).
  thread_local DeviceBuffer<double> partial(std::size_t(reduction_blocks) * max_sums);
  static_assert(K <= max_sums);
  reduce_kernel<K><<<blocks, threads>>>(count, f, partial.data());
  QKVLAB_KERNEL_CHECK();
  std::vector<double> host(std::size_t(blocks) * K);
  partial.download(host.data(), host.size());  // waits for the kernel
  for (int b = 0; b < blocks; ++b)
    for (int k = 0; k < K; ++k) total[k] += host[std::size_t(b) * K + k];
  return total;
}

template <class T> struct SquaredDifference {
  const T* P;
  const T* G;
  __device__ void operator()(std::size_t i, double (&acc)[1]) const {
    const double e = double(P[i]) - double(G[i]);
    acc[0] += e * e;
  }
};

template <class T> struct Square {
  const T* X;
  __device__ void operator()(std::size_t i, double (&acc)[1]) const { acc[0] += double(X[i]) * double(X[i]); }
};

template <class T> struct CompareRow {
  const T* F;
  const T* G;
  std::size_t n, d;
  __device__ void operator()(std::size_t i, double (&acc)[3]) const {
    double error = 0, ff = 0, gg = 0, fg = 0;
    for (std::size_t j = 0; j < d; ++j) {
      const double f = F[i + j * n], g = G[i + j * n];
      error += (f - g) * (f - g);
      ff += f * f;
      gg += g * g;
      fg += f * g;
    }
    acc[0] += error;
    acc[1] += gg;
    acc[2] += (ff > 0 && gg > 0) ? fg / sqrt(ff * gg) : 0.0;
  }
};

void check_attention(const AttentionShape& s, bool causal, const char* what) {
  require(s.batch > 0 && s.queries > 0 && s.keys > 0 && s.d_h > 0 && s.d_v > 0,
          std::string(what) + ": every dimension must be positive");
  require(!causal || s.queries == s.keys, std::string(what) + ": a causal mask needs as many queries as keys");
}

}  // namespace

// ---- Products ----------------------------------------------------------------------

template <class T>
void gemm_strided_batched(Op op_a, Op op_b, int m, int n, int k, T alpha, const T* A, std::int64_t stride_a,
                          const T* B, std::int64_t stride_b, T beta, T* C, std::int64_t stride_c, int batch,
                          Layout layout) {
  require(m >= 0 && n >= 0 && k >= 0 && batch >= 1, "gemm: negative dimension or empty batch");
  if (m == 0 || n == 0) return;
  if (layout == Layout::col_major)
    gemm_col_major(op_a, op_b, m, n, k, alpha, A, stride_a, B, stride_b, beta, C, stride_c, batch);
  else  // Cᵀ = op(B)ᵀ op(A)ᵀ in column-major: see the top of this file
    gemm_col_major(op_b, op_a, n, m, k, alpha, B, stride_b, A, stride_a, beta, C, stride_c, batch);
}

template <class T>
void gemm(Op op_a, Op op_b, int m, int n, int k, T alpha, const T* A, const T* B, T beta, T* C, Layout layout) {
  gemm_strided_batched(op_a, op_b, m, n, k, alpha, A, 0, B, 0, beta, C, 0, 1, layout);
}

// ---- Elementwise -------------------------------------------------------------------

template <class T> void copy(std::size_t count, const T* X, T* Y) {
  detail::copy_on_device(Y, X, count * sizeof(T));
}

template <class T> void axpy(std::size_t count, T alpha, const T* X, T* Y) {
  if (count == 0) return;
  axpy_kernel<<<blocks_for(count), threads>>>(count, alpha, X, Y);
  QKVLAB_KERNEL_CHECK();
}

template <class T> void scale(std::size_t count, T alpha, T* X) {
  if (count == 0) return;
  scale_kernel<<<blocks_for(count), threads>>>(count, alpha, X);
  QKVLAB_KERNEL_CHECK();
}

template <class T> void add_bias(int n, int d, const T* X, const T* b, T* Y) {
  const std::size_t count = std::size_t(n) * d;
  if (count == 0) return;
  add_bias_kernel<<<blocks_for(count), threads>>>(std::size_t(n), count, X, b, Y);
  QKVLAB_KERNEL_CHECK();
}

template <class T> void add_bias_backward(int n, int d, const T* dY, T* db) {
  column_sums<T>(n, d, dY, nullptr, db);
}

template <class T> void gelu(std::size_t count, const T* X, T* Y) {
  if (count == 0) return;
  gelu_kernel<<<blocks_for(count), threads>>>(count, X, Y);
  QKVLAB_KERNEL_CHECK();
}

template <class T> void gelu_backward(std::size_t count, const T* X, const T* dY, T* dX) {
  if (count == 0) return;
  gelu_backward_kernel<<<blocks_for(count), threads>>>(count, X, dY, dX);
  QKVLAB_KERNEL_CHECK();
}

template <class T> void relu(std::size_t count, const T* X, T* Y) {
  if (count == 0) return;
  relu_kernel<<<blocks_for(count), threads>>>(count, X, Y);
  QKVLAB_KERNEL_CHECK();
}

template <class T> void relu_backward(std::size_t count, const T* X, const T* dY, T* dX) {
  if (count == 0) return;
  relu_backward_kernel<<<blocks_for(count), threads>>>(count, X, dY, dX);
  QKVLAB_KERNEL_CHECK();
}

// ---- Attention -------------------------------------------------------------------------

template <class T>
void attention_head(const AttentionShape& s, Mask mask, const T* Q, const T* K, const T* V, T* A, T* H) {
  check_attention(s, mask == Mask::causal, "attention_head");
  const std::int64_t n = s.queries, m = s.keys;
  const T c = T(1) / std::sqrt(T(s.d_h));
  gemm_strided_batched(Op::none, Op::transpose, s.queries, s.keys, s.d_h, c, Q, n * s.d_h, K, m * s.d_h, T(0), A,
                       n * m, s.batch);
  const std::size_t rows = std::size_t(s.batch) * s.queries;
  masked_softmax_rows_kernel<<<blocks_for(rows), threads>>>(std::size_t(s.batch), std::size_t(n), std::size_t(m),
                                                            mask == Mask::causal, A);
  QKVLAB_KERNEL_CHECK();
  gemm_strided_batched(Op::none, Op::none, s.queries, s.d_v, s.keys, T(1), A, n * m, V, m * s.d_v, T(0), H,
                       n * s.d_v, s.batch);
}

template <class T>
void attention_head_backward(const AttentionShape& s, const T* Q, const T* K, const T* V, const T* A, const T* dH,
                             T* dQ, T* dK, T* dV, T* work) {
  check_attention(s, false, "attention_head_backward");
  const std::int64_t n = s.queries, m = s.keys;
  const T c = T(1) / std::sqrt(T(s.d_h));
  // dV += Aᵀ dH
  gemm_strided_batched(Op::transpose, Op::none, s.keys, s.d_v, s.queries, T(1), A, n * m, dH, n * s.d_v, T(1), dV,
                       m * s.d_v, s.batch);
  // dA = dH Vᵀ, then dS = A ⊙ (dA − rowsum(A ⊙ dA)) in place
  gemm_strided_batched(Op::none, Op::transpose, s.queries, s.keys, s.d_v, T(1), dH, n * s.d_v, V, m * s.d_v, T(0),
                       work, n * m, s.batch);
  const std::size_t rows = std::size_t(s.batch) * s.queries;
  softmax_backward_rows_kernel<<<blocks_for(rows), threads>>>(std::size_t(s.batch), std::size_t(n), std::size_t(m),
                                                              A, work);
  QKVLAB_KERNEL_CHECK();
  // dQ += c dS K,  dK += c dSᵀ Q
  gemm_strided_batched(Op::none, Op::none, s.queries, s.d_h, s.keys, c, work, n * m, K, m * s.d_h, T(1), dQ,
                       n * s.d_h, s.batch);
  gemm_strided_batched(Op::transpose, Op::none, s.keys, s.d_h, s.queries, c, work, n * m, Q, n * s.d_h, T(1), dK,
                       m * s.d_h, s.batch);
}

template <class T> void apply_causal_mask(const AttentionShape& s, T* P) {
  const std::size_t count = std::size_t(s.batch) * s.queries * s.keys;
  causal_mask_kernel<<<blocks_for(count), threads>>>(std::size_t(s.queries), std::size_t(s.keys), count, P);
  QKVLAB_KERNEL_CHECK();
}

template <class T>
void linear_attention(const AttentionShape& s, Mask mask, const T* Q, const T* K, const T* V, T* P, T* O) {
  check_attention(s, mask == Mask::causal, "linear_attention");
  const std::int64_t n = s.queries, m = s.keys;
  gemm_strided_batched(Op::none, Op::transpose, s.queries, s.keys, s.d_h, T(1), Q, n * s.d_h, K, m * s.d_h, T(0),
                       P, n * m, s.batch);
  if (mask == Mask::causal) apply_causal_mask(s, P);
  gemm_strided_batched(Op::none, Op::none, s.queries, s.d_v, s.keys, T(1), P, n * m, V, m * s.d_v, T(0), O,
                       n * s.d_v, s.batch);
}

template <class T>
void linear_attention_backward(const AttentionShape& s, Mask mask, const T* Q, const T* K, const T* V, const T* P,
                               const T* dO, T* dQ, T* dK, T* dV, T* work) {
  check_attention(s, mask == Mask::causal, "linear_attention_backward");
  const std::int64_t n = s.queries, m = s.keys;
  // dV += Pᵀ dO
  gemm_strided_batched(Op::transpose, Op::none, s.keys, s.d_v, s.queries, T(1), P, n * m, dO, n * s.d_v, T(1), dV,
                       m * s.d_v, s.batch);
  // dP = M ⊙ (dO Vᵀ)
  gemm_strided_batched(Op::none, Op::transpose, s.queries, s.keys, s.d_v, T(1), dO, n * s.d_v, V, m * s.d_v, T(0),
                       work, n * m, s.batch);
  if (mask == Mask::causal) apply_causal_mask(s, work);
  // dQ += dP K,  dK += dPᵀ Q
  gemm_strided_batched(Op::none, Op::none, s.queries, s.d_h, s.keys, T(1), work, n * m, K, m * s.d_h, T(1), dQ,
                       n * s.d_h, s.batch);
  gemm_strided_batched(Op::transpose, Op::none, s.keys, s.d_h, s.queries, T(1), work, n * m, Q, n * s.d_h, T(1), dK,
                       m * s.d_h, s.batch);
}

// ---- Normalization ---------------------------------------------------------------------

template <class T>
void normalize_rows(int n, int d, const T* X, const T* g, T eps, Centering centering, T* Y, T* N, T* r) {
  require(n >= 0 && d > 0, "normalize_rows: no features");
  require(eps > T(0), "normalize_rows: eps must be positive");
  if (n == 0) return;
  normalize_rows_kernel<<<blocks_for(std::size_t(n)), threads>>>(std::size_t(n), std::size_t(d), X, g, eps,
                                                                  centering == Centering::mean, Y, N, r);
  QKVLAB_KERNEL_CHECK();
}

template <class T>
void normalize_rows_backward(int n, int d, const T* dY, const T* g, const T* N, const T* r, Centering centering,
                             T* dX, T* dg) {
  require(n >= 0 && d > 0, "normalize_rows_backward: no features");
  if (n == 0) return;
  column_sums<T>(n, d, dY, N, dg);
  normalize_rows_backward_kernel<<<blocks_for(std::size_t(n)), threads>>>(std::size_t(n), std::size_t(d), dY, g, N,
                                                                          r, centering == Centering::mean, dX);
  QKVLAB_KERNEL_CHECK();
}

// ---- Loss, norms, optimizer ---------------------------------------------------------------

template <class T> T mse_loss(std::size_t count, const T* P, const T* Tgt) {
  require(count > 0, "mse_loss: empty prediction");
  return T(reduce<1>(count, SquaredDifference<T>{P, Tgt})[0] / double(count));
}

template <class T> void mse_loss_backward(std::size_t count, const T* P, const T* Tgt, T dL, T* dP) {
  require(count > 0, "mse_loss_backward: empty prediction");
  mse_backward_kernel<<<blocks_for(count), threads>>>(count, P, Tgt, T(2) * dL / T(count), dP);
  QKVLAB_KERNEL_CHECK();
}

template <class T> RowComparison row_comparison(int n, int d, const T* F, const T* G) {
  require(n >= 0 && d > 0, "row_comparison: no features");
  const auto sums = reduce<3>(std::size_t(n), CompareRow<T>{F, G, std::size_t(n), std::size_t(d)});
  return {sums[0], sums[1], sums[2]};
}

template <class T> double squared_norm(std::size_t count, const T* X) {
  return reduce<1>(count, Square<T>{X})[0];
}

template <class T> double clip_grad_norm(const std::vector<DeviceArray<T>>& grads, double max_norm) {
  require(max_norm > 0, "clip_grad_norm: max_norm must be positive");
  double sum = 0;
  for (const DeviceArray<T>& g : grads) sum += squared_norm(g.size, g.data);
  const double norm = std::sqrt(sum);
  if (std::isfinite(norm) && norm > max_norm)
    for (const DeviceArray<T>& g : grads) scale(g.size, T(max_norm / norm), g.data);
  return norm;
}

template <class T>
void adamw_update(std::size_t count, const AdamWStep& step, T* theta, const T* grad, T* m, T* v) {
  require(step.t >= 1, "adamw_update: steps count from 1");
  if (count == 0) return;
  const T m_hat_scale = T(1 / (1 - std::pow(step.beta1, double(step.t))));
  const T v_hat_scale = T(1 / (1 - std::pow(step.beta2, double(step.t))));
  adamw_kernel<<<blocks_for(count), threads>>>(count, T(step.beta1), T(step.beta2), T(step.eps), m_hat_scale,
                                                v_hat_scale, T(step.lr * step.weight_decay), T(step.lr), step.decay,
                                                theta, grad, m, v);
  QKVLAB_KERNEL_CHECK();
}

// ---- Instantiations for float and double --------------------------------------------------

#define QKVLAB_GPU_OPS(T)                                                                                           \
  template void gemm<T>(Op, Op, int, int, int, T, const T*, const T*, T, T*, Layout);                              \
  template void gemm_strided_batched<T>(Op, Op, int, int, int, T, const T*, std::int64_t, const T*, std::int64_t, \
                                        T, T*, std::int64_t, int, Layout);                                          \
  template void copy<T>(std::size_t, const T*, T*);                                                                \
  template void axpy<T>(std::size_t, T, const T*, T*);                                                             \
  template void scale<T>(std::size_t, T, T*);                                                                      \
  template void add_bias<T>(int, int, const T*, const T*, T*);                                                     \
  template void add_bias_backward<T>(int, int, const T*, T*);                                                      \
  template void gelu<T>(std::size_t, const T*, T*);                                                                \
  template void gelu_backward<T>(std::size_t, const T*, const T*, T*);                                             \
  template void relu<T>(std::size_t, const T*, T*);                                                                \
  template void relu_backward<T>(std::size_t, const T*, const T*, T*);                                             \
  template void attention_head<T>(const AttentionShape&, Mask, const T*, const T*, const T*, T*, T*);              \
  template void attention_head_backward<T>(const AttentionShape&, const T*, const T*, const T*, const T*,          \
                                           const T*, T*, T*, T*, T*);                                               \
  template void linear_attention<T>(const AttentionShape&, Mask, const T*, const T*, const T*, T*, T*);            \
  template void linear_attention_backward<T>(const AttentionShape&, Mask, const T*, const T*, const T*, const T*,  \
                                             const T*, T*, T*, T*, T*);                                             \
  template void normalize_rows<T>(int, int, const T*, const T*, T, Centering, T*, T*, T*);                         \
  template void normalize_rows_backward<T>(int, int, const T*, const T*, const T*, const T*, Centering, T*, T*);   \
  template T mse_loss<T>(std::size_t, const T*, const T*);                                                         \
  template void mse_loss_backward<T>(std::size_t, const T*, const T*, T, T*);                                      \
  template RowComparison row_comparison<T>(int, int, const T*, const T*);                                          \
  template double squared_norm<T>(std::size_t, const T*);                                                          \
  template double clip_grad_norm<T>(const std::vector<DeviceArray<T>>&, double);                                   \
  template void adamw_update<T>(std::size_t, const AdamWStep&, T*, const T*, T*, T*);

QKVLAB_GPU_OPS(float)
QKVLAB_GPU_OPS(double)

}  // namespace qkvlab::gpu
