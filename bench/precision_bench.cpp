// Cost of the building blocks of `qkvlab verify` at each precision: one MHA
// forward, one block forward with a GELU MLP (r = 4d), and a change of basis
// (LU inverse and κ estimate). These set the price of the multiprecision rung.
#include "core/block.hpp"
#include "core/linalg.hpp"

#include <benchmark/benchmark.h>

namespace {

using namespace qkvlab;

constexpr int d = 32, n = 16, heads = 4;

template <class S> void BM_mha(benchmark::State& state) {
  Rng rng(1, "bench");
  const auto w = random_attention<S>(rng, d, heads);
  const Mat<S> X = cast<S>(rng.gaussian(n, d));
  for (auto _ : state) benchmark::DoNotOptimize(mha<S>(X, w, Mask::causal));
}

template <class S> void BM_block(benchmark::State& state) {
  Rng rng(1, "bench");
  const auto b = random_block<S>(rng, d, heads, 4 * d);
  const Mat<S> X = cast<S>(rng.gaussian(n, d));
  for (auto _ : state) benchmark::DoNotOptimize(block_forward<S>(X, b, Skip::both, Mask::causal, MlpActivation::gelu));
}

template <class S> void BM_change_of_basis(benchmark::State& state) {
  Rng rng(1, "bench");
  const Mat<S> T = cast<S>(draw_basis(rng, d, 1.0));
  for (auto _ : state) benchmark::DoNotOptimize(change_of_basis<S>(T));
}

#define QKVLAB_PRECISIONS(BM)                                                               \
  BENCHMARK_TEMPLATE(BM, float)->Unit(benchmark::kMicrosecond);                              \
  BENCHMARK_TEMPLATE(BM, double)->Unit(benchmark::kMicrosecond);                             \
  BENCHMARK_TEMPLATE(BM, long double)->Unit(benchmark::kMicrosecond);                        \
  BENCHMARK_TEMPLATE(BM, mp50)->Unit(benchmark::kMicrosecond);

QKVLAB_PRECISIONS(BM_mha)
QKVLAB_PRECISIONS(BM_block)
QKVLAB_PRECISIONS(BM_change_of_basis)

}  // namespace

BENCHMARK_MAIN();
