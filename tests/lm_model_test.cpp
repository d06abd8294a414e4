// The language model (lm/model.hpp) on the CPU backend: its gradient against
// central finite differences in double for every variant of both families, its
// forward pass against an independent implementation, float against double,
// thread-count invariance, and negative controls the same checks must reject.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "core/errors.hpp"
#include "engine/cpu_backend.hpp"
#include "engine/trainer.hpp"
#include "lm/model.hpp"
#include "lm/parameters.hpp"
#include "lm_reference.hpp"

namespace {

using namespace qkvlab;
using namespace qkvlab::lm;

// Central differences with h = 1e-5 in double: truncation ~h²|φ'''|/6 and
// rounding ~u|φ|/h stay near 1e-10 relative for O(1) derivatives, so a correct
// gradient shows rel_err far below 1e-6 and a wrong one an error of order 1e-2
// or more; controls must exceed 1e-3 (a wide margin).
constexpr double kGradTolerance = 1e-6;
constexpr double kControlMin = 1e-3;

struct Case {
  std::string name;
  Config config;
};

Config tiny(Family family, VariantKind kind) {
  Config c = family_defaults(family, 3, 8, 2, 11, 8);
  c.head_dim = 4, c.ffn = 12;
  c.variant.kind = kind;
  return c;
}

std::vector<Case> every_variant() {
  std::vector<Case> cases;
  for (Family f : {Family::gpt2, Family::llama}) {
    const std::string fam = to_string(f) + "_";
    for (VariantKind k : {VariantKind::vanilla, VariantKind::resformer, VariantKind::svformer, VariantKind::neutreno,
                          VariantKind::denseformer, VariantKind::skipv1, VariantKind::yoco_v, VariantKind::cla_v,
                          VariantKind::skipkv1, VariantKind::skipv1_yoco, VariantKind::q_identity,
                          VariantKind::resformer_neutreno, VariantKind::resformer_k, VariantKind::resformer_q,
                          VariantKind::resformer_previous,
                          VariantKind::resformer_all, VariantKind::resformer_identity, VariantKind::cla_k,
                          VariantKind::cla_kv, VariantKind::resformer_cross})
      cases.push_back({fam + to_string(k), tiny(f, k)});
    for (VariantKind k : {VariantKind::resformer, VariantKind::resformer_k, VariantKind::resformer_q}) {
      Config source2 = tiny(f, k);
      source2.variant.source_layer = 2;
      cases.push_back({fam + to_string(k) + "_source2", source2});
    }
    Config neutreno_gqa = tiny(f, VariantKind::resformer_neutreno);
    neutreno_gqa.heads = 4, neutreno_gqa.kv_heads = 2, neutreno_gqa.head_dim = 2;
    cases.push_back({fam + "resformer_neutreno_gqa", neutreno_gqa});
    Config cross_gqa = neutreno_gqa;
    cross_gqa.variant.kind = VariantKind::resformer_cross;
    cases.push_back({fam + "resformer_cross_gqa", cross_gqa});
    Config cross2 = tiny(f, VariantKind::resformer_cross);
    cross2.variant.source_layer = 2;
    cases.push_back({fam + "resformer_cross_source2", cross2});
    Config gqa = tiny(f, VariantKind::vanilla);
    gqa.heads = 4, gqa.kv_heads = 2, gqa.head_dim = 2;
    cases.push_back({fam + "gqa", gqa});
    Config skip_gqa = gqa;
    skip_gqa.variant.kind = VariantKind::skipv1;
    cases.push_back({fam + "skipv1_gqa", skip_gqa});
    for (Strategy s : {Strategy::pooling, Strategy::dynamic, Strategy::odd_even, Strategy::plus_resformer}) {
      Config c = tiny(f, VariantKind::skipv1);
      c.heads = 4, c.kv_heads = 4, c.head_dim = 2, c.variant.strategy = s;
      cases.push_back({fam + "skipv1_" + to_string(s), c});
    }
    Config skipv0 = tiny(f, VariantKind::skipv1);
    skipv0.variant.source_layer = 0;
    cases.push_back({fam + "skipv0", skipv0});
    Config skipv2 = tiny(f, VariantKind::skipv1);
    skipv2.variant.source_layer = 2;
    cases.push_back({fam + "skipv2", skipv2});
    Config lam = tiny(f, VariantKind::resformer);
    lam.variant.alpha = 1, lam.variant.beta = 2;
    cases.push_back({fam + "resformer_lambda2", lam});
    for (VariantKind k : {VariantKind::vanilla, VariantKind::skipv1, VariantKind::resformer, VariantKind::svformer}) {
      Config mla = tiny(f, k);
      mla.mla = true, mla.d_c = 6, mla.d_r = 2;
      cases.push_back({fam + "mla_" + to_string(k), mla});
    }
    Config untied = tiny(f, VariantKind::vanilla);
    untied.tied = !untied.tied, untied.bias = !untied.bias, untied.gelu = GeluForm::erf;
    cases.push_back({fam + "flipped_tied_bias_gelu", untied});
    if (f == Family::gpt2)
      for (VariantKind k : {VariantKind::vanilla, VariantKind::skipv1}) {
        Config rope = tiny(f, k);
        rope.position_encoding = PositionEncoding::rope;
        cases.push_back({fam + "rope_" + to_string(k), rope});
      }
    Config free = tiny(f, VariantKind::resformer);
    free.norm = false, free.q_identity_layers = {2};
    cases.push_back({fam + "norm_none_q_identity_layer2", free});
  }
  for (auto& c : cases)
    for (char& ch : c.name)
      if (ch == '-') ch = '_';  // test names: letters, digits, underscores
  return cases;
}

// Every parameter drawn at a scale that exercises the nonlinearities (gains near 1).
std::vector<double> random_parameters(const engine::ParameterLayout& layout, std::uint64_t seed) {
  std::vector<double> values(layout.total(), 0.0);
  for (const auto& spec : layout.specs()) {
    Rng rng(seed, spec.name);
    const bool gain = spec.shape.size() == 1 && spec.name.find(".weight") != std::string::npos;
    for (std::size_t i = 0; i < spec.size(); ++i)
      values[spec.offset + i] = gain ? 1 + 0.2 * rng.normal() : 0.4 * rng.normal();
  }
  return values;
}

struct Batch {
  int B = 2, T = 6;
  std::vector<std::int32_t> ids, targets;
};

Batch random_batch(int vocab, std::uint64_t seed, int B = 2, int T = 6) {
  Batch b{B, T, {}, {}};
  Rng rng(seed, "batch");
  for (int n = 0; n < B * T; ++n) {
    b.ids.push_back(rng.uniform_int(vocab));
    b.targets.push_back(n % 5 == 3 ? -1 : rng.uniform_int(vocab));  // a few positions not predicted
  }
  return b;
}

template <class S>
double mean_loss(Model<S>& model, const Batch& b) {
  return model.forward(b.ids.data(), b.targets.data(), b.B, b.T, Pass::eval).mean();
}

// rel_err = ‖g_fd − g‖ / ‖g_fd‖ over up to 3 entries of every tensor.
double gradient_error(const Config& c, const Batch& batch, const std::vector<double>& values,
                      const std::vector<double>& analytic, engine::CpuBackend<double>& be) {
  Model<double> model(c, be);
  double num = 0, den = 0;
  const double h = 1e-5;
  for (const auto& spec : model.parameters().layout.specs()) {
    for (std::size_t j = 0; j < std::min<std::size_t>(3, spec.size()); ++j) {
      const std::size_t i = spec.offset + (j * 7919) % spec.size();
      std::vector<double> p = values;
      p[i] = values[i] + h;
      model.set_parameters(p);
      const double up = mean_loss(model, batch);
      p[i] = values[i] - h;
      model.set_parameters(p);
      const double down = mean_loss(model, batch);
      const double fd = (up - down) / (2 * h);
      num += (fd - analytic[i]) * (fd - analytic[i]);
      den += fd * fd;
    }
  }
  return std::sqrt(num / den);
}

std::vector<double> analytic_gradient(const Config& c, const Batch& batch, const std::vector<double>& values,
                                      engine::CpuBackend<double>& be) {
  Model<double> model(c, be);
  model.set_parameters(values);
  std::int64_t predicted = 0;
  for (auto t : batch.targets) predicted += t >= 0;
  model.forward(batch.ids.data(), batch.targets.data(), batch.B, batch.T, Pass::train, 1.0 / double(predicted));
  model.backward();
  return model.parameters().grads.to_host();
}

class LmGradient : public ::testing::TestWithParam<Case> {};

TEST_P(LmGradient, MatchesFiniteDifferences) {
  const Config& c = GetParam().config;
  engine::CpuBackend<double> be(2);
  Model<double> probe(c, be);
  const auto values = random_parameters(probe.parameters().layout, 7);
  const Batch batch = random_batch(c.vocab, 3);
  const auto analytic = analytic_gradient(c, batch, values, be);
  EXPECT_LT(gradient_error(c, batch, values, analytic, be), kGradTolerance);
}

INSTANTIATE_TEST_SUITE_P(EveryVariant, LmGradient, ::testing::ValuesIn(every_variant()),
                         [](const auto& info) { return info.param.name; });

// Controls: the checker rejects a gradient taken from a model whose variant
// weights differ (ResFormer's β, NeuTRENO's λ), and one off by 1% everywhere.
TEST(LmGradientControl, WrongMixingWeightIsCaught) {
  engine::CpuBackend<double> be(2);
  for (VariantKind kind : {VariantKind::resformer, VariantKind::neutreno, VariantKind::resformer_neutreno,
                           VariantKind::resformer_k, VariantKind::resformer_q}) {
    Config c = tiny(Family::gpt2, kind);
    Model<double> probe(c, be);
    const auto values = random_parameters(probe.parameters().layout, 7);
    const Batch batch = random_batch(c.vocab, 3);
    Config wrong = c;
    wrong.variant.beta = 0.3, wrong.variant.lambda = 0.3;
    const auto analytic = analytic_gradient(wrong, batch, values, be);
    EXPECT_GT(gradient_error(c, batch, values, analytic, be), kControlMin) << to_string(kind);
  }
}

// The source layer of the ResFormer family: a gradient taken with V_1 (K_1) for a model that mixes V_2 (K_2).
TEST(LmGradientControl, WrongSourceLayerIsCaught) {
  engine::CpuBackend<double> be(2);
  for (VariantKind kind : {VariantKind::resformer, VariantKind::resformer_k, VariantKind::resformer_q}) {
    Config c = tiny(Family::llama, kind);
    c.variant.source_layer = 2;
    Model<double> probe(c, be);
    const auto values = random_parameters(probe.parameters().layout, 7);
    const Batch batch = random_batch(c.vocab, 3);
    Config wrong = c;
    wrong.variant.source_layer = 1;
    const auto analytic = analytic_gradient(wrong, batch, values, be);
    EXPECT_GT(gradient_error(c, batch, values, analytic, be), kControlMin) << to_string(kind);
  }
}

TEST(LmGradientControl, ScaledGradientIsCaught) {
  engine::CpuBackend<double> be(2);
  const Config c = tiny(Family::llama, VariantKind::skipv1);
  Model<double> probe(c, be);
  const auto values = random_parameters(probe.parameters().layout, 7);
  const Batch batch = random_batch(c.vocab, 3);
  auto analytic = analytic_gradient(c, batch, values, be);
  for (double& g : analytic) g *= 1.01;
  EXPECT_GT(gradient_error(c, batch, values, analytic, be), 5e-3);
}

// ---- forward against the independent implementation (tests/lm_reference.hpp) ----

class LmReference : public ::testing::TestWithParam<Case> {};

TEST_P(LmReference, LossMatchesIndependentImplementation) {
  const Config& c = GetParam().config;
  engine::CpuBackend<double> be(1);
  Model<double> model(c, be);
  const auto values = random_parameters(model.parameters().layout, 11);
  model.set_parameters(values);
  const Batch batch = random_batch(c.vocab, 5);
  const double ours = mean_loss(model, batch);
  const double ref = reference_loss(c, model.parameters().layout, values, batch.ids, batch.targets, batch.B, batch.T);
  EXPECT_NEAR(ours, ref, 1e-12 * std::abs(ref));
}

std::vector<Case> reference_cases() {
  std::vector<Case> cases;
  for (Family f : {Family::gpt2, Family::llama}) {
    Config c = tiny(f, VariantKind::vanilla);
    cases.push_back({to_string(f), c});
    c.heads = 4, c.kv_heads = 2, c.head_dim = 6, c.tied = !c.tied;  // heads·d_h ≠ d on purpose
    cases.push_back({to_string(f) + "_gqa_untied", c});
    Config q = tiny(f, VariantKind::q_identity);
    cases.push_back({to_string(f) + "_q_identity", q});
    Config free = tiny(f, VariantKind::vanilla);
    free.norm = false, free.q_identity_layers = {1};
    cases.push_back({to_string(f) + "_norm_none_q_identity_layer1", free});
  }
  Config rope = tiny(Family::gpt2, VariantKind::vanilla);
  rope.position_encoding = PositionEncoding::rope;
  cases.push_back({"gpt2_rope", rope});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Families, LmReference, ::testing::ValuesIn(reference_cases()),
                         [](const auto& info) { return info.param.name; });

// --positions rope rotates the pairs (i, i + d_h/2); dense_skip's GPT-2 rotates (2i, 2i + 1). The two are
// one model up to the same permutation of every head's query and key coordinates: the rotate_half model
// with weights W equals the interleaved reference with the columns of W_Q, W_K (and their biases) moved
// from h·d_h + i to h·d_h + 2i and from h·d_h + d_h/2 + i to h·d_h + 2i + 1. Control: unpermuted, it differs.
TEST(LmReference, Gpt2RopeIsDenseSkipsInterleavedRotaryUpToAPermutation) {
  Config c = tiny(Family::gpt2, VariantKind::vanilla);
  c.position_encoding = PositionEncoding::rope;
  engine::CpuBackend<double> be(1);
  Model<double> model(c, be);
  const auto& layout = model.parameters().layout;
  EXPECT_FALSE(layout.find("wpe"));
  const auto values = random_parameters(layout, 11);
  model.set_parameters(values);
  const Batch batch = random_batch(c.vocab, 5);
  const double ours = mean_loss(model, batch);
  auto permuted = values;
  const int dh = c.head_dim;
  for (int l = 0; l < c.layers; ++l)
    for (const std::string what : {"q.weight", "q.bias", "k.weight", "k.bias"}) {
      const auto& spec = layout.at("h." + std::to_string(l) + ".attn." + what);
      const std::size_t rows = spec.shape.size() == 2 ? spec.shape[0] : 1, cols = spec.shape.back();
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t h = 0; h < cols / dh; ++h)
          for (int i = 0; i < dh / 2; ++i) {
            const std::size_t row = spec.offset + r * cols + h * dh;
            permuted[row + 2 * i] = values[row + i];
            permuted[row + 2 * i + 1] = values[row + dh / 2 + i];
          }
    }
  const auto ref = [&](const std::vector<double>& v) {
    return reference_loss(c, layout, v, batch.ids, batch.targets, batch.B, batch.T, true);
  };
  EXPECT_NEAR(ours, ref(permuted), 1e-12 * std::abs(ours));
  EXPECT_GT(std::abs(ours - ref(values)), kControlMin * std::abs(ours));
}

