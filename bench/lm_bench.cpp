// Training and evaluation throughput of the language model (lm/model.hpp) on
// the CPU backend: tokens per second of a whole training step (forward,
// backward, clipping, AdamW; float32) and of an evaluation forward pass, as
// the median of repeated steps after warm-up steps. The step's matrix flops
// (2·m·n·k summed over its products) over the measured rate of one large
// OpenBLAS sgemm on the same threads gives the floor the step is compared with.
//
//   lm_bench [--family gpt2|llama] [--layers L] [--d D] [--heads H] [--seq T] [--batch B]
//            [--vocab V] [--threads N] [--steps S] [--warmup W] [--eval]
// Prints one JSON object.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "engine/cpu_backend.hpp"
#include "engine/optimizer.hpp"
#include "lm/model.hpp"

using namespace qkvlab;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

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
    const double t0 = now();
    be.gemm(engine::Trans::none, engine::Trans::none, n, n, n, 1.f, A.data(), n, 0, B.data(), n, 0, 0.f, C.data(), n,
            0, 1);
    t.push_back(now() - t0);
  }
  return 2.0 * n * n * n / median(t);
}

}  // namespace

int main(int argc, char** argv) {
  lm::Family family = lm::Family::gpt2;
  int L = 6, d = 128, H = 4, T = 128, B = 16, V = 4096, threads = 0, steps = 10, warmup = 3;
  bool eval = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return std::stoi(argv[++i]); };
    if (a == "--family") family = lm::parse_family(argv[++i]);
    else if (a == "--layers") L = next();
    else if (a == "--d") d = next();
    else if (a == "--heads") H = next();
    else if (a == "--seq") T = next();
    else if (a == "--batch") B = next();
    else if (a == "--vocab") V = next();
    else if (a == "--threads") threads = next();
    else if (a == "--steps") steps = next();
    else if (a == "--warmup") warmup = next();
    else if (a == "--eval") eval = true;
    else {
      std::fprintf(stderr, "lm_bench: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  lm::Config c = lm::family_defaults(family, L, d, H, V, std::max(T, 1024));
  engine::CpuBackend<float> be(threads);
  lm::Model<float> model(c, be);
  model.initialize(1);
  engine::AdamWState<float> adamw(be, model.parameters().layout.total());
  std::vector<std::int32_t> ids(std::size_t(B) * T), targets(ids.size());
  Rng rng(1, "bench/tokens");
  for (auto& x : ids) x = rng.uniform_int(V);
  for (auto& x : targets) x = rng.uniform_int(V);
  std::vector<double> times;
  for (int s = 0; s < warmup + steps; ++s) {
    const double t0 = now();
    if (eval) {
      model.forward(ids.data(), targets.data(), B, T, lm::Pass::eval);
    } else {
      auto& p = model.parameters();
      be.fill(p.grads.size(), 0.f, p.grads.data());
      model.forward(ids.data(), targets.data(), B, T, lm::Pass::train, 1.0 / double(B * T));
      model.backward();
      engine::clip_gradients(be, p, 1.0);
      adamw.step(be, p, {0.9, 0.95, 1e-8, 0.1}, 1e-3);
    }
    if (s >= warmup) times.push_back(now() - t0);
  }
  const double step = median(times), flops = step_flops(c, B, T, !eval), rate = sgemm_rate(be);
  std::printf(
      "{\"mode\": \"%s\", \"family\": \"%s\", \"layers\": %d, \"d\": %d, \"heads\": %d, \"seq\": %d, \"batch\": %d, "
      "\"vocab\": %d, \"threads\": %d, \"step_seconds_median\": %.6f, \"step_seconds_min\": %.6f, "
      "\"tokens_per_second\": %.1f, \"step_gflop\": %.3f, \"sgemm_gflops\": %.1f, \"floor_seconds\": %.6f, "
      "\"ratio_to_floor\": %.2f}\n",
      eval ? "eval" : "train", lm::to_string(family).c_str(), L, d, H, T, B, V, be.threads(), step,
      *std::min_element(times.begin(), times.end()), double(B) * T / step, flops / 1e9, rate / 1e9, flops / rate,
      step / (flops / rate));
  return 0;
}
