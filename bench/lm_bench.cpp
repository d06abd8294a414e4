// Training and evaluation throughput of the language model (lm/model.hpp) on
// the CPU backend: tokens per second of a whole training step (forward,
// backward, clipping, AdamW; float32) and of an evaluation forward pass, as
// the median of repeated steps after warm-up steps. The step's matrix flops
// (2·m·n·k summed over its products) over the measured rate of one large
// OpenBLAS sgemm on the same threads gives the floor the step is compared with.
//
//   lm_bench [--family gpt2|llama] [--layers L] [--d D] [--heads H] [--seq T] [--batch B]
//            [--vocab V] [--threads N] [--steps S] [--warmup W] [--dtype f32|bf16] [--eval]
// Prints one JSON object; exit status 2, in one line on stderr, on a bad option (unknown, without
// a value, a value that is not an integer in its range: sizes and --steps positive, --warmup at
// least 0, --threads 0 to 256; sizes that make no model), 1 when a step's loss is not finite
// (nothing printed on stdout).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/lm_bench_common.hpp"
#include "engine/cpu_backend.hpp"

using namespace qkvlab;

namespace {

using bench::median;
using bench::now_seconds;

// Matrix flops of one training step (forward + backward = 3 × forward products).
double step_flops(const lm::Config& c, int B, int T, bool train) {
  const double N = double(B) * T, d = c.d, r = c.ffn, q = double(c.heads) * c.head_dim;
  const double kv = double(c.kv_heads) * c.head_dim;
  double per_layer = 2 * N * d * (q + 2 * kv) + 2 * N * q * d;       // projections
  per_layer += (c.family == lm::Family::gpt2 ? 2 : 3) * 2 * N * d * r;  // MLP
  per_layer += 2 * 2 * double(B) * c.heads * double(T) * T * c.head_dim;  // Q Kᵀ and P V, full T×T
  const double forward = c.layers * per_layer + 2 * N * d * c.vocab;
  return train ? 3 * forward : forward;
}

double sgemm_rate(engine::CpuBackend<float>& be) {
  const int n = 1024;
  engine::Buffer<float> A(be, n * n), B(be, n * n), C(be, n * n);
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) {
    const double t0 = now_seconds();
    be.gemm(engine::Trans::none, engine::Trans::none, n, n, n, 1.f, A.data(), n, 0, B.data(), n, 0, 0.f, C.data(), n,
            0, 1);
    t.push_back(now_seconds() - t0);
  }
  return 2.0 * n * n * n / median(t);
}

}  // namespace

int main(int argc, char** argv) {
  const auto options = bench::parse_lm_bench_options(argc, argv, "lm_bench", {});
  if (!options) return 2;
  const bench::LmBenchOptions& o = *options;
  engine::CpuBackend<float> be(o.threads);
  be.set_product_type(o.products);
  bench::LmBenchRun run(o, be);
  const std::vector<double> times = run.time_steps([] {});
  if (run.diverged("lm_bench")) return 1;
  const lm::Config& c = run.model.config();
  const double step = bench::median(times), flops = step_flops(c, o.B, o.T, !o.eval), rate = sgemm_rate(be);
  std::printf(
      "{\"mode\": \"%s\", \"products\": \"%s\", \"family\": \"%s\", \"layers\": %d, \"d\": %d, \"heads\": %d, \"seq\": "
      "%d, \"batch\": %d, "
      "\"vocab\": %d, \"threads\": %d, \"step_seconds_median\": %.6f, \"step_seconds_min\": %.6f, "
      "\"tokens_per_second\": %.1f, \"step_gflop\": %.3f, \"sgemm_gflops\": %.1f, \"floor_seconds\": %.6f, "
      "\"ratio_to_floor\": %.2f}\n",
      o.eval ? "eval" : "train", engine::weight_type_name(o.products), lm::to_string(o.family).c_str(), o.L, o.d, o.H,
      o.T, o.B, o.V, be.threads(), step, *std::min_element(times.begin(), times.end()), double(o.B) * o.T / step,
      flops / 1e9, rate / 1e9, flops / rate, step / (flops / rate));
  return 0;
}