// A gpt2 model with RoPE says so in its metadata and reads back as one; other models' metadata has no
// "position_encoding" (older checkpoints keep theirs). Control: a llama model with learned positions is refused.
TEST(LmConfig, RopePositionsRoundTripThroughMetadata) {
  Config c = tiny(Family::gpt2, VariantKind::skipv1);
  c.position_encoding = PositionEncoding::rope;
  const auto m = to_metadata(c);
  EXPECT_EQ(m.at("position_encoding"), "rope");
  EXPECT_TRUE(from_metadata(m).rope());
  EXPECT_EQ(to_metadata(from_metadata(m)), m);
  for (Family f : {Family::gpt2, Family::llama}) {
    const auto plain = to_metadata(tiny(f, VariantKind::vanilla));
    EXPECT_EQ(plain.count("position_encoding"), 0u);
    EXPECT_EQ(from_metadata(plain).rope(), f == Family::llama);
  }
  auto llama = to_metadata(tiny(Family::llama, VariantKind::vanilla));
  llama["position_encoding"] = "learned";
  EXPECT_THROW(from_metadata(llama), UsageError);
}

TEST(LmReferenceControl, PerturbedWeightChangesTheLoss) {
  const Config c = tiny(Family::llama, VariantKind::vanilla);
  engine::CpuBackend<double> be(1);
  Model<double> model(c, be);
  auto values = random_parameters(model.parameters().layout, 11);
  model.set_parameters(values);
  const Batch batch = random_batch(c.vocab, 5);
  const double ours = mean_loss(model, batch);
  values[model.parameters().layout.at("h.1.attn.k.weight").offset] += 0.5;
  const double ref = reference_loss(c, model.parameters().layout, values, batch.ids, batch.targets, batch.B, batch.T);
  EXPECT_GT(std::abs(ours - ref), kControlMin * std::abs(ref));
}

