// What the language-model benchmarks (lm_bench on the CPU, lm_gpu_bench on a
// CUDA device) share: their options, the model's random batch and one timed
// training or evaluation step (zero gradients, forward, backward, clipping,
// AdamW; float32). A step whose loss is not finite is a failure: the benchmark
// says which and exits 1 (a rate of a diverged step measures nothing).
#pragma once

#include <algorithm>
#include <chrono>
#include <climits>
#include <iterator>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cli/validators.hpp"
#include "core/errors.hpp"
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

// An integer option: its field and range (the sizes and --steps positive, --threads 0 to
// max_threads: 0 is all cores, --warmup at least 0).
struct LmBenchInteger {
  const char* option;
  int LmBenchOptions::*field;
  int lo, hi;
};
inline constexpr LmBenchInteger kLmBenchIntegers[] = {
    {"--layers", &LmBenchOptions::L, 1, INT_MAX},  {"--d", &LmBenchOptions::d, 1, INT_MAX},
    {"--heads", &LmBenchOptions::H, 1, INT_MAX},   {"--seq", &LmBenchOptions::T, 1, INT_MAX},
    {"--batch", &LmBenchOptions::B, 1, INT_MAX},   {"--vocab", &LmBenchOptions::V, 1, INT_MAX},
    {"--threads", &LmBenchOptions::threads, 0, max_threads},
    {"--steps", &LmBenchOptions::steps, 1, INT_MAX}, {"--warmup", &LmBenchOptions::warmup, 0, INT_MAX}};

// Sets option `a` to `value` (nullptr: none followed it); the reason it cannot (empty when it did), in
// qkvlab's words (cli/validators.hpp: the range and the value; a whole number past the bound is too large).
inline std::string set_lm_bench_option(LmBenchOptions& o, const std::string& a, const char* given) {
  const bool integer = std::any_of(std::begin(kLmBenchIntegers), std::end(kLmBenchIntegers),
                                   [&](const LmBenchInteger& n) { return a == n.option; });
  if (!integer && a != "--family" && a != "--dtype") return "unknown option " + a;
  if (!given) return a + " needs a value";
  const std::string value = given;
  for (const LmBenchInteger& n : kLmBenchIntegers) {
    if (a != n.option) continue;
    const std::string range = n.hi != INT_MAX ? "an integer from " + std::to_string(n.lo) + " to " + std::to_string(n.hi)
                              : n.lo == 1    ? "a positive integer"
                                             : "an integer of at least " + std::to_string(n.lo);
    const std::string why = cli::integer_message(value, n.lo, n.hi, range);
    if (why.empty()) o.*n.field = std::stoi(value);  // in range: stoi cannot throw
    return why.empty() ? "" : a + " " + why;
  }
  if (a == "--family") {
    try {
      o.family = lm::parse_family(value);
    } catch (const UsageError& e) {
      return e.what();
    }
  } else {  // --dtype
    if (value != "f32" && value != "bf16") return "--dtype takes f32 or bf16";
    o.products = value == "bf16" ? engine::WeightType::bf16 : engine::WeightType::f32;
  }
  return "";
}

// --family --layers --d --heads --seq --batch --vocab --threads --steps --warmup --dtype --eval;
// nullopt (after one line on stderr) on an unknown option, a missing value, a value that is not an
// integer in the option's range or a model the sizes cannot make (lm::validate: a llama's odd head
// width, ...). The caller exits 2 then.
inline std::optional<LmBenchOptions> parse_lm_bench_options(int argc, char** argv, const char* name,
                                                            LmBenchOptions o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--eval") {
      o.eval = true;
      continue;
    }
    const std::string why = set_lm_bench_option(o, a, i + 1 < argc ? argv[i + 1] : nullptr);
    ++i;
    if (!why.empty()) {
      std::fprintf(stderr, "%s: %s\n", name, why.c_str());
      return std::nullopt;
    }
  }
  try {
    lm::validate(lm::family_defaults(o.family, o.L, o.d, o.H, o.V, std::max(o.T, 1024)));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
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
