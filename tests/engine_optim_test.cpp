// Seeded random numbers, the one AdamW (engine/optimizer.hpp over engine/kernels/adamw.hpp) on the
// CPU backend against hand computation, its state's file format (engine/adamw_state.hpp), the
// learning-rate schedule and clipping by the global norm.
// Training with them is tested by the models that use them (transfer_test, absorb_fit_test,
// icl_train_test, lm_train_test: loss falls, bit-identical resumption from checkpoints).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <vector>

#include "engine/adamw_state.hpp"
#include "engine/cpu_backend.hpp"
#include "engine/optimizer.hpp"
#include "engine/rng.hpp"
#include "engine/schedule.hpp"

namespace {

using namespace qkvlab::engine;
using MatD = Mat<double>;

// --- Random numbers ---------------------------------------------------------

TEST(EngineRng, SplitMix64MatchesReferenceValues) {
  // Reference outputs of Vigna's splitmix64.c for seed 1234567.
  std::uint64_t state = 1234567;
  for (std::uint64_t want : {6457827717110365317ULL, 3203168211198807973ULL, 9817491932198370423ULL,
                             4593380528125082431ULL, 16408922859458223821ULL})
    EXPECT_EQ(qkvlab::splitmix64(state), want);
}

TEST(EngineRng, DrawsArePinnedForSeed42) {
  // Changing these values changes every seeded experiment: do it only on purpose.
  Rng rng(42);
  EXPECT_EQ(rng.next_u64(), 0x15780b2e0c2ec716ULL);
  EXPECT_EQ(rng.next_u64(), 0x6104d9866d113a7eULL);
  EXPECT_EQ(rng.next_u64(), 0xae17533239e499a1ULL);
  Rng stream7(42, 7);
  EXPECT_EQ(stream7.normal(), 1.9383282978626715);
  EXPECT_EQ(stream7.normal(), -1.3065954371829247);
}

TEST(EngineRng, SameSeedAndStreamGiveTheSameDraws) {
  Rng a(5, 3), b(5, 3), other_stream(5, 4), other_seed(6, 3);
  int same_stream = 0, same_seed = 0;
  for (int k = 0; k < 1000; ++k) {
    const std::uint64_t x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    same_stream += (x == other_stream.next_u64());
    same_seed += (x == other_seed.next_u64());
  }
  EXPECT_EQ(same_stream, 0);
  EXPECT_EQ(same_seed, 0);
}

TEST(EngineRng, NormalHasUnitMomentsAndUniformItsRange) {
  Rng rng(11);
  const int n = 200000;
  double sum = 0, sum2 = 0, low = 1, high = 0;
  for (int k = 0; k < n; ++k) {
    const double z = rng.normal();
    sum += z;
    sum2 += z * z;
    const double u = rng.uniform();
    low = std::min(low, u);
    high = std::max(high, u);
  }
  // Five standard errors: sd(mean) = 1/sqrt(n), sd(mean of z²) = sqrt(2/n).
  EXPECT_LT(std::abs(sum / n), 5 / std::sqrt(n));
  EXPECT_LT(std::abs(sum2 / n - 1), 5 * std::sqrt(2.0 / n));
  EXPECT_GE(low, 0.0);
  EXPECT_LT(high, 1.0);
}

TEST(EngineRng, FloatMatrixIsTheRoundedDoubleMatrix) {
  Rng a(9), b(9);
  const Mat<double> D = normal_matrix<double>(3, 4, 0.5, a);
  const Mat<float> F = normal_matrix<float>(3, 4, 0.5, b);
  EXPECT_EQ(F, D.cast<float>());
}

// --- AdamW ---------------------------------------------------------------------

// A parameter set on the CPU backend with the given values and gradients (tensors in layout order).
struct Params {
  CpuBackend<double> be{1};
  ParameterSet<double> set;