// ---- precision and threads ----

TEST(LmPrecision, FloatLossMatchesDouble) {
  for (Family f : {Family::gpt2, Family::llama}) {
    Config c = family_defaults(f, 4, 64, 4, 97, 64);
    engine::CpuBackend<double> bd(2);
    engine::CpuBackend<float> bf(2);
    Model<double> md(c, bd);
    Model<float> mf(c, bf);
    md.initialize(5);
    mf.initialize(5);
    const Batch batch = random_batch(c.vocab, 9, 3, 40);
    const double ld = mean_loss(md, batch), lf = mean_loss(mf, batch);
    // float rounding: u = 6e-8 times O(d) accumulated terms per product, a few layers deep
    EXPECT_NEAR(lf, ld, 1e-5 * ld) << to_string(f);
    EXPECT_NE(lf, ld);  // and the two really ran at different precisions
  }
}

TEST(LmThreads, SameLossAndGradientsOnOneAndTwoThreads) {
  Config c = family_defaults(Family::llama, 3, 64, 4, 300, 256);
  c.kv_heads = 2;
  c.variant.kind = VariantKind::skipv1;
  std::vector<float> grads[2];
  double losses[2];
  const Batch batch = random_batch(c.vocab, 13, 4, 200);
  for (int threads : {1, 2}) {
    engine::CpuBackend<float> be(threads);
    Model<float> m(c, be);
    m.initialize(3);
    m.parameters().grads.upload(std::vector<float>(m.parameters().layout.total(), 0.0f));
    losses[threads - 1] = m.forward(batch.ids.data(), batch.targets.data(), batch.B, batch.T, Pass::train, 1e-3).sum;
    m.backward();
    grads[threads - 1] = m.parameters().grads.to_host();
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(grads[0], grads[1]);
}

TEST(LmInput, OutOfRangeTokensAndLongSequencesAreRefused) {
  const Config c = tiny(Family::gpt2, VariantKind::vanilla);
  engine::CpuBackend<float> be(1);
  Model<float> m(c, be);
  m.initialize(1);
  std::vector<std::int32_t> ids{1, 2, 11}, targets{2, 3, 4};
  EXPECT_THROW(m.forward(ids.data(), targets.data(), 1, 3, Pass::eval), std::invalid_argument);
  std::vector<std::int32_t> long_ids(9, 1);
  EXPECT_THROW(m.forward(long_ids.data(), nullptr, 1, 9, Pass::eval), std::invalid_argument);
  ids[2] = 10;
  EXPECT_NO_THROW(m.forward(ids.data(), targets.data(), 1, 3, Pass::eval));
}

}  // namespace

