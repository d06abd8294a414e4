// The CPU backend: engine/backend.hpp's kernels on host memory, float or
// double, on `threads` threads of core/parallel's pool. Products go through
// engine/blas.hpp's gemm_serial (OpenBLAS on one thread per call), one fixed
// tile of C per job, so every entry is summed the same way at any thread
// count; the other kernels split their rows over the threads and reduce
// columns in row order (engine/kernels/*.hpp).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "engine/backend.hpp"

namespace qkvlab::engine {

template <class S>
class CpuBackend final : public Backend<S> {
 public:
  // threads ≤ 0: one per hardware thread (core/parallel.hpp's worker_count).
  explicit CpuBackend(int threads = 0);

  Device device() const override { return Device::cpu; }
  std::string description() const override;
  int threads() const { return threads_; }

  void* allocate(std::size_t bytes) override;
  void release(void* p) override;
  void upload(void* dst, const void* host, std::size_t bytes) override;
  void download(void* host, const void* src, std::size_t bytes) override;
  void synchronize() override {}

  void axpby(int rows, int cols, S alpha, const S* X, int ldx, S beta, S* Y, int ldy) override;
  void fill(std::size_t count, S value, S* X) override;
  double dot(std::size_t count, const S* X, const S* Y) override;
  void gemm(Trans ta, Trans tb, int m, int n, int k, S alpha, const S* A, int lda, std::int64_t stride_a, const S* B,
            int ldb, std::int64_t stride_b, S beta, S* C, int ldc, std::int64_t stride_c, int batch) override;
  void widen(int rows, int cols, const std::uint16_t* W, int ldw, const std::int32_t* rows_of, WeightType type, S* Y,
             int ldy) override;
  void add_bias(int rows, int cols, const S* b, S* Y, int ldy) override;
  void bias_backward(int rows, int cols, const S* dY, int ldy, S* db) override;
  void embedding_forward(int B, int T_, int C, const std::int32_t* ids, const S* wte, const S* wpe,
                         S* out) override;
  void embedding_backward(int B, int T_, int C, const std::int32_t* ids, const S* dout, S* dwte,
                          S* dwpe) override;
  void norm_forward(int N, int C, Centering centering, S eps, const S* X, const S* gain, const S* bias, S* out,
                    S* mean, S* rstd) override;
  void norm_backward(int N, int C, Centering centering, const S* X, const S* gain, const S* mean, const S* rstd,
                     const S* dout, S* dX, S* dgain, S* dbias) override;
  void gelu_forward(std::size_t count, GeluForm form, const S* X, S* Y) override;
  void gelu_backward(std::size_t count, GeluForm form, const S* X, const S* dY, S* dX) override;
  void relu_forward(std::size_t count, const S* X, S* Y) override;
  void relu_backward(std::size_t count, const S* X, const S* dY, S* dX) override;
  void swiglu_forward(std::size_t count, const S* G, const S* U, S* Y) override;
  void swiglu_backward(std::size_t count, const S* G, const S* U, const S* dY, S* dG, S* dU) override;
  void rope(int B, int T_, int past, int heads, int d, int ld, const RopeFrequencies& f, bool inverse,
            S* X) override;
  void attention_forward(const AttentionShape& s, S scale, const S* q, KvHeads<S> k, KvHeads<S> v, S* pattern,
                         S* z) override;
  void attention_reduce(const AttentionShape& s, S scale, const S* q, KvHeads<S> k, KvHeads<S> v, int block, S* z,
                        const PatternSums& sums) override;
  void attention_backward(const AttentionShape& s, S scale, const S* q, const S* k, const S* v, const S* pattern,
                          const S* dz, S* dq, S* dk, S* dv, S* scratch) override;
  void state_rows(const StateShape& s, const S* X, const RowSums& out) override;
  void state_gram(int B, int T_, int C, const S* X, double alpha, double* out) override;
  void cross_entropy(int N, int V, const S* logits, const std::int32_t* targets, S* loss, S scale,
                     S* dlogits) override;
  void adamw(std::size_t count, const typename Backend<S>::AdamW& a, bool decay, S* theta, const S* grad, S* m,
             S* v) override;

 private:
  // f(begin, end) over [0, count) in pieces of at least `grain`, on the pool.
  template <class F>
  void split(std::size_t count, std::size_t grain, F&& f);
  const S* rope_table(int T_, int d, const RopeFrequencies& f);

  int threads_;
  std::map<std::tuple<int, int, std::tuple<double, double, double, double, double>>, std::vector<S>> rope_tables_;
  std::mutex mapped_mutex_;
  std::unordered_map<void*, std::size_t> mapped_;  // blocks from mmap, by address, with their sizes
};

extern template class CpuBackend<float>;
extern template class CpuBackend<double>;

}  // namespace qkvlab::engine
