// The CUDA backend: engine/backend.hpp's kernels on a CUDA device, in float,
// with the CPU backend's contracts (row-major data; backward kernels add into
// their gradients; β = 0 ignores Y's old contents, α = β = 0 writes zeros).
// No CUDA in this header: the kernels are in gpu/kernels/*.cuh, the class in
// cuda_backend.cu.
//
// - Products: cuBLAS (gpu/cublas.cuh, TF32 off). Row-major C = op(A) op(B) is
//   the column-major product Cᵀ = op(B)ᵀ op(A)ᵀ: the same call with the
//   operands (and m, n) swapped.
// - Attention: no permute copies. For each query head h, one strided-batched
//   product over the B sequences: head h of sequence b starts at
//   b·T·H·dk + h·dk (leading dimension H·dk), its key/value head g = h/(H/Hkv)
//   at b·T·Hkv·dk + g·dk, pattern (b, h) at (b·H + h)·T·T; then one causal
//   softmax kernel over every row. Backward: dP for every head into the given
//   B·H·T·T scratch, one softmax-backward kernel, then per head in head order
//   dq_h, dk_g, dv_g, so the heads sharing a key/value head add in head order.
// - Determinism: no float atomics anywhere. Every reduction (dot, the bias,
//   gain and position-embedding gradients, row statistics, the dwte scatter)
//   sums in pieces fixed by the shape and adds them in a fixed order
//   (gpu/kernels/reduce.cuh, embedding.cuh); dot sums in double. All work goes
//   to the default stream in order. So two runs give bit-identical results.
// - Memory: allocate() is cudaMalloc + zero; upload/download are synchronous
//   copies (download waits for the queued work). No allocation inside a step:
//   the scratch the kernels need is either passed in (attention's B·H·T·T) or
//   kept here — the dot's per-block sums (allocated at construction), the
//   column sums' per-chunk partials (grown when a larger size is asked, never
//   shrunk) and the RoPE tables (one per (T, d, θ), computed in double on the
//   host as the CPU does and uploaded at first use) — so only a model's first
//   step allocates.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "engine/backend.hpp"

namespace qkvlab::gpu {

class CudaBackend final : public engine::Backend<float> {
 public:
  // Throws std::runtime_error with device_status().description when no CUDA device can be used.
  CudaBackend();
  ~CudaBackend() override;

  engine::Device device() const override { return engine::Device::cuda; }
  std::string description() const override;

  void* allocate(std::size_t bytes) override;
  // allocate() calls so far (the backend's own scratch included): a step after a shape's first
  // allocates nothing (tests/lm_gpu_test.cpp checks it).
  std::size_t allocations() const { return allocations_; }
  void release(void* p) override;
  void upload(void* dst, const void* host, std::size_t bytes) override;
  void download(void* host, const void* src, std::size_t bytes) override;
  void synchronize() override;

  void axpby(int rows, int cols, float alpha, const float* X, int ldx, float beta, float* Y, int ldy) override;
  void fill(std::size_t count, float value, float* X) override;
  double dot(std::size_t count, const float* X, const float* Y) override;
  void gemm(engine::Trans ta, engine::Trans tb, int m, int n, int k, float alpha, const float* A, int lda,
            std::int64_t stride_a, const float* B, int ldb, std::int64_t stride_b, float beta, float* C, int ldc,
            std::int64_t stride_c, int batch) override;
  void widen(int rows, int cols, const std::uint16_t* W, int ldw, const std::int32_t* rows_of, engine::WeightType type,
             float* Y, int ldy) override;
  void add_bias(int rows, int cols, const float* b, float* Y, int ldy) override;
  void bias_backward(int rows, int cols, const float* dY, int ldy, float* db) override;
  void embedding_forward(int B, int T, int C, const std::int32_t* ids, const float* wte, const float* wpe,
                         float* out) override;
  void embedding_backward(int B, int T, int C, const std::int32_t* ids, const float* dout, float* dwte,
                          float* dwpe) override;
  void norm_forward(int N, int C, engine::Centering centering, float eps, const float* X, const float* gain,
                    const float* bias, float* out, float* mean, float* rstd) override;
  void norm_backward(int N, int C, engine::Centering centering, const float* X, const float* gain, const float* mean,
                     const float* rstd, const float* dout, float* dX, float* dgain, float* dbias) override;
  void gelu_forward(std::size_t count, engine::GeluForm form, const float* X, float* Y) override;
  void gelu_backward(std::size_t count, engine::GeluForm form, const float* X, const float* dY, float* dX) override;
  void relu_forward(std::size_t count, const float* X, float* Y) override;
  void relu_backward(std::size_t count, const float* X, const float* dY, float* dX) override;
  void swiglu_forward(std::size_t count, const float* G, const float* U, float* Y) override;
  void swiglu_backward(std::size_t count, const float* G, const float* U, const float* dY, float* dG,
                       float* dU) override;
  void rope(int B, int T, int past, int heads, int d, int ld, const engine::RopeFrequencies& f, bool inverse,
            float* X) override;
  void attention_forward(const engine::AttentionShape& s, float scale, const float* q, engine::KvHeads<float> k,
                         engine::KvHeads<float> v, float* pattern, float* z) override;
  void attention_reduce(const engine::AttentionShape& s, float scale, const float* q, engine::KvHeads<float> k,
                        engine::KvHeads<float> v, int block, float* z, const engine::PatternSums& sums) override;
  void attention_backward(const engine::AttentionShape& s, float scale, const float* q, const float* k,
                          const float* v, const float* pattern, const float* dz, float* dq, float* dk, float* dv,
                          float* scratch) override;
  void state_rows(const engine::StateShape& s, const float* X, const engine::RowSums& out) override;
  void state_gram(int B, int T, int C, const float* X, double alpha, double* out) override;
  void cross_entropy(int N, int V, const float* logits, const std::int32_t* targets, float* loss, float scale,
                     float* dlogits) override;
  void adamw(std::size_t count, const AdamW& a, bool decay, float* theta, const float* grad, float* m,
             float* v) override;

 private:
  double* column_partials(std::size_t count);  // kept scratch of at least `count` doubles
  const float* rope_table(int T, int d, const engine::RopeFrequencies& f);

  double* dot_partials_ = nullptr;             // kernels::kDotBlocks per-block sums
  std::vector<double> dot_host_;               // their host copy
  double* column_partials_ = nullptr;          // the column sums' per-chunk partials
  std::size_t column_capacity_ = 0;
  float* pattern_block(std::size_t count);     // kept scratch of at least `count` floats
  float* pattern_block_ = nullptr;             // attention_reduce's B·H blocks of pattern rows
  std::size_t pattern_block_capacity_ = 0;
  double* state_scratch(std::size_t count);    // kept scratch of at least `count` doubles
  double* state_scratch_ = nullptr;            // state_rows' norms, state_gram's rows in double
  std::size_t state_capacity_ = 0;
  void float_gemm(engine::Trans ta, engine::Trans tb, int m, int n, int k, float alpha, const float* A, int lda,
                  std::int64_t stride_a, const float* B, int ldb, std::int64_t stride_b, float beta, float* C, int ldc,
                  std::int64_t stride_c, int batch);
  std::uint16_t* bf16_a_ = nullptr;            // a bf16 gemm's operands rounded (kept scratch)
  std::uint16_t* bf16_b_ = nullptr;
  std::size_t bf16_a_capacity_ = 0, bf16_b_capacity_ = 0;
  std::map<std::tuple<int, int, std::tuple<double, double, double, double, double>>, float*> rope_tables_;
  std::size_t allocations_ = 0;
};

}  // namespace qkvlab::gpu