// ---- training (engine/trainer.hpp) ----

namespace {

// Sequences x_{t+1} = (x_t + s) mod V with a random start and step s ∈ {1, 2, 3}:
// after two tokens the rest is determined, so a model that learns the rule
// predicts positions t ≥ 1 with a loss near 0, against ln V at the start.
Batch progression_batch(int vocab, int B, int T, std::uint64_t seed, std::int64_t step) {
  Batch b{B, T, {}, {}};
  Rng rng(seed, "progressions/" + std::to_string(step));
  for (int s = 0; s < B; ++s) {
    int x = rng.uniform_int(vocab);
    const int inc = 1 + rng.uniform_int(3);
    for (int t = 0; t < T; ++t) {
      b.ids.push_back(x);
      x = (x + inc) % vocab;
      b.targets.push_back(x);
    }
  }
  return b;
}

double train_on_progressions(Family family, int steps, std::vector<double>* curve = nullptr) {
  Config c = family_defaults(family, 2, 32, 2, 16, 16);
  engine::CpuBackend<float> be(2);
  Model<float> model(c, be);
  model.initialize(1);
  engine::Trainer<float> trainer(be, model.parameters(), {steps, 3e-3, 3e-4, 20, 1.0, 1, {0.9, 0.95, 1e-8, 0.0}});
  double last = 0;
  for (int s = 0; s < steps; ++s) {
    const Batch b = progression_batch(c.vocab, 16, 16, 7, s);
    last = trainer
               .step([&](int) {
                 const LossSum l = model.forward(b.ids.data(), b.targets.data(), b.B, b.T, Pass::train,
                                                 1.0 / double(b.ids.size()));
                 model.backward();
                 return engine::MicroLoss{l.sum, l.count};
               })
               .loss;
    if (curve) curve->push_back(last);
  }
  return last;
}

}  // namespace

TEST(LmTraining, TinyModelsOfBothFamiliesLearnASequenceRule) {
  for (Family f : {Family::gpt2, Family::llama}) {
    std::vector<double> curve;
    train_on_progressions(f, 300, &curve);
    EXPECT_NEAR(curve.front(), std::log(16.0), 0.3) << to_string(f);  // the start: chance level
    // Given x_0 the target x_1 is one of 3 values, and every later target is determined: the best
    // possible loss is ln 3 / 16 ≈ 0.069 (measured after 300 steps: 0.22 gpt2, 0.077 llama).
    double tail = 0;
    for (std::size_t i = curve.size() - 20; i < curve.size(); ++i) tail += curve[i] / 20;
    EXPECT_LT(tail, 0.5) << to_string(f);
  }
}
