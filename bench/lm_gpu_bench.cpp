// Training throughput of the language model (lm/model.hpp) on the CUDA backend
// (gpu/cuda_backend.hpp), by default GPT-2 124M: L = 12, d = 768, H = 12,
// T = 1024, V = 50257, tied head, biases, GELU (tanh form), float32 with TF32
// off; --dtype bf16 rounds the products' operands to bf16 (engine/backend.hpp's
// product type: cuBLAS's bf16 GEMM, float32 sums; lm train --dtype bf16). A
// training step is the whole of one: zero the gradients, forward, backward,
// clip at norm 1, AdamW.
//
// Reported (one JSON object):
// - tokens_per_second: B·T over the median wall-clock step (after warm-up
//   steps; each step ends with a device synchronization);
// - products: f32 or bf16 (--dtype);
// - sgemm_peak_tflops: the measured cuBLAS rate of the backend's own gemm on a
//   4096³ float product at that product type (the best of 10 after warm-up, CUDA events);
// - product_share_of_peak: the rate the step's products reach, Σ 2·m·n·k over
//   the time spent in them (a second, instrumented step timing every gemm with
//   CUDA events: gemm_ms, other_ms), divided by that peak;
// - step_share_of_peak: the same flops over the whole median step, divided by
//   the peak (the share of the step's time a perfect product engine would need).
//
//   lm_gpu_bench [--family gpt2|llama] [--layers L] [--d D] [--heads H] [--seq T] [--batch B]
//                [--vocab V] [--steps S] [--warmup W] [--dtype f32|bf16]
// Without a CUDA device it prints "no CUDA device: <reason>" and exits 0 (bench/gpu_suite.sh counts
// that as a failure). Exit status 2 on a bad option (--steps below 1 too), 1 when a step's loss is
// not finite (nothing printed on stdout).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/lm_bench_common.hpp"
#include "gpu/backend.hpp"
#include "gpu/device.hpp"
#include "gpu/timer.hpp"

using namespace qkvlab;

namespace {

using engine::Backend;

using bench::median;

// A backend that forwards every call to another and, when timing, brackets each gemm with
// CUDA events (phases "other" and "gemm") and counts its flops.
class ProductTimer final : public Backend<float> {
 public:
  explicit ProductTimer(Backend<float>& inner) : b_(inner) {}
  bool timing = false;
  double flops = 0;  // Σ 2·m·n·k·batch of the gemms seen
  gpu::PhaseTimer timer;

