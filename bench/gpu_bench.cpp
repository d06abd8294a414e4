// GPU rates (built only with nvcc; `cmake --build build --target benchmarks`):
// - cuBLAS sgemm / dgemm, C = A B square at n = 1024, 2048, 4096 (2n³ flops);
// - cuBLAS strided-batched products of attention's shape (batch of Q Kᵀ, 2·batch·m·n·k flops);
// - one training step of qwe.exp8.4's skip MLP (synthetic/transfer.hpp's SkipMlp on the CUDA
//   backend; d = 64, r = 256, batch 65,536): upload of X, target, forward, loss, backward,
//   clipping, AdamW, as `qkvlab transfer --device cuda` runs it (wall clock, ending with the
//   loss's download; the sampling of X on the host is not included).
// cuBLAS time is measured with CUDA events (gpu/timer.hpp) and reported as manual time.
// The language model's training throughput is bench/lm_gpu_bench.cpp.
// Without a CUDA device it prints "no CUDA device: <reason>" and exits 0.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/rng.hpp"
#include "gpu/device.hpp"
#include "gpu/device_buffer.hpp"
#include "gpu/backend.hpp"
#include "gpu/ops.hpp"
#include "gpu/timer.hpp"
#include "synthetic/transfer.hpp"

namespace {

using namespace qkvlab;

template <class T>
gpu::DeviceBuffer<T> random_buffer(std::size_t count, std::uint64_t stream) {
  Rng rng(2026, stream);
  const MatD values = rng.gaussian(Eigen::Index(count), 1);
  const std::vector<T> host(values.data(), values.data() + count);
  gpu::DeviceBuffer<T> buffer(count);
  buffer.upload(host.data(), count);
  return buffer;
}

template <class T>
void BM_cublas_gemm(benchmark::State& state) {
  const int n = int(state.range(0));
  const std::size_t size = std::size_t(n) * n;
  gpu::DeviceBuffer<T> A = random_buffer<T>(size, 1), B = random_buffer<T>(size, 2), C(size);
  gpu::PhaseTimer timer;
  gpu::gemm(gpu::Op::none, gpu::Op::none, n, n, n, T(1), A.data(), B.data(), T(0), C.data());  // warm-up
  for (auto _ : state) {
    timer.start();
    gpu::gemm(gpu::Op::none, gpu::Op::none, n, n, n, T(1), A.data(), B.data(), T(0), C.data());
    timer.mark("gemm");
    state.SetIterationTime(timer.total_ms() / 1e3);
  }
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * n * n * double(n), benchmark::Counter::kIsIterationInvariantRate);
}

// Arguments: batch, m = n (queries = keys), k (head width): the score products Q Kᵀ of `batch` heads.
template <class T>
void BM_cublas_gemm_strided_batched(benchmark::State& state) {
  const int batch = int(state.range(0)), n = int(state.range(1)), k = int(state.range(2));
  const std::int64_t stride_in = std::int64_t(n) * k, stride_out = std::int64_t(n) * n;
  gpu::DeviceBuffer<T> Q = random_buffer<T>(std::size_t(batch * stride_in), 1),
                       K = random_buffer<T>(std::size_t(batch * stride_in), 2), S(std::size_t(batch * stride_out));
  gpu::PhaseTimer timer;
  auto product = [&] {
    gpu::gemm_strided_batched(gpu::Op::none, gpu::Op::transpose, n, n, k, T(1), Q.data(), stride_in, K.data(),
                              stride_in, T(0), S.data(), stride_out, batch);
  };
  product();  // warm-up
  for (auto _ : state) {
    timer.start();
    product();
    timer.mark("batched gemm");
    state.SetIterationTime(timer.total_ms() / 1e3);
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * batch * n * double(n) * k, benchmark::Counter::kIsIterationInvariantRate);
}

// One training step of the skip MLP on the CUDA backend (SkipMlp::step returns the loss, so each
// step ends with a download: the wall clock measures the device's work).
void BM_skip_mlp_step(benchmark::State& state) {
  const int d = 64, batch = int(state.range(0));
  const auto backend = gpu::make_cuda_backend();
  transfer::TrainConfig config;
  config.batch = batch;
  transfer::SkipMlp model(*backend, transfer::draw_target(d, 2026), transfer::init_mlp(d, 2026), config);
  const transfer::MatF X = transfer::draw_inputs(d, batch, 2026, "gpu_bench/skip_mlp", 2);
  model.step(X, 1e-3);  // warm-up
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(model.step(X, 1e-3));
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.counters["samples/s"] = benchmark::Counter(double(batch), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_TEMPLATE(BM_cublas_gemm, float)->Arg(1024)->Arg(2048)->Arg(4096)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_cublas_gemm, double)->Arg(1024)->Arg(2048)->Arg(4096)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_cublas_gemm_strided_batched, float)
    ->Args({256, 512, 64})
    ->Args({64, 1024, 128})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_cublas_gemm_strided_batched, double)
    ->Args({256, 512, 64})
    ->Args({64, 1024, 128})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_skip_mlp_step)->Arg(65536)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  if (!qkvlab::gpu::device_status().available) {
    std::printf("no CUDA device: %s\n", qkvlab::gpu::device_status().description.c_str());
    return 0;
  }
  std::printf("device: %s\n", qkvlab::gpu::device_status().description.c_str());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
