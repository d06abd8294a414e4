// CpuBackend: how the CPU kernels of engine/kernels/ are spread over threads.
// Compiled with -O3 and the build machine's instruction set (CMakeLists.txt),
// so the kernels' loops are vectorized.
#include "engine/cpu_backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <new>
#include <stdexcept>
#include <string>

#include "core/parallel.hpp"
#include "engine/blas.hpp"
#include "engine/kernels/adamw.hpp"
#include "engine/kernels/attention.hpp"
#include "engine/kernels/attention_reduce.hpp"
#include "engine/kernels/cross_entropy.hpp"
#include "engine/kernels/elementwise.hpp"
#include "engine/kernels/embedding.hpp"
#include "engine/kernels/norm.hpp"
#include "engine/kernels/rope.hpp"
#include "engine/kernels/state_reduction.hpp"

namespace qkvlab::engine {

namespace k = kernels;

constexpr std::size_t kMappedBytes = std::size_t(1) << 20;

template <class S>
CpuBackend<S>::CpuBackend(int threads) : threads_(worker_count(threads)) {
  set_blas_threads(1);  // products run one tile per job on this backend's threads
}

template <class S>
std::string CpuBackend<S>::description() const {
  return "cpu (" + std::to_string(threads_) + (threads_ == 1 ? " thread" : " threads") +
         (blas_enabled() ? ", OpenBLAS)" : ", Eigen)");
}

template <class S>
template <class F>
void CpuBackend<S>::split(std::size_t count, std::size_t grain, F&& f) {
  if (count == 0) return;
  const std::size_t jobs = std::max<std::size_t>(1, std::min<std::size_t>(4 * threads_, count / std::max<std::size_t>(grain, 1)));
  const std::size_t per = (count + jobs - 1) / jobs;
  parallel_for(std::int64_t((count + per - 1) / per), threads_, [&](std::int64_t j) {
    const std::size_t begin = std::size_t(j) * per;
    f(begin, std::min(count, begin + per));
  });
}

// ---- Memory -------------------------------------------------------------------

template <class S>
void* CpuBackend<S>::allocate(std::size_t bytes) {
  // Blocks of 1 MiB and more come from mmap: the kernel's pages are zero already and take no memory
  // until written, so a buffer never written (the gradients of a model that is only evaluated)
  // costs nothing resident.
  if (bytes >= kMappedBytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    const std::lock_guard lock(mapped_mutex_);
    mapped_.emplace(p, bytes);
    return p;
  }
  void* p = std::aligned_alloc(64, (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return p;
}
template <class S>
void CpuBackend<S>::release(void* p) {
  {
    const std::lock_guard lock(mapped_mutex_);
    if (const auto it = mapped_.find(p); it != mapped_.end()) {
      ::munmap(p, it->second);
      mapped_.erase(it);
      return;
    }
  }
  std::free(p);
}
template <class S>
void CpuBackend<S>::upload(void* dst, const void* host, std::size_t bytes) {
  std::memcpy(dst, host, bytes);
}
template <class S>
void CpuBackend<S>::download(void* host, const void* src, std::size_t bytes) {
  std::memcpy(host, src, bytes);
}

// ---- Elementwise ----------------------------------------------------------------

template <class S>
void CpuBackend<S>::axpby(int rows, int cols, S alpha, const S* X, int ldx, S beta, S* Y, int ldy) {
  split(std::size_t(rows), 4096 / std::max(cols, 1) + 1,
        [&](std::size_t r0, std::size_t r1) { k::axpby_rows(int(r0), int(r1), cols, alpha, X, ldx, beta, Y, ldy); });
}

template <class S>
void CpuBackend<S>::fill(std::size_t count, S value, S* X) {
  split(count, 1 << 14, [&](std::size_t i0, std::size_t i1) { std::fill(X + i0, X + i1, value); });
}

// Fixed pieces of 4096 entries, each summed in double, then the pieces in order.
template <class S>
double CpuBackend<S>::dot(std::size_t count, const S* X, const S* Y) {
  constexpr std::size_t piece = 4096;
  std::vector<double> partial((count + piece - 1) / piece, 0.0);
  parallel_for(std::int64_t(partial.size()), threads_, [&](std::int64_t p) {
    double s = 0;
    const std::size_t begin = std::size_t(p) * piece, end = std::min(count, begin + piece);
#pragma omp simd reduction(+ : s)
    for (std::size_t i = begin; i < end; ++i) s += double(X[i]) * double(Y[i]);
    partial[std::size_t(p)] = s;
  });
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

// ---- Products -------------------------------------------------------------------

// C is cut into tiles of 128 rows × 256 columns, whatever the thread count;
// each tile is one serial GEMM over the whole inner dimension (with bf16 products over copies of
// its rows of op(A) and columns of op(B) rounded to bf16: kernels/product.hpp).
template <class S>
void CpuBackend<S>::gemm(Trans ta, Trans tb, int m, int n, int k_, S alpha, const S* A, int lda,
                         std::int64_t stride_a, const S* B, int ldb, std::int64_t stride_b, S beta, S* C, int ldc,
                         std::int64_t stride_c, int batch) {
  constexpr int tile_m = 128, tile_n = 256;
  const int tiles_m = (m + tile_m - 1) / tile_m, tiles_n = (n + tile_n - 1) / tile_n;
  const std::int64_t per_batch = std::int64_t(tiles_m) * tiles_n;
  const WeightType type = this->product_type();
  parallel_for(per_batch * batch, threads_, [&](std::int64_t job) {
    const int b = int(job / per_batch), tile = int(job % per_batch);
    const int i0 = (tile / tiles_n) * tile_m, j0 = (tile % tiles_n) * tile_n;
    const int mi = std::min(tile_m, m - i0), nj = std::min(tile_n, n - j0);
    const S* Ab = A + b * stride_a + (ta == Trans::none ? std::size_t(i0) * lda : std::size_t(i0));
    const S* Bb = B + b * stride_b + (tb == Trans::none ? std::size_t(j0) : std::size_t(j0) * ldb);
    S* Cb = C + b * stride_c + std::size_t(i0) * ldc + j0;
    k::gemm_serial_as(type, ta, tb, mi, nj, k_, alpha, Ab, lda, Bb, ldb, beta, Cb, ldc);
  });
}

template <class S>
void CpuBackend<S>::widen(int rows, int cols, const std::uint16_t* W, int ldw, const std::int32_t* rows_of,
                          WeightType type, S* Y, int ldy) {
  split(std::size_t(rows), 16384 / std::max(cols, 1) + 1, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      const std::uint16_t* w = W + std::size_t(rows_of ? rows_of[r] : std::int32_t(r)) * std::size_t(ldw);
      S* y = Y + r * std::size_t(ldy);
      for (int c = 0; c < cols; ++c) y[c] = S(widen_bits(w[c], type));
    }
  });
}

template <class S>
void CpuBackend<S>::add_bias(int rows, int cols, const S* b, S* Y, int ldy) {
  split(std::size_t(rows), 4096 / std::max(cols, 1) + 1,
        [&](std::size_t r0, std::size_t r1) { k::add_bias_rows(int(r0), int(r1), cols, b, Y, ldy); });
}

template <class S>
void CpuBackend<S>::bias_backward(int rows, int cols, const S* dY, int ldy, S* db) {
  split(std::size_t(cols), 64, [&](std::size_t c0, std::size_t c1) {
    k::bias_backward_cols(rows, ldy, int(c0), int(c1), dY, db);
  });
}

// ---- Embedding --------------------------------------------------------------------

template <class S>
void CpuBackend<S>::embedding_forward(int B, int T_, int C, const std::int32_t* ids, const S* wte, const S* wpe,
                                      S* out) {
  split(std::size_t(B) * T_, 16, [&](std::size_t n0, std::size_t n1) {
    k::embedding_forward_rows(int(n0), int(n1), T_, C, ids, wte, wpe, out);
  });
}

template <class S>
void CpuBackend<S>::embedding_backward(int B, int T_, int C, const std::int32_t* ids, const S* dout, S* dwte,
                                       S* dwpe) {
  split(std::size_t(C), 32, [&](std::size_t c0, std::size_t c1) {
    k::embedding_backward_cols(B * T_, T_, C, int(c0), int(c1), ids, dout, dwte, dwpe);
  });
}

// ---- Normalization ------------------------------------------------------------------

template <class S>
void CpuBackend<S>::norm_forward(int N, int C, Centering centering, S eps, const S* X, const S* gain,
                                 const S* bias, S* out, S* mean, S* rstd) {
  split(std::size_t(N), 16, [&](std::size_t r0, std::size_t r1) {
    k::norm_forward_rows(int(r0), int(r1), C, centering, eps, X, gain, bias, out, mean, rstd);
  });
}

template <class S>
void CpuBackend<S>::norm_backward(int N, int C, Centering centering, const S* X, const S* gain, const S* mean,
                                  const S* rstd, const S* dout, S* dX, S* dgain, S* dbias) {
  split(std::size_t(N), 16, [&](std::size_t r0, std::size_t r1) {
    k::norm_backward_rows(int(r0), int(r1), C, centering, X, gain, mean, rstd, dout, dX);
  });
  split(std::size_t(C), 64, [&](std::size_t c0, std::size_t c1) {
    k::norm_backward_cols(N, C, int(c0), int(c1), X, mean, rstd, dout, dgain, dbias);
  });
}

// ---- Activations ----------------------------------------------------------------------

template <class S>
void CpuBackend<S>::gelu_forward(std::size_t count, GeluForm form, const S* X, S* Y) {
  split(count, 1 << 13, [&](std::size_t i0, std::size_t i1) { k::gelu_forward_range(i0, i1, form, X, Y); });
}
template <class S>
void CpuBackend<S>::gelu_backward(std::size_t count, GeluForm form, const S* X, const S* dY, S* dX) {
  split(count, 1 << 13, [&](std::size_t i0, std::size_t i1) { k::gelu_backward_range(i0, i1, form, X, dY, dX); });
}
template <class S>
void CpuBackend<S>::relu_forward(std::size_t count, const S* X, S* Y) {
  split(count, 1 << 13, [&](std::size_t i0, std::size_t i1) { k::relu_forward_range(i0, i1, X, Y); });
}

template <class S>
void CpuBackend<S>::relu_backward(std::size_t count, const S* X, const S* dY, S* dX) {
  split(count, 1 << 13, [&](std::size_t i0, std::size_t i1) { k::relu_backward_range(i0, i1, X, dY, dX); });
}

template <class S>
void CpuBackend<S>::swiglu_forward(std::size_t count, const S* G, const S* U, S* Y) {
  split(count, 1 << 13, [&](std::size_t i0, std::size_t i1) { k::swiglu_forward_range(i0, i1, G, U, Y); });
}
template <class S>
void CpuBackend<S>::swiglu_backward(std::size_t count, const S* G, const S* U, const S* dY, S* dG, S* dU) {
  split(count, 1 << 13,
        [&](std::size_t i0, std::size_t i1) { k::swiglu_backward_range(i0, i1, G, U, dY, dG, dU); });
}

// ---- Rotary positions --------------------------------------------------------------------

template <class S>
const S* CpuBackend<S>::rope_table(int T_, int d, const RopeFrequencies& f) {
  auto key = std::make_tuple(T_, d, f.key());
  auto it = rope_tables_.find(key);
  if (it == rope_tables_.end()) it = rope_tables_.emplace(key, engine::rope_table<S>(T_, d, f)).first;
  return it->second.data();
}

template <class S>
void CpuBackend<S>::rope(int B, int T_, int past, int heads, int d, int ld, const RopeFrequencies& f, bool inverse,
                         S* X) {
  if (d % 2) throw std::invalid_argument("rope: the head width must be even, got " + std::to_string(d));
  const S* table = rope_table(rope_table_length(T_, past), d, f) + std::size_t(past) * d;
  split(std::size_t(B) * T_, 16, [&](std::size_t n0, std::size_t n1) {
    k::rope_rows(int(n0), int(n1), T_, heads, d, ld, table, inverse, X);
  });
}

// ---- Attention -----------------------------------------------------------------------------

template <class S>
void CpuBackend<S>::attention_forward(const AttentionShape& s, S scale, const S* q, KvHeads<S> k_, KvHeads<S> v,
                                      S* pattern, S* z) {
  const WeightType products = this->product_type();
  parallel_for(std::int64_t(s.B) * s.H, threads_, [&](std::int64_t job) {
    k::attention_forward_head(s, int(job / s.H), int(job % s.H), scale, q, k_, v, pattern, z, products);
  });
}

template <class S>
void CpuBackend<S>::attention_reduce(const AttentionShape& s, S scale, const S* q, KvHeads<S> k_, KvHeads<S> v,
                                     int block, S* z, const PatternSums& sums) {
  if (!s.plain()) throw std::invalid_argument("attention_reduce: only without a cache (past 0, capacity T)");
  if (s.segments != 1) throw std::invalid_argument("attention_reduce: one segment of keys only");
  if (block < 1) throw std::invalid_argument("attention_reduce: a query block of at least 1 row");
  block = std::min(block, s.T);
  parallel_for(std::int64_t(s.B) * s.H, threads_, [&](std::int64_t job) {
    std::vector<S> scratch(std::size_t(block) * s.T);  // this job's block of pattern rows
    k::attention_reduce_head(s, int(job / s.H), int(job % s.H), scale, q, k_, v, block, scratch.data(), z, sums,
                             this->product_type());
  });
}

template <class S>
void CpuBackend<S>::attention_backward(const AttentionShape& s, S scale, const S* q, const S* k_, const S* v,
                                       const S* pattern, const S* dz, S* dq, S* dk, S* dv, S* scratch) {
  if (!s.plain()) throw std::invalid_argument("attention_backward: only without a cache (past 0, capacity T)");
  const WeightType products = this->product_type();
  parallel_for(std::int64_t(s.B) * s.Hkv, threads_, [&](std::int64_t job) {
    S* own = scratch + std::size_t(job) * s.group() * s.T * s.columns();  // this job's part of the B·H·T·C scratch
    k::attention_backward_group(s, int(job / s.Hkv), int(job % s.Hkv), scale, q, k_, v, pattern, dz, dq, dk, dv,
                                own, products);
  });
}

// ---- Reductions of token-major states -------------------------------------------------------

// Norms split over rows; each (sequence, 64 columns) of the unit sums is one job over the rows in order.
template <class S>
void CpuBackend<S>::state_rows(const StateShape& s, const S* X, const RowSums& out) {
  const std::size_t N = std::size_t(s.B) * s.T;
  std::vector<double> own(out.norms ? 0 : N);
  double* norms = out.norms ? out.norms : own.data();
  split(N, 16, [&](std::size_t r0, std::size_t r1) { k::state_norm_rows(s, X, r0, r1, norms); });
  constexpr int piece = 64;
  const int C = s.columns(), pieces = (C + piece - 1) / piece;
  if (out.unit)
    parallel_for(std::int64_t(s.B) * pieces, threads_, [&](std::int64_t job) {
      const int b = int(job / pieces), c0 = int(job % pieces) * piece;
      k::state_unit_columns(s, X, norms, b, c0, std::min(C, c0 + piece), out.unit);
    });
  for (int b = 0; out.nonzero && b < s.B; ++b) {
    out.nonzero[b] = 0;
    for (int i = 0; i < s.T; ++i) out.nonzero[b] += norms[std::size_t(b) * s.T + i] != 0;
  }
}

template <class S>
void CpuBackend<S>::state_gram(int B, int T_, int C, const S* X, double alpha, double* out) {
  parallel_for(B, threads_, [&](std::int64_t b) { k::state_gram_sequence(int(b), T_, C, X, alpha, out); });
}

// ---- Loss and optimizer ----------------------------------------------------------------------

template <class S>
void CpuBackend<S>::cross_entropy(int N, int V, const S* logits, const std::int32_t* targets, S* loss, S scale,
                                  S* dlogits) {
  split(std::size_t(N), 1, [&](std::size_t n0, std::size_t n1) {
    k::cross_entropy_rows(int(n0), int(n1), V, logits, targets, loss, scale, dlogits);
  });
}

template <class S>
void CpuBackend<S>::adamw(std::size_t count, const typename Backend<S>::AdamW& a, bool decay, S* theta,
                          const S* grad, S* m, S* v) {
  const S m_scale = S(1 / (1 - std::pow(a.beta1, double(a.t))));
  const S v_scale = S(1 / (1 - std::pow(a.beta2, double(a.t))));
  const S decay_step = decay ? S(a.lr * a.weight_decay) : S(0);
  split(count, 1 << 14, [&](std::size_t i0, std::size_t i1) {
    k::adamw_range(i0, i1, S(a.lr), S(a.beta1), S(a.beta2), S(a.eps), decay_step, m_scale, v_scale, theta, grad, m,
                   v);
  });
}

template class CpuBackend<float>;
template class CpuBackend<double>;

}  // namespace qkvlab::engine