  Params(ParameterLayout layout, const std::vector<std::vector<double>>& values,
         const std::vector<std::vector<double>>& grads)
      : set(be, std::move(layout)) {
    for (std::size_t k = 0; k < values.size(); ++k) {
      const ParameterSpec& spec = set.layout.specs()[k];
      set.values.upload(values[k].data(), values[k].size(), spec.offset);
      set.grads.upload(grads[k].data(), grads[k].size(), spec.offset);
    }
  }
  std::vector<double> value(const std::string& name) { return get(set.values, name); }
  std::vector<double> grad(const std::string& name) { return get(set.grads, name); }
  std::vector<double> get(const Buffer<double>& b, const std::string& name) {
    const ParameterSpec& spec = set.layout.at(name);
    std::vector<double> out(spec.size());
    b.download(out.data(), out.size(), spec.offset);
    return out;
  }
};

ParameterLayout layout_of(std::vector<std::pair<std::string, bool>> tensors, std::int64_t size) {
  ParameterLayout layout;
  for (const auto& [name, decay] : tensors) layout.add(name, {size}, decay);
  return layout;
}

TEST(EngineOptim, OneAdamWStepMatchesHandComputation) {
  // At step 1, m̂ = g and v̂ = g², so θ1 = θ0 − η (g / (|g| + ε) + λ θ0).
  const std::vector<double> theta0{0.5, -1.0, 2.0}, g{0.3, -0.02, 4.0};
  Params p(layout_of({{"theta", true}}, 3), {theta0}, {g});
  AdamWState<double> adamw(p.be, p.set.layout.total());
  const double lr = 0.01;
  adamw.step(p.be, p.set, {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1}, lr);
  const std::vector<double> theta = p.value("theta");
  for (int i = 0; i < 3; ++i) {
    const double want = theta0[i] - lr * (g[i] / (std::abs(g[i]) + 1e-8) + 0.1 * theta0[i]);
    EXPECT_NEAR(theta[i], want, 1e-15);
    // Control: without the decay term the hand value is off by lr λ θ0 ≥ 5e-4.
    EXPECT_GT(std::abs(theta[i] - (theta0[i] - lr * g[i] / (std::abs(g[i]) + 1e-8))), 4e-4);
  }
  EXPECT_EQ(adamw.t, 1);
  const std::vector<double> m = adamw.m.to_host(), v = adamw.v.to_host();
  EXPECT_NEAR(m[2], 0.1 * 4.0, 1e-15);
  EXPECT_NEAR(v[2], 0.001 * 16.0, 1e-15);
}

TEST(EngineOptim, AdamWWeightDecayIsDecoupledAndSkipsNonDecayed) {
  // With a zero gradient the Adam update is zero: only decay moves θ, by exactly θ ← θ (1 − ηλ).
  Params p(layout_of({{"W", true}, {"gain", false}}, 4), {std::vector<double>(4, 3.0), std::vector<double>(4, 3.0)},
           {std::vector<double>(4, 0.0), std::vector<double>(4, 0.0)});
  AdamWState<double> adamw(p.be, p.set.layout.total());
  adamw.step(p.be, p.set, {.weight_decay = 0.5}, 0.1);
  EXPECT_EQ(p.value("W"), std::vector<double>(4, 3.0 - 0.1 * 0.5 * 3.0));
  EXPECT_EQ(p.value("gain"), std::vector<double>(4, 3.0));
}

// transformers.optimization.AdamW (the released probe's), written here as its source reads, in double:
//   m ← β1 m + (1 − β1) g;  v ← β2 v + (1 − β2) g²;  denom = sqrt(v) + ε;
//   step = η sqrt(1 − β2^t) / (1 − β1^t);  θ ← θ − step m / denom;  θ ← θ − η λ θ (decayed tensors).
// The toolkit's transformers form (engine/adamw_config.hpp) follows it over five steps of varying
// rates to rounding; control: the torch form at the same settings misses by far more.
TEST(EngineOptim, TransformersAdamWIsItsReleasedDefinition) {
  const std::vector<double> theta0{0.5, -1.0, 2.0};
  const AdamWConfig config{.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-2, .weight_decay = 0.1,
                           .form = AdamWForm::transformers};
  const auto run = [&](AdamWConfig c) {
    Params p(layout_of({{"W", true}, {"gain", false}}, 3), {theta0, theta0}, {theta0, theta0});
    AdamWState<double> adamw(p.be, p.set.layout.total());
    for (int step = 0; step < 5; ++step) {
      const std::vector<double> g{0.3 - 0.1 * step, -0.02 * step, 4.0 / (step + 1)};
      for (const char* name : {"W", "gain"}) p.set.grads.upload(g.data(), 3, p.set.layout.at(name).offset);
      adamw.step(p.be, p.set, c, 0.05 * (step + 1));
    }
    std::vector<double> out = p.value("W"), gain = p.value("gain");
    out.insert(out.end(), gain.begin(), gain.end());
    return out;
  };
  std::vector<double> want;
  for (bool decay : {true, false})
    for (int i = 0; i < 3; ++i) {
      double theta = theta0[i], m = 0, v = 0;
      for (int t = 1; t <= 5; ++t) {
        const double g = std::vector<double>{0.3 - 0.1 * (t - 1), -0.02 * (t - 1), 4.0 / t}[std::size_t(i)];
        const double lr = 0.05 * t;
        m = 0.9 * m + 0.1 * g, v = 0.95 * v + 0.05 * g * g;
        const double step = lr * std::sqrt(1 - std::pow(0.95, t)) / (1 - std::pow(0.9, t));
        theta -= step * m / (std::sqrt(v) + 1e-2);
        if (decay) theta -= lr * 0.1 * theta;
      }
      want.push_back(theta);
    }
  const std::vector<double> ours = run(config);
  AdamWConfig torch = config;
  torch.form = AdamWForm::torch;
  const std::vector<double> control = run(torch);
  double worst = 0, control_gap = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(ours[i] - want[i])), control_gap = std::max(control_gap, std::abs(control[i] - want[i]));
  EXPECT_LT(worst, 1e-14);
  EXPECT_GT(control_gap, 1e-3);
  EXPECT_THROW(run({.weight_decay = 20, .form = AdamWForm::transformers}), std::invalid_argument);  // ηλ ≥ 1
}

