// The training engine's speed (issue 4): its matrix products in float against
// the machine's measured peak, and one training step of qwe.exp8.4
// (synthetic/transfer.hpp) broken down by operation.
//
// - BM_peak_openblas: OpenBLAS sgemm / dgemm, n = 2048, on 2 threads (the
//   measured peak: the fastest dense product this machine does).
// - BM_product_{eigen,engine}: C = A B through Eigen's own kernels and
//   through engine::product (OpenBLAS when built with it), at the transfer
//   model's shapes (batch 4096 × d by d × 4d, and the backward products) and
//   at square n = 512, 1024, 2048; threads = the second argument.
// - BM_step_*: one step at d = 64, batch 4096 (row vectors X ∈ R^{4096×64},
//   W1 ∈ R^{64×256}, W2 ∈ R^{256×64}): data, target, and the whole step as
//   `qkvlab transfer` runs it (transfer::SkipMlp on the CPU backend); on one
//   thread (OpenBLAS, sampling and the backend), so that CPU time is each
//   part's whole work.
// FLOP/s count 2 m n k per product.
#include "engine/blas.hpp"
#include "engine/cpu_backend.hpp"
#include "engine/rng.hpp"
#include "synthetic/transfer.hpp"

#include <benchmark/benchmark.h>

namespace {

using namespace qkvlab;
using engine::Op;
using MatF = Mat<float>;

template <class S>
Mat<S> random(Eigen::Index rows, Eigen::Index cols) {
  Rng rng(1, "bench/" + std::to_string(rows) + "x" + std::to_string(cols));
  return rng.gaussian(rows, cols).cast<S>();
}

void flops(benchmark::State& state, double m, double n, double k) {
  state.counters["FLOP/s"] = benchmark::Counter(2 * m * n * k, benchmark::Counter::kIsIterationInvariantRate);
}

template <class S>
void BM_peak_openblas(benchmark::State& state) {
  const int n = 2048;
  engine::set_blas_threads(2);
  const Mat<S> A = random<S>(n, n), B = random<S>(n, n);
  for (auto _ : state) benchmark::DoNotOptimize(engine::product(A, Op::none, B, Op::none).data());
  flops(state, n, n, n);
  state.SetLabel(engine::blas_enabled() ? "OpenBLAS, 2 threads" : "no OpenBLAS: Eigen");
}
BENCHMARK_TEMPLATE(BM_peak_openblas, float)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_peak_openblas, double)->Unit(benchmark::kMillisecond)->UseRealTime();

// Args: m, k, n (C = A B with A m×k, B k×n), threads (engine only).
void BM_product_eigen(benchmark::State& state) {
  const MatF A = random<float>(state.range(0), state.range(1)), B = random<float>(state.range(1), state.range(2));
  MatF C(A.rows(), B.cols());
  for (auto _ : state) {
    C.noalias() = A * B;
    benchmark::DoNotOptimize(C.data());
  }
  flops(state, double(A.rows()), double(B.cols()), double(A.cols()));
}

void BM_product_engine(benchmark::State& state) {
  engine::set_blas_threads(int(state.range(3)));
  const MatF A = random<float>(state.range(0), state.range(1)), B = random<float>(state.range(1), state.range(2));
  for (auto _ : state) benchmark::DoNotOptimize(engine::product(A, Op::none, B, Op::none).data());
  flops(state, double(A.rows()), double(B.cols()), double(A.cols()));
}

void product_shapes(benchmark::internal::Benchmark* b, bool threads) {
  const int batch = 4096;
  for (int d : {16, 64, 256})
    for (auto [m, k, n] : {std::array<int, 3>{batch, d, 4 * d}, {batch, 4 * d, d}, {4 * d, batch, d}})
      for (int t : threads ? std::vector<int>{1, 2} : std::vector<int>{1}) b->Args({m, k, n, t});
  for (int n : {512, 1024, 2048})
    for (int t : threads ? std::vector<int>{1, 2} : std::vector<int>{1}) b->Args({n, n, n, t});
}
BENCHMARK(BM_product_eigen)->Apply([](auto* b) { product_shapes(b, false); })->Unit(benchmark::kMillisecond);
BENCHMARK(BM_product_engine)
    ->Apply([](auto* b) { product_shapes(b, true); })
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// One training step of the transfer model at d = 64, batch 4096.
struct Step {
  static constexpr int d = 64, batch = 4096;
  transfer::Target target = transfer::draw_target(d, 1);
  transfer::Mlp mlp = transfer::init_mlp(d, 1);
  MatF X = transfer::draw_inputs(d, batch, 1, "bench/x", 1);
  engine::CpuBackend<float> backend{1};
  transfer::SkipMlp model{backend, target, mlp, transfer::TrainConfig{}};
};

// One thread throughout, so that CPU time is the whole work of each part.
void setup_threads() { engine::set_blas_threads(1); }

void BM_step_draw_inputs(benchmark::State& state) {
  setup_threads();
  for (auto _ : state) benchmark::DoNotOptimize(transfer::draw_inputs(64, 4096, 1, "bench/x", 1).data());
}
void BM_step_target(benchmark::State& state) {
  setup_threads();
  Step s;
  for (auto _ : state) benchmark::DoNotOptimize(s.model.target(s.X).data());
}

BENCHMARK(BM_step_draw_inputs)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_step_target)->Unit(benchmark::kMillisecond)->UseRealTime();

// The whole step as run_transfer runs it: draw, then SkipMlp::step on the CPU backend (target,
// forward, loss, backward, clipping, AdamW).
void BM_step_whole(benchmark::State& state) {
  setup_threads();
  Step s;
  for (auto _ : state) {
    const MatF X = transfer::draw_inputs(Step::d, Step::batch, 1, "bench/x", 1);
    benchmark::DoNotOptimize(s.model.step(X, 1e-3));
  }
}
BENCHMARK(BM_step_whole)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
