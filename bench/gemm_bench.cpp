// Dense products C = A B (square, size from the argument) through Eigen. The
// same source builds twice: gemm_bench (Eigen's own kernels) and
// gemm_bench_blas (EIGEN_USE_BLAS: Eigen hands large products to OpenBLAS).
// Rates are reported as FLOP/s counting 2 n³ flops per product.
#include <Eigen/Dense>
#include <benchmark/benchmark.h>

namespace {

template <class S> void BM_gemm(benchmark::State& state) {
  const Eigen::Index n = state.range(0);
  using M = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;
  const M A = M::Random(n, n), B = M::Random(n, n);
  M C(n, n);
  for (auto _ : state) {
    C.noalias() = A * B;
    benchmark::DoNotOptimize(C.data());
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * double(n) * n * n, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_TEMPLATE(BM_gemm, float)->Arg(64)->Arg(256)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_gemm, double)->Arg(64)->Arg(256)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
