// CudaBackend (gpu/cuda_backend.hpp): memory, the cuBLAS products and the
// launches of the kernels in gpu/kernels/. Shapes are checked by the callers
// (lm/model.cpp, engine/linear.hpp) as on the CPU backend; launch errors and
// cuBLAS statuses become std::runtime_error.
#include "gpu/cuda_backend.hpp"

#include "engine/rope_frequencies.hpp"
#include "gpu/backend.hpp"
#include "gpu/cublas.cuh"
#include "gpu/cuda_check.cuh"
#include "gpu/device.hpp"
#include "gpu/device_buffer.hpp"
#include "gpu/kernels/attention.cuh"
#include "gpu/kernels/cross_entropy.cuh"
#include "gpu/kernels/elementwise.cuh"
#include "gpu/kernels/embedding.cuh"
#include "gpu/kernels/launch.cuh"
#include "gpu/kernels/norm.cuh"
#include "gpu/kernels/reduce.cuh"
#include "gpu/kernels/rope.cuh"
#include "gpu/kernels/state_reduction.cuh"

#include <cmath>
#include <stdexcept>
#include <string>

namespace qkvlab::gpu {

namespace kn = kernels;
using engine::Trans;

namespace {

cublasOperation_t to_cublas(Trans t) { return t == Trans::none ? CUBLAS_OP_N : CUBLAS_OP_T; }

// One line naming why, as --device cuda reports it (cli/device_option.hpp).
void require_device() {
  if (!device_status().available)
    throw std::runtime_error("no CUDA device can be used (" + device_status().description + ")");
}

}  // namespace

CudaBackend::CudaBackend() : dot_host_(kn::kDotBlocks) {
  require_device();
  dot_partials_ = static_cast<double*>(allocate(kn::kDotBlocks * sizeof(double)));
}

CudaBackend::~CudaBackend() {
  release(dot_partials_);
  release(column_partials_);
  release(pattern_block_);
  release(state_scratch_);
  release(bf16_a_);
  release(bf16_b_);
  for (auto& [key, table] : rope_tables_) release(table);
}

std::string CudaBackend::description() const { return "cuda (" + device_status().description + ", cuBLAS)"; }

// ---- Memory --------------------------------------------------------------------

void* CudaBackend::allocate(std::size_t bytes) {
  ++allocations_;
  void* p = detail::device_allocate(bytes);
  detail::set_zero(p, bytes);
  return p;
}
void CudaBackend::release(void* p) { detail::device_free(p); }
void CudaBackend::upload(void* dst, const void* host, std::size_t bytes) { detail::copy_to_device(dst, host, bytes); }
void CudaBackend::download(void* host, const void* src, std::size_t bytes) { detail::copy_to_host(host, src, bytes); }
void CudaBackend::synchronize() { QKVLAB_CUDA_CHECK(cudaDeviceSynchronize()); }

namespace {

// A kept scratch of at least `count` values: released and allocated anew (zeroed) when too short.
template <class U>
U* kept(engine::Memory& memory, U*& buffer, std::size_t& capacity, std::size_t count) {
  if (count > capacity) {
    memory.release(buffer);
    buffer = nullptr, capacity = 0;
    buffer = static_cast<U*>(memory.allocate(count * sizeof(U)));
    capacity = count;
  }
  return buffer;
}

}  // namespace

double* CudaBackend::column_partials(std::size_t count) {
  return kept(*this, column_partials_, column_capacity_, count);
}
float* CudaBackend::pattern_block(std::size_t count) {
  return kept(*this, pattern_block_, pattern_block_capacity_, count);
}
double* CudaBackend::state_scratch(std::size_t count) { return kept(*this, state_scratch_, state_capacity_, count); }

// ---- Elementwise -------------------------------------------------------------------

void CudaBackend::axpby(int rows, int cols, float alpha, const float* X, int ldx, float beta, float* Y, int ldy) {
  const std::size_t count = std::size_t(rows) * cols;
  if (count == 0) return;
  kn::axpby_kernel<<<kn::blocks_for(count), kn::kThreads>>>(rows, cols, alpha, X, ldx, beta, Y, ldy);
  QKVLAB_KERNEL_CHECK();
}

void CudaBackend::fill(std::size_t count, float value, float* X) {
  if (count == 0) return;
  kn::fill_kernel<<<kn::blocks_for(count), kn::kThreads>>>(count, value, X);
  QKVLAB_KERNEL_CHECK();
}

double CudaBackend::dot(std::size_t count, const float* X, const float* Y) {
  if (count == 0) return 0;
  const int blocks = kn::dot_blocks(count);
  kn::dot_kernel<<<blocks, kn::kThreads>>>(count, X, Y, dot_partials_);
  QKVLAB_KERNEL_CHECK();
  download(dot_host_.data(), dot_partials_, std::size_t(blocks) * sizeof(double));
  double total = 0;
  for (int b = 0; b < blocks; ++b) total += dot_host_[std::size_t(b)];
  return total;
}

// ---- Products ------------------------------------------------------------------------

void CudaBackend::gemm(Trans ta, Trans tb, int m, int n, int k, float alpha, const float* A, int lda,
                       std::int64_t stride_a, const float* B, int ldb, std::int64_t stride_b, float beta, float* C,
                       int ldc, std::int64_t stride_c, int batch) {
  if (product_type() == engine::WeightType::f32 || m <= 0 || n <= 0 || k <= 0 || batch <= 0)
    return float_gemm(ta, tb, m, n, k, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc, stride_c, batch);
  // bf16: each operand's stored blocks rounded into a dense bf16 copy (a broadcast operand, stride 0, once).
  auto narrow = [&](Trans t, int rows, int cols, const float* X, int ld, std::int64_t stride, std::uint16_t*& copy,
                    std::size_t& capacity) {
    if (t != Trans::none) std::swap(rows, cols);
    const int copies = stride == 0 ? 1 : batch;
    const std::size_t count = std::size_t(copies) * rows * cols;
    kept(*this, copy, capacity, count);
    kn::narrow_bf16_kernel<<<kn::blocks_for(count), kn::kThreads>>>(copies, rows, cols, X, ld, stride, copy);
    QKVLAB_KERNEL_CHECK();
    return std::pair{cols, stride == 0 ? 0LL : (long long)rows * cols};  // the copy's leading dimension and stride
  };
  const auto [lda16, sa16] = narrow(ta, m, k, A, lda, stride_a, bf16_a_, bf16_a_capacity_);
  const auto [ldb16, sb16] = narrow(tb, k, n, B, ldb, stride_b, bf16_b_, bf16_b_capacity_);
  // Row-major C (m×n) read column-major is Cᵀ (n×m) = op(B)ᵀ op(A)ᵀ.
  QKVLAB_CUBLAS_CHECK(detail::gemm_call_bf16(to_cublas(tb), to_cublas(ta), n, m, k, &alpha, bf16_b_, ldb16, sb16,
                                             bf16_a_, lda16, sa16, &beta, C, ldc, stride_c, batch));
}

// The float32 product: gemm's at product type f32, and its fallback for empty products.
void CudaBackend::float_gemm(Trans ta, Trans tb, int m, int n, int k, float alpha, const float* A, int lda,
                             std::int64_t stride_a, const float* B, int ldb, std::int64_t stride_b, float beta,
                             float* C, int ldc, std::int64_t stride_c, int batch) {
  if (m <= 0 || n <= 0 || batch <= 0) return;
  if (k <= 0) {  // C = β C (β = 0: zeros)
    for (int b = 0; b < batch; ++b) axpby(m, n, beta, C + b * stride_c, ldc, 0.0f, C + b * stride_c, ldc);
    return;
  }
  // Row-major C (m×n) read column-major is Cᵀ (n×m) = op(B)ᵀ op(A)ᵀ.
  QKVLAB_CUBLAS_CHECK(detail::gemm_call(to_cublas(tb), to_cublas(ta), n, m, k, &alpha, B, ldb, stride_b, A, lda,
                                        stride_a, &beta, C, ldc, stride_c, batch));
}

void CudaBackend::widen(int rows, int cols, const std::uint16_t* W, int ldw, const std::int32_t* rows_of,
                        engine::WeightType type, float* Y, int ldy) {
  const std::size_t count = std::size_t(rows) * cols;
  if (count == 0) return;
  kn::widen_kernel<<<kn::blocks_for(count), kn::kThreads>>>(rows, cols, W, ldw, rows_of, type, Y, ldy);
  QKVLAB_KERNEL_CHECK();
}

void CudaBackend::add_bias(int rows, int cols, const float* b, float* Y, int ldy) {
  const std::size_t count = std::size_t(rows) * cols;
  if (count == 0) return;
  kn::add_bias_kernel<<<kn::blocks_for(count), kn::kThreads>>>(rows, cols, b, Y, ldy);
  QKVLAB_KERNEL_CHECK();
}

namespace {

// out_k[c] += Σ_r f_k(r, c) (reduce.cuh), with `partial` holding chunks·K·cols doubles.
template <int K, class F>
void column_sums(int rows, int cols, F f, double* partial, float* out0, float* out1) {
  const int chunks = kn::column_chunks(rows);
  const dim3 grid((cols + 31) / 32, chunks), block(32, kn::kColumnLanes);
  kn::column_partials_kernel<K><<<grid, block>>>(rows, cols, f, partial);
  QKVLAB_KERNEL_CHECK();
  kn::column_finish_kernel<K><<<kn::blocks_for(std::size_t(cols)), kn::kThreads>>>(chunks, cols, partial, out0, out1);
  QKVLAB_KERNEL_CHECK();
}

}  // namespace

void CudaBackend::bias_backward(int rows, int cols, const float* dY, int ldy, float* db) {
  if (rows <= 0 || cols <= 0) return;
  double* partial = column_partials(std::size_t(kn::column_chunks(rows)) * cols);
  column_sums<1>(rows, cols, kn::BiasColumns{dY, ldy}, partial, db, nullptr);
}

// ---- Embedding ----------------------------------------------------------------------------

void CudaBackend::embedding_forward(int B, int T, int C, const std::int32_t* ids, const float* wte, const float* wpe,
                                    float* out) {
  const std::size_t count = std::size_t(B) * T * C;
  if (count == 0) return;
  kn::embedding_forward_kernel<<<kn::blocks_for(count), kn::kThreads>>>(B * T, T, C, ids, wte, wpe, out);
  QKVLAB_KERNEL_CHECK();
}

void CudaBackend::embedding_backward(int B, int T, int C, const std::int32_t* ids, const float* dout, float* dwte,
                                     float* dwpe) {
  if (std::size_t(B) * T * C == 0) return;
  const dim3 grid((C + 31) / 32, kn::kEmbeddingSlices);
  kn::embedding_scatter_kernel<<<grid, 32>>>(B * T, C, ids, dout, dwte);
  QKVLAB_KERNEL_CHECK();
  if (!dwpe) return;
  kn::embedding_positions_kernel<<<kn::blocks_for(std::size_t(T) * C), kn::kThreads>>>(B, T, C, dout, dwpe);
  QKVLAB_KERNEL_CHECK();
}

// ---- Normalization -----------------------------------------------------------------------------

void CudaBackend::norm_forward(int N, int C, engine::Centering centering, float eps, const float* X,
                               const float* gain, const float* bias, float* out, float* mean, float* rstd) {
  if (N <= 0) return;
  kn::norm_forward_kernel<<<N, kn::row_threads(C)>>>(C, centering == engine::Centering::mean, eps, X, gain, bias,
                                                      out, mean, rstd);
  QKVLAB_KERNEL_CHECK();
}

void CudaBackend::norm_backward(int N, int C, engine::Centering centering, const float* X, const float* gain,
                                const float* mean, const float* rstd, const float* dout, float* dX, float* dgain,
                                float* dbias) {
  if (N <= 0) return;
  kn::norm_backward_kernel<<<N, kn::row_threads(C)>>>(C, centering == engine::Centering::mean, X, gain, mean, rstd,
                                                       dout, dX);
  QKVLAB_KERNEL_CHECK();
  double* partial = column_partials(std::size_t(kn::column_chunks(N)) * 2 * C);
  column_sums<2>(N, C, kn::NormColumns{X, mean, rstd, dout, C}, partial, dgain, dbias);
}

// ---- Activations ---------------------------------------------------------------------------------

void CudaBackend::gelu_forward(std::size_t count, engine::GeluForm form, const float* X, float* Y) {
  if (count == 0) return;
  kn::gelu_forward_kernel<<<kn::blocks_for(count), kn::kThreads>>>(count, form == engine::GeluForm::tanh, X, Y);
  QKVLAB_KERNEL_CHECK();
}

void CudaBackend::gelu_backward(std::size_t count, engine::GeluForm form, const float* X, const float* dY,
                                float* dX) {
  if (count == 0) return;
  kn::gelu_backward_kernel<<<kn::blocks_for(count), kn::kThreads>>>(count, form == engine::GeluForm::tanh, X, dY,
                                                                     dX);
  QKVLAB_KERNEL_CHECK();
}

void CudaBackend::relu_forward(std::size_t count, const float* X, float* Y) {
  if (count == 0) return;
  kn::relu_forward_kernel<<<kn::blocks_for(count), kn::kThreads>>>(count, X, Y);
  QKVLAB_KERNEL_CHECK();
}

void CudaBackend::relu_backward(std::size_t count, const float* X, const float* dY, float* dX) {
  if (count == 0) return;
  kn::relu_backward_kernel<<<kn::blocks_for(count), kn::kThreads>>>(count, X, dY, dX);
  QKVLAB_KERNEL_CHECK();
}

void CudaBackend::swiglu_forward(std::size_t count, const float* G, const float* U, float* Y) {
  if (count == 0) return;
  kn::swiglu_forward_kernel<<<kn::blocks_for(count), kn::kThreads>>>(count, G, U, Y);
  QKVLAB_KERNEL_CHECK();
}

void CudaBackend::swiglu_backward(std::size_t count, const float* G, const float* U, const float* dY, float* dG,
                                  float* dU) {
  if (count == 0) return;
  kn::swiglu_backward_kernel<<<kn::blocks_for(count), kn::kThreads>>>(count, G, U, dY, dG, dU);
  QKVLAB_KERNEL_CHECK();
}

// ---- Rotary positions ------------------------------------------------------------------------------

const float* CudaBackend::rope_table(int T, int d, const engine::RopeFrequencies& f) {
  const auto key = std::make_tuple(T, d, f.key());
  auto it = rope_tables_.find(key);
  if (it == rope_tables_.end()) {
    const std::vector<float> host = engine::rope_table<float>(T, d, f);
    float* table = static_cast<float*>(allocate(host.size() * sizeof(float)));
    upload(table, host.data(), host.size() * sizeof(float));
    it = rope_tables_.emplace(key, table).first;
  }
  return it->second;
}

void CudaBackend::rope(int B, int T, int past, int heads, int d, int ld, const engine::RopeFrequencies& f,
                       bool inverse, float* X) {
  if (d % 2) throw std::invalid_argument("rope: the head width must be even, got " + std::to_string(d));
  const std::size_t count = std::size_t(B) * T * heads * (d / 2);
  if (count == 0) return;
  const float* table = rope_table(engine::rope_table_length(T, past), d, f) + std::size_t(past) * d;
  kn::rope_kernel<<<kn::blocks_for(count), kn::kThreads>>>(B * T, T, heads, d, ld, table, inverse, X);
  QKVLAB_KERNEL_CHECK();
}

// ---- Attention ---------------------------------------------------------------------------------------

namespace {

// Strides of one head's operands across the B sequences (cuda_backend.hpp).
// With a cache, k and v hold s.kv_rows() rows per sequence and a pattern is T × s.columns() (segment
// seg's block at seg·s.keys(); k and v of one tensor hold s.kv_heads() heads).
struct HeadLayout {
  int ldq, ldk, ldv, ldz;
  std::int64_t sq, sk, sv, sz, TT, sp;  // per-sequence strides; one pattern; patterns of one sequence
  explicit HeadLayout(const engine::AttentionShape& s)
      : ldq(s.H * s.dk), ldk(s.kv_heads() * s.dk), ldv(s.kv_heads() * s.dv), ldz(s.H * s.dv),
        sq(std::int64_t(s.T) * ldq), sk(std::int64_t(s.kv_rows()) * ldk), sv(std::int64_t(s.kv_rows()) * ldv),
        sz(std::int64_t(s.T) * ldz), TT(std::int64_t(s.T) * s.columns()), sp(s.H * TT) {}
};

// Key/value head g of k or v (engine::KvHeads: one tensor, or head by head where each lives), its
// leading dimension and its stride from one sequence to the next.
struct KvHead {
  const float* data;
  int ld;
  std::int64_t stride;
  KvHead(const engine::AttentionShape& s, engine::KvHeads<float> heads, int g, int width) {
    const engine::View<const float> h = heads.head(g, s.kv_heads(), width);
    data = h.data, ld = h.ld, stride = std::int64_t(s.kv_rows()) * h.ld;
  }
};

}  // namespace

void CudaBackend::attention_forward(const engine::AttentionShape& s, float scale, const float* q,
                                    engine::KvHeads<float> k, engine::KvHeads<float> v, float* pattern, float* z) {
  const HeadLayout L(s);
  const int T = s.T, J = s.keys(), C = s.columns();
  for (int seg = 0; seg < s.segments; ++seg)
    for (int h = 0; h < s.H; ++h) {  // S_bh = scale · q_bh k_bgᵀ, segment by segment
      const KvHead K(s, k, seg * s.Hkv + h / s.group(), s.dk);
      gemm(Trans::none, Trans::transpose, T, J, s.dk, scale, q + h * s.dk, L.ldq, L.sq, K.data, K.ld, K.stride,
                 0.0f, pattern + h * L.TT + seg * J, C, L.sp, s.B);
    }
  kn::causal_softmax_kernel<<<unsigned(std::int64_t(s.B) * s.H * T), kn::row_threads(C)>>>(T, s.past, J, pattern,
                                                                                          s.segments);
  QKVLAB_KERNEL_CHECK();
  for (int seg = 0; seg < s.segments; ++seg)
    for (int h = 0; h < s.H; ++h) {  // z_bh = Σ_seg P_bh,seg v_bg,seg
      const KvHead V(s, v, seg * s.Hkv + h / s.group(), s.dv);
      gemm(Trans::none, Trans::none, T, s.dv, J, 1.0f, pattern + h * L.TT + seg * J, C, L.sp, V.data, V.ld,
                 V.stride, seg ? 1.0f : 0.0f, z + h * s.dv, L.ldz, L.sz, s.B);
    }
}

// Per block of queries t0 … t0 + rows − 1, for all (b, h) at once: the scores against the keys
// j < t0 + rows (J of them) into the kept scratch, (b, h)'s rows at (b·H + h)·rows·J, the softmax
// rows (attention_forward's kernel with the block's rows as T and t0 as past), their mass, entropy
// and column sums, then z's rows of the block.
void CudaBackend::attention_reduce(const engine::AttentionShape& s, float scale, const float* q,
                                   engine::KvHeads<float> k, engine::KvHeads<float> v, int block, float* z,
                                   const engine::PatternSums& sums) {
  if (!s.plain()) throw std::invalid_argument("attention_reduce: only without a cache (past 0, capacity T)");
  if (s.segments != 1) throw std::invalid_argument("attention_reduce: one segment of keys only");
  if (block < 1) throw std::invalid_argument("attention_reduce: a query block of at least 1 row");
  const HeadLayout L(s);
  const int T = s.T, heads = s.B * s.H;
  block = std::min(block, T);
  float* P = pattern_block(std::size_t(heads) * block * T);
  for (int t0 = 0; t0 < T; t0 += block) {
    const int rows = std::min(block, T - t0), J = t0 + rows;
    const std::int64_t per_head = std::int64_t(rows) * J, per_sequence = s.H * per_head;
    for (int h = 0; h < s.H; ++h) {
      const KvHead K(s, k, h / s.group(), s.dk);
      gemm(Trans::none, Trans::transpose, rows, J, s.dk, scale, q + std::int64_t(t0) * L.ldq + h * s.dk, L.ldq, L.sq,
           K.data, K.ld, K.stride, 0.0f, P + h * per_head, J, per_sequence, s.B);
    }
    const unsigned row_blocks = unsigned(std::int64_t(heads) * rows);
    kn::causal_softmax_kernel<<<row_blocks, kn::row_threads(J)>>>(rows, t0, J, P, 1);
    QKVLAB_KERNEL_CHECK();
    if (sums.columns) {
      kn::pattern_rows_kernel<<<row_blocks, kn::row_threads(J)>>>(T, t0, rows, P, sums.mass, sums.entropy);
      QKVLAB_KERNEL_CHECK();
      const std::size_t columns = std::size_t(heads) * J;
      kn::pattern_columns_kernel<<<kn::blocks_for(columns), kn::kThreads>>>(heads, T, t0, rows, P, sums.columns);
      QKVLAB_KERNEL_CHECK();
    }
    for (int h = 0; h < s.H; ++h) {
      const KvHead V(s, v, h / s.group(), s.dv);
      gemm(Trans::none, Trans::none, rows, s.dv, J, 1.0f, P + h * per_head, J, per_sequence, V.data, V.ld, V.stride,
           0.0f, z + std::int64_t(t0) * L.ldz + h * s.dv, L.ldz, L.sz, s.B);
    }
  }
}

void CudaBackend::attention_backward(const engine::AttentionShape& s, float scale, const float* q, const float* k,
                                     const float* v, const float* pattern, const float* dz, float* dq, float* dk,
                                     float* dv, float* scratch) {
  if (!s.plain()) throw std::invalid_argument("attention_backward: only without a cache (past 0, capacity T)");
  const HeadLayout L(s);
  const int T = s.T, C = s.columns();
  for (int seg = 0; seg < s.segments; ++seg)
    for (int h = 0; h < s.H; ++h) {  // dP_bh = dz_bh v_bgᵀ, segment by segment
      const int g = seg * s.Hkv + h / s.group();
      gemm(Trans::none, Trans::transpose, T, T, s.dv, 1.0f, dz + h * s.dv, L.ldz, L.sz, v + g * s.dv, L.ldv, L.sv,
                 0.0f, scratch + h * L.TT + seg * T, C, L.sp, s.B);
    }
  kn::causal_softmax_backward_kernel<<<unsigned(std::int64_t(s.B) * s.H * T), kn::row_threads(C)>>>(
      T, s.segments, pattern, scratch);
  QKVLAB_KERNEL_CHECK();
  for (int h = 0; h < s.H; ++h)  // in head order: the group's heads add into dk_g, dv_g one after another
    for (int seg = 0; seg < s.segments; ++seg) {
      const int g = seg * s.Hkv + h / s.group();
      const float* dS = scratch + h * L.TT + seg * T;
      gemm(Trans::none, Trans::none, T, s.dk, T, scale, dS, C, L.sp, k + g * s.dk, L.ldk, L.sk, 1.0f,
                 dq + h * s.dk, L.ldq, L.sq, s.B);
      gemm(Trans::transpose, Trans::none, T, s.dk, T, scale, dS, C, L.sp, q + h * s.dk, L.ldq, L.sq, 1.0f,
                 dk + g * s.dk, L.ldk, L.sk, s.B);
      gemm(Trans::transpose, Trans::none, T, s.dv, T, 1.0f, pattern + h * L.TT + seg * T, C, L.sp, dz + h * s.dv,
                 L.ldz, L.sz, 1.0f, dv + g * s.dv, L.ldv, L.sv, s.B);
    }
}

// ---- Reductions of token-major states --------------------------------------------------------------

void CudaBackend::state_rows(const engine::StateShape& s, const float* X, const engine::RowSums& out) {
  const std::size_t N = std::size_t(s.B) * s.T;
  if (N == 0) return;
  const kn::StateRows rows{s.T, s.heads, s.width, s.combine == engine::HeadCombination::mean};
  double* norms = out.norms ? out.norms : state_scratch(N);
  kn::state_norms_kernel<<<unsigned(N), kn::row_threads(rows.columns())>>>(rows, X, norms);
  QKVLAB_KERNEL_CHECK();
  if (!out.unit && !out.nonzero) return;
  const std::size_t sums = std::size_t(s.B) * rows.columns();
  kn::state_unit_kernel<<<kn::blocks_for(sums), kn::kThreads>>>(s.B, rows, X, norms, out.unit, out.nonzero);
  QKVLAB_KERNEL_CHECK();
}

// Row-major X_b (T × C) read column-major is A = X_bᵀ (C × T, lda = C): X_bᵀ X_b = A Aᵀ, X_b X_bᵀ = Aᵀ A.
void CudaBackend::state_gram(int B, int T, int C, const float* X, double alpha, double* out) {
  const std::size_t count = std::size_t(B) * T * C;
  if (count == 0) return;
  double* x = state_scratch(count);
  kn::to_double_kernel<<<kn::blocks_for(count), kn::kThreads>>>(count, X, x);
  QKVLAB_KERNEL_CHECK();
  const bool tokens = T < C;
  const int m = tokens ? T : C;
  const double zero = 0;
  QKVLAB_CUBLAS_CHECK(detail::gemm_call(tokens ? CUBLAS_OP_T : CUBLAS_OP_N, tokens ? CUBLAS_OP_N : CUBLAS_OP_T, m, m,
                                        tokens ? C : T, &alpha, x, C, std::int64_t(T) * C, x, C, std::int64_t(T) * C,
                                        &zero, out, m, std::int64_t(m) * m, B));
}

// ---- Loss and optimizer -----------------------------------------------------------------------------------

void CudaBackend::cross_entropy(int N, int V, const float* logits, const std::int32_t* targets, float* loss,
                                float scale, float* dlogits) {
  if (N <= 0) return;
  kn::cross_entropy_kernel<<<N, kn::row_threads(V)>>>(V, logits, targets, loss, scale, dlogits);
  QKVLAB_KERNEL_CHECK();
}

void CudaBackend::adamw(std::size_t count, const AdamW& a, bool decay, float* theta, const float* grad, float* m,
                        float* v) {
  if (count == 0) return;
  const kn::AdamWScalars s{float(a.lr),
                           float(a.beta1),
                           float(a.beta2),
                           float(a.eps),
                           decay ? float(a.lr * a.weight_decay) : 0.0f,
                           float(1 / (1 - std::pow(a.beta1, double(a.t)))),
                           float(1 / (1 - std::pow(a.beta2, double(a.t))))};
  kn::adamw_kernel<<<kn::blocks_for(count), kn::kThreads>>>(count, s, theta, grad, m, v);
  QKVLAB_KERNEL_CHECK();
}

// ---- make_cuda_backend (gpu/backend.hpp) ------------------------------------------------------------------

std::unique_ptr<engine::Backend<float>> make_cuda_backend() {
  require_device();
  return std::make_unique<CudaBackend>();
}

}  // namespace qkvlab::gpu