  engine::Device device() const override { return b_.device(); }
  std::string description() const override { return b_.description(); }
  void* allocate(std::size_t n) override { return b_.allocate(n); }
  void release(void* p) override { b_.release(p); }
  void upload(void* d, const void* h, std::size_t n) override { b_.upload(d, h, n); }
  void download(void* h, const void* s, std::size_t n) override { b_.download(h, s, n); }
  void synchronize() override { b_.synchronize(); }
  void axpby(int r, int c, float a, const float* X, int lx, float b, float* Y, int ly) override {
    b_.axpby(r, c, a, X, lx, b, Y, ly);
  }
  void fill(std::size_t n, float v, float* X) override { b_.fill(n, v, X); }
  double dot(std::size_t n, const float* X, const float* Y) override { return b_.dot(n, X, Y); }
  void gemm(engine::Trans ta, engine::Trans tb, int m, int n, int k, float alpha, const float* A, int lda,
            std::int64_t sa, const float* B, int ldb, std::int64_t sb, float beta, float* C, int ldc, std::int64_t sc,
            int batch) override {
    if (timing) timer.mark("other");
    b_.gemm(ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
    if (timing) timer.mark("gemm");
    flops += 2.0 * m * n * double(k) * batch;
  }
  void widen(int r, int c, const std::uint16_t* W, int lw, const std::int32_t* rows_of, engine::WeightType type,
             float* Y, int ly) override {
    b_.widen(r, c, W, lw, rows_of, type, Y, ly);
  }
  void add_bias(int r, int c, const float* bias, float* Y, int ly) override { b_.add_bias(r, c, bias, Y, ly); }
  void bias_backward(int r, int c, const float* dY, int ly, float* db) override { b_.bias_backward(r, c, dY, ly, db); }
  void embedding_forward(int B, int T, int C, const std::int32_t* ids, const float* wte, const float* wpe,
                         float* out) override {
    b_.embedding_forward(B, T, C, ids, wte, wpe, out);
  }
  void embedding_backward(int B, int T, int C, const std::int32_t* ids, const float* dout, float* dwte,
                          float* dwpe) override {
    b_.embedding_backward(B, T, C, ids, dout, dwte, dwpe);
  }
  void norm_forward(int N, int C, engine::Centering ce, float eps, const float* X, const float* g, const float* bias,
                    float* out, float* mean, float* rstd) override {
    b_.norm_forward(N, C, ce, eps, X, g, bias, out, mean, rstd);
  }
  void norm_backward(int N, int C, engine::Centering ce, const float* X, const float* g, const float* mean,
                     const float* rstd, const float* dout, float* dX, float* dg, float* db) override {
    b_.norm_backward(N, C, ce, X, g, mean, rstd, dout, dX, dg, db);
  }
  void gelu_forward(std::size_t n, engine::GeluForm f, const float* X, float* Y) override { b_.gelu_forward(n, f, X, Y); }
  void gelu_backward(std::size_t n, engine::GeluForm f, const float* X, const float* dY, float* dX) override {
    b_.gelu_backward(n, f, X, dY, dX);
  }
  void relu_forward(std::size_t n, const float* X, float* Y) override { b_.relu_forward(n, X, Y); }
  void relu_backward(std::size_t n, const float* X, const float* dY, float* dX) override { b_.relu_backward(n, X, dY, dX); }
  void swiglu_forward(std::size_t n, const float* G, const float* U, float* Y) override { b_.swiglu_forward(n, G, U, Y); }
  void swiglu_backward(std::size_t n, const float* G, const float* U, const float* dY, float* dG, float* dU) override {
    b_.swiglu_backward(n, G, U, dY, dG, dU);
  }
  void rope(int B, int T, int past, int h, int d, int ld, const engine::RopeFrequencies& f, bool inverse,
            float* X) override {
    b_.rope(B, T, past, h, d, ld, f, inverse, X);
  }
  void attention_forward(const engine::AttentionShape& s, float scale, const float* q, engine::KvHeads<float> k,
                         engine::KvHeads<float> v, float* p, float* z) override {
    b_.attention_forward(s, scale, q, k, v, p, z);
  }
  void attention_reduce(const engine::AttentionShape& s, float scale, const float* q, engine::KvHeads<float> k,
                        engine::KvHeads<float> v, int block, float* z, const engine::PatternSums& sums) override {
    b_.attention_reduce(s, scale, q, k, v, block, z, sums);
  }
  void attention_backward(const engine::AttentionShape& s, float scale, const float* q, const float* k,
                          const float* v, const float* p, const float* dz, float* dq, float* dk, float* dv,
                          float* scratch) override {
    b_.attention_backward(s, scale, q, k, v, p, dz, dq, dk, dv, scratch);
  }
  void state_rows(const engine::StateShape& s, const float* X, const engine::RowSums& out) override {
    b_.state_rows(s, X, out);
  }
  void state_gram(int B, int T, int C, const float* X, double alpha, double* out) override {
    b_.state_gram(B, T, C, X, alpha, out);
  }
  void cross_entropy(int N, int V, const float* logits, const std::int32_t* t, float* loss, float scale,
                     float* dlogits) override {
    b_.cross_entropy(N, V, logits, t, loss, scale, dlogits);
  }
  void adamw(std::size_t n, const AdamW& a, bool decay, float* theta, const float* g, float* m, float* v) override {
    b_.adamw(n, a, decay, theta, g, m, v);
  }

 private:
  Backend<float>& b_;
};

// The best of 10 timings of C = A B, n = 4096, through the backend's gemm (float, TF32 off).
double sgemm_peak(Backend<float>& be) {
  const int n = 4096;
  engine::Buffer<float> A(be, std::size_t(n) * n), B(be, std::size_t(n) * n), C(be, std::size_t(n) * n);
  auto product = [&] {
    be.gemm(engine::Trans::none, engine::Trans::none, n, n, n, 1.f, A.data(), n, 0, B.data(), n, 0, 0.f, C.data(), n,
            0, 1);
  };
  product();
  gpu::PhaseTimer timer;
  double best = 1e30;
  for (int i = 0; i < 10; ++i) {
    timer.start();
    product();
    timer.mark("gemm");
    best = std::min(best, timer.total_ms() / 1e3);
  }
  return 2.0 * n * n * double(n) / best;
}

}  // namespace

int main(int argc, char** argv) {
  if (!gpu::device_status().available) {
    std::printf("no CUDA device: %s\n", gpu::device_status().description.c_str());
    return 0;
  }
  const auto options = bench::parse_lm_bench_options(argc, argv, "lm_gpu_bench",
                                                     {lm::Family::gpt2, 12, 768, 12, 1024, 8, 50257, 0, 10, 3, false});
  if (!options) return 2;
  const bench::LmBenchOptions& o = *options;
  const auto cuda = gpu::make_cuda_backend();
  cuda->set_product_type(o.products);  // the timer forwards each gemm to it: the peak too is at that type
  ProductTimer be(*cuda);
  bench::LmBenchRun run(o, be);
  const std::vector<double> times = run.time_steps([&] { be.flops = 0; });
  const double flops = be.flops;
  be.timing = true;  // one instrumented step: time in products and around them
  be.timer.start();
  run.step();
  be.timer.mark("other");
  if (run.diverged("lm_gpu_bench")) return 1;
  double gemm_ms = 0, other_ms = 0;
  for (const auto& [phase, ms] : be.timer.phases()) (phase == "gemm" ? gemm_ms : other_ms) += ms;
  be.timing = false;
  const double peak = sgemm_peak(be), t = median(times);
  std::printf(
      "{\"device\": \"%s\", \"mode\": \"%s\", \"products\": \"%s\", \"family\": \"%s\", \"layers\": %d, \"d\": %d, "
      "\"heads\": %d, "
      "\"seq\": %d, \"batch\": %d, \"vocab\": %d, \"parameters\": %zu, \"step_seconds_median\": %.6f, "
      "\"step_seconds_min\": %.6f, \"tokens_per_second\": %.1f, \"step_matmul_tflop\": %.4f, "
      "\"sgemm_peak_tflops\": %.2f, \"instrumented_gemm_ms\": %.3f, \"instrumented_other_ms\": %.3f, "
      "\"product_share_of_peak\": %.3f, \"step_share_of_peak\": %.3f}\n",
      gpu::device_status().description.c_str(), o.eval ? "eval" : "train", engine::weight_type_name(o.products),
      lm::to_string(o.family).c_str(), o.L, o.d, o.H, o.T, o.B, o.V, run.model.parameters().layout.count(), t,
      *std::min_element(times.begin(), times.end()), double(o.B) * o.T / t, flops / 1e12, peak / 1e12, gemm_ms,
      other_ms, (flops / (gemm_ms / 1e3)) / peak, (flops / t) / peak);
  return 0;
}
