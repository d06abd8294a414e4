// What the language-model benchmarks (lm_bench on the CPU, lm_gpu_bench on a
// CUDA device) share: their options, the model's random batch and one timed
// training or evaluation step (zero gradients, forward, backward, clipping,
// AdamW; float32). A step whose loss is not finite is a failure: the benchmark
// says which and exits 1 (a rate of a diverged step measures nothing).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "engine/optimizer.hpp"
#include "lm/model.hpp"

namespace qkvlab::bench {

struct LmBenchOptions {
  lm::Family family = lm::Family::gpt2;
  int L = 6, d = 128, H = 4, T = 128, B = 16, V = 4096, threads = 0, steps = 10, warmup = 3;
  bool eval = false;
  engine::WeightType products = engine::WeightType::f32;  // --dtype f32|bf16: Backend::set_product_type
};

// --family --layers --d --heads --seq --batch --vocab --threads --steps --warmup --dtype --eval;
// nullopt (after one line on stderr) on an unknown option, a missing value, --steps below 1 or
// --warmup below 0.
inline std::optional<LmBenchOptions> parse_lm_bench_options(int argc, char** argv, const char* name,
                                                            LmBenchOptions o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--eval") {
      o.eval = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value\n", name, a.c_str());
      return std::nullopt;
    }
    const char* value = argv[++i];
    if (a == "--family") o.family = lm::parse_family(value);
    else if (a == "--layers") o.L = std::stoi(value);
    else if (a == "--d") o.d = std::stoi(value);
    else if (a == "--heads") o.H = std::stoi(value);
    else if (a == "--seq") o.T = std::stoi(value);
    else if (a == "--batch") o.B = std::stoi(value);
    else if (a == "--vocab") o.V = std::stoi(value);
    else if (a == "--threads") o.threads = std::stoi(value);
    else if (a == "--steps") o.steps = std::stoi(value);
    else if (a == "--warmup") o.warmup = std::stoi(value);
    else if (a == "--dtype") {
      if (std::string(value) != "f32" && std::string(value) != "bf16") {
        std::fprintf(stderr, "%s: --dtype takes f32 or bf16\n", name);
        return std::nullopt;
      }
      o.products = std::string(value) == "bf16" ? engine::WeightType::bf16 : engine::WeightType::f32;
    } else {
      std::fprintf(stderr, "%s: unknown option %s\n", name, a.c_str());
      return std::nullopt;
    }
  }
  if (o.steps < 1 || o.warmup < 0) {
    std::fprintf(stderr, "%s: --steps must be at least 1 and --warmup at least 0 (got %d and %d)\n", name, o.steps,
                 o.warmup);
    return std::nullopt;
  }
  return o;
}

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {  // NaN for none
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A model with random tokens and targets, and its step.
struct LmBenchRun {
  const LmBenchOptions& o;
  engine::Backend<float>& be;
  lm::Model<float> model;
  engine::AdamWState<float> adamw;
  std::vector<std::int32_t> ids, targets;
  double loss = 0;            // the last step's mean loss
  int steps_run = 0;          // steps so far, warm-up and any instrumented step included
  int first_non_finite = 0;   // the first of them (1-based) whose loss was not finite; 0: none

  LmBenchRun(const LmBenchOptions& options, engine::Backend<float>& backend)
      : o(options), be(backend),
        model(lm::family_defaults(o.family, o.L, o.d, o.H, o.V, std::max(o.T, 1024)), backend),
        adamw(backend, model.parameters().layout.total()), ids(std::size_t(o.B) * o.T), targets(ids.size()) {
    model.initialize(1);
    Rng rng(1, "bench/tokens");
    for (auto& x : ids) x = rng.uniform_int(o.V);
    for (auto& x : targets) x = rng.uniform_int(o.V);
  }

  void step() {
    if (o.eval) {
      loss = model.forward(ids.data(), targets.data(), o.B, o.T, lm::Pass::eval).mean();
    } else {
      auto& p = model.parameters();
      be.fill(p.grads.size(), 0.f, p.grads.data());
      loss = model.forward(ids.data(), targets.data(), o.B, o.T, lm::Pass::train, 1.0 / double(o.B * o.T)).mean();
      model.backward();
      engine::clip_gradients(be, p, 1.0);
      adamw.step(be, p, {0.9, 0.95, 1e-8, 0.1}, 1e-3);
    }
    be.synchronize();
    ++steps_run;
    if (!std::isfinite(loss) && first_non_finite == 0) first_non_finite = steps_run;
  }

  // Seconds of each timed step after the warm-up steps; `before` runs ahead of each step.
  template <class F>
  std::vector<double> time_steps(F&& before) {
    std::vector<double> times;
    for (int s = 0; s < o.warmup + o.steps; ++s) {
      before();
      const double t0 = now_seconds();
      step();
      if (s >= o.warmup) times.push_back(now_seconds() - t0);
    }
    return times;
  }

  // Whether a step's loss was not finite, said on stderr (one line) when it was.
  bool diverged(const char* name) const {
    if (first_non_finite == 0) return false;
    std::fprintf(stderr, "%s: the loss of step %d of %d (warm-up included) is not finite: nothing is reported\n",
                 name, first_non_finite, steps_run);
    return true;
  }
};

}  // namespace qkvlab::bench