// L(θ) = mean((θ A − b)²) with a fixed, moderately conditioned A; its minimizer is θ* = b A⁻¹, and
// its gradient 2 (θ A − b) Aᵀ / 4 is written here by hand.
TEST(EngineOptim, AdamWMinimizesAQuadratic) {
  Rng rng(3);
  const MatD A = MatD::Identity(4, 4) + 0.3 * normal_matrix<double>(4, 4, 1.0, rng);
  const MatD b = normal_matrix<double>(1, 4, 1.0, rng);
  Params p(layout_of({{"theta", true}}, 4), {std::vector<double>(4, 0.0)}, {std::vector<double>(4, 0.0)});
  AdamWState<double> adamw(p.be, p.set.layout.total());
  const WarmupCosine lr(0.05, 0.0, 50, 3000);
  MatD theta = MatD::Zero(1, 4);
  for (int step = 0; step < 3000; ++step) {
    const MatD g = 2 * (theta * A - b) * A.transpose() / 4;
    p.set.grads.upload(g.data(), 4);
    adamw.step(p.be, p.set, {}, lr(step));
    p.set.values.download(theta.data(), 4);
  }
  EXPECT_LT((theta - b * A.inverse()).norm(), 1e-6);
  EXPECT_GT((b * A.inverse()).norm(), 0.1);  // control: the start θ = 0 is far from θ*
}

// engine/adamw_state.hpp: the one format of AdamW's state (lm/'s optimizer.safetensors, transfer's
// checkpoints) round-trips bit for bit through both readers (a parsed file and a view of its bytes);
// a missing, mis-shaped or non-finite moment, v < 0 and a missing, malformed or negative t are refused
// naming the tensor or field (the controls: each breaks one thing of a file that reads).
TEST(EngineAdamWState, RoundTripsBitExactlyAndRefusesBrokenState) {
  ParameterLayout layout;
  layout.add("W", {2, 3}, true), layout.add("gain", {3}, false);
  // Each tensor at its offset (the layout aligns them; padding stays zero).
  const auto placed = [&](std::vector<float> w, std::vector<float> gain) {
    std::vector<float> all(layout.total(), 0.0f);
    std::copy(w.begin(), w.end(), all.begin() + std::ptrdiff_t(layout.at("W").offset));
    std::copy(gain.begin(), gain.end(), all.begin() + std::ptrdiff_t(layout.at("gain").offset));
    return all;
  };
  const AdamWHostState state{placed({0.5f, -1e-38f, 3.0f, -7.25f, 1e30f, 0.0f}, {1.0f / 3, -2.0f, 6.5f}),
                             placed({0.25f, 1e-45f, 9.0f, 0.0f, 1e20f, 4.0f}, {1.0f / 7, 2.0f, 3.0f}), 17};
  SafeTensors file;
  file.tensors["W"] = tensor_of(*layout.find("W"), std::vector<float>(9, 1.0f));  // the caller's own tensors stay
  write_adamw_state(file, layout, state);
  EXPECT_EQ(file.metadata.at("t"), "17");
  ASSERT_TRUE(file.tensors.count("m/W") && file.tensors.count("v/gain") && file.tensors.count("W"));
  EXPECT_TRUE(is_adamw_tensor("v/gain", layout));
  EXPECT_FALSE(is_adamw_tensor("W", layout) || is_adamw_tensor("m/bias", layout) || is_adamw_tensor("adamw.m/W", layout));
  const std::vector<std::uint8_t> bytes = serialize_safetensors(file);
  for (const AdamWHostState& got : {read_adamw_state(parse_safetensors(bytes), layout),
                                    read_adamw_state(view_safetensors(bytes), layout)}) {
    EXPECT_EQ(got.m, state.m);
    EXPECT_EQ(got.v, state.v);
    EXPECT_EQ(got.t, state.t);
  }
  const auto refused = [&](const std::function<void(SafeTensors&)>& edit, const std::string& why) {
    SafeTensors broken = file;
    edit(broken);
    try {
      read_adamw_state(broken, layout);
      ADD_FAILURE() << "read: " << why;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  const auto set = [](const std::string& name, std::size_t k, float x) {
    return [=](SafeTensors& f) { std::memcpy(f.tensors.at(name).data.data() + 4 * k, &x, 4); };
  };
  refused([](SafeTensors& f) { f.tensors.erase("v/W"); }, "missing tensor \"v/W\"");
  refused([&](SafeTensors& f) { f.tensors["m/gain"] = tensor_of(*layout.find("W"), state.m); },
          "tensor \"m/gain\" is not F32 of the shape");
  refused(set("m/W", 4, std::numeric_limits<float>::quiet_NaN()), "tensor \"m/W\" holds nan at element 4");
  refused(set("v/gain", 1, -1.0f), "tensor \"v/gain\" holds -1 at element 1");
  refused(set("v/W", 0, std::numeric_limits<float>::infinity()), "tensor \"v/W\" holds inf at element 0");
  refused([](SafeTensors& f) { f.metadata.erase("t"); }, "no \"t\" in its metadata");
  refused([](SafeTensors& f) { f.metadata["t"] = "17x"; }, "\"t\" is not an integer: \"17x\"");
  refused([](SafeTensors& f) { f.metadata["t"] = "-1"; }, "the step count \"t\" is negative: -1");
}

TEST(EngineOptim, ParameterNamesAreUnique) {
  // Checkpoints keep AdamW's moments by tensor name: two tensors called "W" would share them.
  ParameterLayout layout;
  layout.add("W", {2}, true);
  EXPECT_THROW(layout.add("W", {2}, true), std::invalid_argument);
  EXPECT_NO_THROW(layout.add("V", {2}, true));
}

// --- Schedule and clipping -------------------------------------------------------

TEST(EngineSchedule, WarmupCosineValues) {
  const double peak = 1e-3, floor = 1e-5;
  const WarmupCosine lr(peak, floor, 100, 1100);
  EXPECT_DOUBLE_EQ(lr(0), peak / 100);
  EXPECT_DOUBLE_EQ(lr(49), peak / 2);
  EXPECT_DOUBLE_EQ(lr(99), peak);                 // warmup end
  EXPECT_DOUBLE_EQ(lr(100), peak);                // cosine start
  EXPECT_DOUBLE_EQ(lr(600), (peak + floor) / 2);  // cosine midpoint
  EXPECT_DOUBLE_EQ(lr(1100), floor);              // end
  EXPECT_DOUBLE_EQ(lr(5000), floor);
  for (int step = 100; step < 1100; ++step) EXPECT_GE(lr(step), lr(step + 1));
}

// PyTorch's OneCycleLR(anneal_strategy='linear', cycle_momentum=False) as torch/optim/lr_scheduler.py
// reads: two phases ending at float(pct_start·T) − 1 and T − 1, η = (end − start) pct + start with
// pct = (step − phase start) / (phase end − phase start), the initial rate max/div_factor and the last
// initial/final_div_factor. The released probe's settings: div 100, final div 0.1, pct_start 0.1.
double one_cycle_lr(double max_lr, std::int64_t total, double pct_start, std::int64_t step, bool off_by_one = false) {
  // (step T − 1 and later: the floor; the loops below stop before T.)
  const double initial = max_lr / 100, last = initial / 0.1;
  const double end1 = pct_start * double(total) - (off_by_one ? 0 : 1), end2 = double(total) - 1;
  if (double(step) <= end1) return (max_lr - initial) * (double(step) / end1) + initial;
  return (last - max_lr) * ((double(step) - end1) / (end2 - end1)) + max_lr;
}

TEST(EngineSchedule, OneCycleLinearIsPyTorchsOneCycleLR) {
  const OneCycleLinear lr(1e-5, 1e-3, 1e-4, 10, 100);
  EXPECT_DOUBLE_EQ(lr(0), 1e-5);   // lr/100
  EXPECT_DOUBLE_EQ(lr(9), 1e-3);   // the peak at the warmup's last step
  EXPECT_DOUBLE_EQ(lr(99), 1e-4);  // lr/10 at the last step
  EXPECT_DOUBLE_EQ(lr(500), 1e-4);
  double worst = 0, control = 0;
  for (std::int64_t step = 0; step < 100; ++step) {
    worst = std::max(worst, std::abs(lr(step) - one_cycle_lr(1e-3, 100, 0.1, step)));
    control = std::max(control, std::abs(lr(step) - one_cycle_lr(1e-3, 100, 0.1, step, true)));
  }
  EXPECT_LT(worst, 1e-18);
  EXPECT_GT(control, 1e-5);  // control: a phase boundary one step late is seen
  // pct_start·T below 1 (a probe of few steps): the first phase is empty, step 0 is already falling.
  const OneCycleLinear none(1e-5, 1e-3, 1e-4, 0.5, 20);
  for (std::int64_t step = 0; step < 20; ++step)
    EXPECT_NEAR(none(step), one_cycle_lr(1e-3, 20, 0.5 / 20, step), 1e-18) << step;
}

TEST(EngineSchedule, RejectsInconsistentSettings) {
  EXPECT_THROW(OneCycleLinear(1e-5, 1e-3, 1e-4, 1, 100), std::invalid_argument);  // W − 1 = 0: 0/0 at step 0
  EXPECT_THROW(OneCycleLinear(1e-5, 1e-3, 1e-4, 100, 100), std::invalid_argument);
  EXPECT_THROW(OneCycleLinear(1e-2, 1e-3, 1e-4, 10, 100), std::invalid_argument);  // start above peak
  EXPECT_THROW(WarmupCosine(1e-3, 1e-2, 10, 100), std::invalid_argument);  // floor above peak
  EXPECT_THROW(WarmupCosine(1e-3, 0, 100, 100), std::invalid_argument);    // no decay phase
  EXPECT_THROW(WarmupCosine(1e-3, 0, -1, 100), std::invalid_argument);
}

TEST(EngineClip, ScalesTheGlobalNormToTheLimit) {
  // ‖g‖ = sqrt(3² + 4² + 75) = 10 over both tensors.
  Params p(layout_of({{"a", true}, {"b", false}}, 2), {{0, 0}, {0, 0}}, {{3, 4}, {0, std::sqrt(75.0)}});
  EXPECT_DOUBLE_EQ(clip_gradients(p.be, p.set, 3.0), 10.0);
  const std::vector<double> a = p.grad("a"), b = p.grad("b");
  EXPECT_NEAR(std::sqrt(a[0] * a[0] + a[1] * a[1] + b[1] * b[1]), 3.0, 1e-15);
  EXPECT_NEAR(a[0], 0.9, 1e-15);  // direction kept: 0.3 · (3, 4)
  EXPECT_NEAR(a[1], 1.2, 1e-15);
}

TEST(EngineClip, LeavesSmallGradientsAlone) {
  Params p(layout_of({{"a", true}}, 2), {{0, 0}}, {{0.3, 0.4}});
  EXPECT_DOUBLE_EQ(clip_gradients(p.be, p.set, 3.0), 0.5);
  EXPECT_EQ(p.grad("a"), (std::vector<double>{0.3, 0.4}));
  EXPECT_DOUBLE_EQ(clip_gradients(p.be, p.set, 0.0), 0.5);  // max_norm 0: no clipping
  EXPECT_EQ(p.grad("a"), (std::vector<double>{0.3, 0.4}));
}

}  // namespace
