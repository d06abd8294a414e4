// Weights held in 16 bits (engine/weight_type.hpp, engine/weight.hpp, lm/model.hpp): the rounding
// and widening, the product over widened panels against the float product, the memory a bf16 model
// takes, and the analyses of a bf16 checkpoint against the float32 path within the budget of
// docs/lm.md ("Weights in 16 bits"), with the control: weights truncated to 3 bits of mantissa
// exceed that budget by a wide margin.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "analysis/analyze.hpp"
#include "core/errors.hpp"
#include "core/rng.hpp"
#include "corpus/token_file.hpp"
#include "engine/cpu_backend.hpp"
#include "engine/json.hpp"
#include "engine/safetensors.hpp"
#include "engine/weight.hpp"
#include "lm/checkpoint.hpp"
#include "lm/evaluate.hpp"
#include "lm/hf.hpp"
#include "lm/model.hpp"
#include "lm/model_files.hpp"
#include "lm/parameters.hpp"
#include "run_command.hpp"
#include "scratch_dir.hpp"

namespace {

using namespace qkvlab;
using engine::WeightType;
using test_support::ScratchDir;
using test_support::run_qkvlab;
using test_support::shell_quoted;

float from_bits(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

TEST(Weight16, NarrowRoundsToNearestEvenAndWidensExactly) {
  EXPECT_EQ(engine::narrow_bits(1.0f, WeightType::bf16), 0x3F80);
  EXPECT_EQ(engine::narrow_bits(1.0f + 0x1p-8f, WeightType::bf16), 0x3F80);      // tie to even (down)
  EXPECT_EQ(engine::narrow_bits(1.0f + 3 * 0x1p-8f, WeightType::bf16), 0x3F82);  // tie to even (up)
  EXPECT_EQ(engine::narrow_bits(1.0f, WeightType::f16), 0x3C00);
  EXPECT_EQ(engine::narrow_bits(1.0f + 0x1p-11f, WeightType::f16), 0x3C00);
  EXPECT_EQ(engine::narrow_bits(65504.0f, WeightType::f16), 0x7BFF);
  EXPECT_EQ(engine::narrow_bits(65519.0f, WeightType::f16), 0x7BFF);
  EXPECT_EQ(engine::narrow_bits(65520.0f, WeightType::f16), 0x7C00);  // the tie above the largest: inf
  EXPECT_EQ(engine::narrow_bits(-0x1p-24f, WeightType::f16), 0x8001);  // the smallest subnormal
  EXPECT_EQ(engine::narrow_bits(0x1p-25f, WeightType::f16), 0x0000);   // tie to even: zero
  EXPECT_EQ(engine::narrow_bits(3 * 0x1p-25f, WeightType::f16), 0x0002);
  EXPECT_EQ(engine::narrow_bits(0x1p-14f - 0x1p-26f, WeightType::f16), 0x0400);  // rounds up to the smallest normal
  for (WeightType t : {WeightType::bf16, WeightType::f16}) {
    EXPECT_TRUE(std::isnan(engine::widen_bits(engine::narrow_bits(std::nanf(""), t), t)));
    for (std::uint32_t h = 0; h < 0x10000; ++h) {  // every pattern widens exactly and narrows back
      const float x = engine::widen_bits(std::uint16_t(h), t);
      if (!std::isnan(x)) {
        ASSERT_EQ(engine::narrow_bits(x, t), h) << engine::weight_type_name(t) << " " << h;
      }
    }
    // Within u relative of any float in range; truncating to 3 bits of mantissa (the control below) is not.
    Rng rng(7, 0);
    double worst = 0, worst_truncated = 0;
    for (int i = 0; i < 10000; ++i) {
      const float x = float(rng.normal() * 100.0);
      const float y = engine::widen_bits(engine::narrow_bits(x, t), t);
      worst = std::max(worst, std::abs(double(y) - x) / std::abs(double(x)));
      std::uint32_t b;
      std::memcpy(&b, &x, sizeof b);
      worst_truncated = std::max(worst_truncated, std::abs(double(from_bits(b & 0xFFF00000u)) - x) / std::abs(double(x)));
    }
    EXPECT_LE(worst, engine::unit_roundoff(t));
    EXPECT_GT(worst, 0.5 * engine::unit_roundoff(t));
    EXPECT_GT(worst_truncated, 16 * engine::unit_roundoff(t));
  }
}

// C = A op(W) + β C over widened panels, against the backend's float gemm on the widened matrix:
// bit for bit, with n over several panels and the last one partial, both orientations.
TEST(Weight16, ProductOverWidenedPanelsIsTheFloatProduct) {
  engine::CpuBackend<float> be(2);
  const int m = 37, n = 2 * engine::kPanel + 300, k = 70;
  Rng rng(3, 0);
  std::vector<float> A(std::size_t(m) * k), C0(std::size_t(m) * n);
  for (float& x : A) x = float(rng.normal());
  for (float& x : C0) x = float(rng.normal());
  std::vector<std::uint16_t> bits(std::size_t(n) * k);
  std::vector<float> widened(bits.size()), truncated(bits.size()), scratch(std::size_t(k) * engine::kPanel);
  for (std::size_t i = 0; i < bits.size(); ++i) {
    bits[i] = engine::narrow_bits(float(rng.normal()), WeightType::bf16);
    widened[i] = engine::widen_bits(bits[i], WeightType::bf16);
    truncated[i] = engine::widen_bits(std::uint16_t(bits[i] & 0xFFF0u), WeightType::bf16);
  }
  for (engine::Trans tw : {engine::Trans::none, engine::Trans::transpose}) {
    const int ldw = tw == engine::Trans::none ? n : k;
    for (float beta : {0.0f, 1.0f}) {
      std::vector<float> got = C0, want = C0, control = C0;
      engine::weight_product<float>(be, tw, m, n, k, A.data(), k, {bits.data(), WeightType::bf16, scratch.data()}, ldw,
                                    beta, got.data(), n);
      engine::weight_product<float>(be, tw, m, n, k, A.data(), k, widened.data(), ldw, beta, want.data(), n);
      engine::weight_product<float>(be, tw, m, n, k, A.data(), k, truncated.data(), ldw, beta, control.data(), n);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << int(tw) << " " << beta;
      double diff = 0, norm = 0;
      for (std::size_t i = 0; i < got.size(); ++i) diff += std::pow(control[i] - want[i], 2), norm += std::pow(want[i], 2);
      EXPECT_GT(std::sqrt(diff / norm), 1e-2) << "the control (3-bit weights) must differ";
    }
  }
}

// Backend::gemm at product type bf16 (engine/backend.hpp): the float product of the operands rounded
// to bf16, bit for bit, at 1 and 2 threads; over several tiles of C (128 × 256) with partial ones,
// both orientations of each operand, batched with a broadcast B (stride 0) and with gaps between
// rows (leading dimensions above the widths). Control: it is not the float product of the operands
// as given: it differs from it by more than float rounding and within bf16's 2 u.
TEST(Bf16Products, TheFloatProductOfTheOperandsRoundedToBf16) {
  const int m = 150, n = 300, k = 37, batch = 2;
  for (engine::Trans ta : {engine::Trans::none, engine::Trans::transpose})
    for (engine::Trans tb : {engine::Trans::none, engine::Trans::transpose})
      for (bool shared_b : {false, true}) {
        const int lda = (ta == engine::Trans::none ? k : m) + 3, ldb = (tb == engine::Trans::none ? n : k) + 5;
        const std::int64_t sa = std::int64_t(ta == engine::Trans::none ? m : k) * lda,
                           sb = shared_b ? 0 : std::int64_t(tb == engine::Trans::none ? k : n) * ldb,
                           sc = std::int64_t(m) * n;
        Rng rng(5, 0);
        std::vector<float> A(std::size_t(sa) * batch), B(std::size_t(tb == engine::Trans::none ? k : n) * ldb * batch);
        for (float& x : A) x = float(rng.normal());
        for (float& x : B) x = float(rng.normal());
        std::vector<float> A16 = A, B16 = B;
        for (float& x : A16) x = engine::round_to_bf16(x);
        for (float& x : B16) x = engine::round_to_bf16(x);
        auto product = [&](int threads, WeightType type, const std::vector<float>& a, const std::vector<float>& b) {
          engine::CpuBackend<float> be(threads);
          be.set_product_type(type);
          std::vector<float> c(std::size_t(sc) * batch);
          be.gemm(ta, tb, m, n, k, 1.0f, a.data(), lda, sa, b.data(), ldb, sb, 0.0f, c.data(), n, sc, batch);
          return c;
        };
        const std::vector<float> got = product(2, WeightType::bf16, A, B);
        const std::string what = std::to_string(int(ta)) + std::to_string(int(tb)) + (shared_b ? " shared B" : "");
        EXPECT_EQ(got, product(2, WeightType::f32, A16, B16)) << what;
        EXPECT_EQ(got, product(1, WeightType::bf16, A, B)) << what << ": threads";
        const std::vector<float> exact = product(2, WeightType::f32, A, B);
        double diff = 0, norm = 0;
        for (std::size_t i = 0; i < got.size(); ++i)
          diff += std::pow(got[i] - exact[i], 2), norm += std::pow(exact[i], 2);
        const double rel = std::sqrt(diff / norm);
        EXPECT_GT(rel, 4 * 0x1p-24 * k) << what << ": control: the operands were not rounded";
        EXPECT_LT(rel, 2 * engine::unit_roundoff(WeightType::bf16)) << what;
      }
}

// The attention's products at product type bf16 (q kᵀ, P v; dz vᵀ, dS k, dSᵀ q, Pᵀ dz): its output and
// every input gradient move from the float32 attention's by more than float rounding (control: they
// were rounded) and by less than bf16's 2 u relative (each product term's error), GQA with two
// segments of keys (ResFormer's Eq. 2) and several thread counts giving the same bits.
TEST(Bf16Products, TheAttentionRoundsItsProductsToo) {
  engine::AttentionShape s;
  s.B = 2, s.T = 24, s.H = 4, s.Hkv = 2, s.dk = 8, s.dv = 8, s.segments = 2;
  const std::size_t N = std::size_t(s.B) * s.T, kv = N * s.kv_heads();
  Rng rng(9, 0);
  auto normals = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = float(rng.normal());
    return v;
  };
  const std::vector<float> q = normals(N * s.H * s.dk), k = normals(kv * s.dk), v = normals(kv * s.dv),
                           dz = normals(N * s.H * s.dv);
  struct Out {
    std::vector<float> z, dq, dk, dv;
  };
  auto run = [&](WeightType type, int threads) {
    engine::CpuBackend<float> be(threads);
    be.set_product_type(type);
    const float scale = 1 / std::sqrt(8.0f);
    std::vector<float> pattern(std::size_t(s.B) * s.H * s.T * s.columns()), scratch(pattern.size());
    Out o{std::vector<float>(N * s.H * s.dv), std::vector<float>(q.size()), std::vector<float>(k.size()),
          std::vector<float>(v.size())};
    be.attention_forward(s, scale, q.data(), k.data(), v.data(), pattern.data(), o.z.data());
    be.attention_backward(s, scale, q.data(), k.data(), v.data(), pattern.data(), dz.data(), o.dq.data(),
                          o.dk.data(), o.dv.data(), scratch.data());
    return o;
  };
  auto rel = [](const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0, n = 0;
    for (std::size_t i = 0; i < a.size(); ++i) d += std::pow(a[i] - b[i], 2), n += std::pow(b[i], 2);
    return std::sqrt(d / n);
  };
  const Out f32 = run(WeightType::f32, 2), bf16 = run(WeightType::bf16, 2), bf16_one = run(WeightType::bf16, 1);
  const double u = engine::unit_roundoff(WeightType::bf16);
  for (auto [name, a, b, one] : {std::tuple{"z", &bf16.z, &f32.z, &bf16_one.z}, {"dq", &bf16.dq, &f32.dq, &bf16_one.dq},
                                 {"dk", &bf16.dk, &f32.dk, &bf16_one.dk}, {"dv", &bf16.dv, &f32.dv, &bf16_one.dv}}) {
    EXPECT_GT(rel(*a, *b), 4 * 0x1p-24 * s.T) << name << ": control: not rounded";
    EXPECT_LT(rel(*a, *b), 2 * u) << name;
    EXPECT_EQ(*a, *one) << name << ": threads";
  }
}

// A bf16 run's validation has its training's products: the evaluation pass (whose attention reduces
// its pattern block by block, attention_reduce) gives the training pass's loss, bit for bit, as it
// does in float32, in a model of GQA, one of SkipV1 and one of cross-layer attention (whose layers
// form their patterns). Control: bf16 moves the evaluation loss from float32's.
TEST(Bf16Products, ValidationHasTheProductsOfTraining) {
  for (const auto& [family, variant] : {std::pair{lm::Family::llama, "vanilla"}, {lm::Family::gpt2, "skipv1"},
                                        {lm::Family::gpt2, "resformer-cross"}}) {
    lm::Config c = lm::family_defaults(family, 2, 64, 4, 64, 64);
    if (family == lm::Family::llama) c.kv_heads = 2;
    c.variant.kind = lm::parse_variant(variant);
    engine::CpuBackend<float> be(2);
    lm::Model<float> model(c, be);
    model.initialize(3);
    const int B = 4, T = 64;
    std::vector<std::int32_t> ids(B * T), targets(B * T);
    for (int i = 0; i < B * T; ++i) ids[i] = (i * 7 + i / 5) % 64, targets[i] = (i * 7 + i / 5 + 3) % 64;
    auto loss = [&](lm::Pass pass) { return model.forward(ids.data(), targets.data(), B, T, pass, 1e-9).mean(); };
    const double eval32 = loss(lm::Pass::eval);
    EXPECT_EQ(eval32, loss(lm::Pass::train)) << variant << ": float32";
    be.set_product_type(WeightType::bf16);
    const double eval16 = loss(lm::Pass::eval);
    EXPECT_EQ(eval16, loss(lm::Pass::train)) << variant << ": bf16";
    EXPECT_NE(eval16, eval32) << variant << ": control: bf16 products gave the float32 loss";
  }
}

// Only f32 and, on a float backend, bf16 are offered; a scope restores the type it found.
TEST(Bf16Products, ProductTypesOfferedAndScoped) {
  engine::CpuBackend<float> be(1);
  EXPECT_THROW(be.set_product_type(WeightType::f16), std::invalid_argument);
  engine::CpuBackend<double> be64(1);
  EXPECT_THROW(be64.set_product_type(WeightType::bf16), std::invalid_argument);
  EXPECT_NO_THROW(be64.set_product_type(WeightType::f32));
  {
    const engine::ProductTypeScope<float> scope(be, WeightType::bf16);
    EXPECT_EQ(be.product_type(), WeightType::bf16);
  }
  EXPECT_EQ(be.product_type(), WeightType::f32);
}

// A tiny model of each family with weights large enough for sharp attention (the initialization's
// 0.02 gives near-uniform patterns, on which the analyses hardly depend on the weights).
lm::Checkpoint sharp_checkpoint(lm::Family family) {
  lm::Checkpoint ck;
  ck.config = lm::family_defaults(family, 2, 64, 4, 1500, 32);
  if (family == lm::Family::llama) ck.config.kv_heads = 2;
  const auto layout = lm::parameter_layout(ck.config, lm::make_plan(ck.config));
  ck.values = lm::initial_values<float>(ck.config, layout, 11);
  for (const auto& s : layout.specs())
    if (s.shape.size() == 2)
      for (std::size_t i = 0; i < s.size(); ++i) ck.values[s.offset + i] *= 12.0f;
  return ck;
}

// The Hugging Face directory `from` with every tensor rewritten by `bits16` (a float → its 16 bits).
void rewrite_as_bf16(const std::filesystem::path& from, const std::filesystem::path& to,
                     const std::function<std::uint16_t(float)>& bits16) {
  std::filesystem::create_directories(to);
  std::filesystem::copy_file(from / "config.json", to / "config.json");
  engine::SafeTensors file = engine::load_safetensors(from / "model.safetensors");
  for (auto& [name, t] : file.tensors) {
    std::vector<float> x(t.data.size() / 4);
    engine::decode_floats(t.dtype, t.data.data(), x.size(), x.data());
    t.dtype = engine::DType::BF16;
    t.data.resize(2 * x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::uint16_t b = bits16(x[i]);
      t.data[2 * i] = std::uint8_t(b & 0xFF), t.data[2 * i + 1] = std::uint8_t(b >> 8);
    }
  }
  engine::save_safetensors(to / "model.safetensors", file);
}

// Every number the budget covers, by name: each layer's entropy, similarity, largest eigenvalue of
// the value spectrum and first-token importance, and the eval loss.
std::map<std::string, std::vector<double>> measures(lm::Model<float>& model, const lm::TokenSequences& data) {
  analysis::Options o;
  o.batch = 4, o.threads = 1;
  const analysis::Report r = analysis::analyze(model, analysis::Kind::all, data, o);
  std::map<std::string, std::vector<double>> m;
  for (const auto& l : r.entropy) m["entropy"].push_back(l.summary.value);
  for (const auto& l : r.similarity) m["similarity"].push_back(l.summary.value);
  for (const auto& l : r.spectrum) m["spectrum"].push_back(l.max.value);
  for (const auto& l : r.first_token) m["first_token"].push_back(l.importance.ratio.value);
  m["loss"].push_back(lm::evaluate(model, data, 4).loss);
  return m;
}

// max over entries of |a − b| / |b|; for similarity, a cosine (in [−1, 1], near 0 in some layers), |a − b|.
double difference(const std::string& name, const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < b.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / (name == "similarity" ? 1.0 : std::abs(b[i])));
  return worst;
}

// docs/lm.md's measured budget of bf16 weights against the float32 path, per measure.
const std::map<std::string, double> kBf16Budget = {
    {"entropy", 2e-4}, {"similarity", 4e-4}, {"spectrum", 3e-3}, {"first_token", 3e-3}, {"loss", 3e-4}};

class Weight16Analyses : public ::testing::TestWithParam<lm::Family> {};

TEST_P(Weight16Analyses, Bf16CheckpointWithinTheBudgetOfFloat32AndTruncationIsNot) {
  ScratchDir dir;
  const lm::Checkpoint ck = sharp_checkpoint(GetParam());
  lm::export_hf(ck, dir / "f32");
  rewrite_as_bf16(dir / "f32", dir / "bf16", [](float x) { return engine::narrow_bits(x, WeightType::bf16); });
  rewrite_as_bf16(dir / "f32", dir / "trunc", [](float x) {  // the control: 3 bits of mantissa (bf16 keeps 7)
    return std::uint16_t(engine::narrow_bits(x, WeightType::bf16) & 0xFFF0u);
  });
  engine::CpuBackend<float> be(2);
  Rng rng(5, 0);
  lm::TokenSequences data{{}, 8, 32};
  for (int i = 0; i < 8 * 32; ++i) data.ids.push_back(std::int32_t(rng.next_u64() % 1500));

  const auto f32 = lm::load_model(dir / "f32", be, false, "auto");
  const auto bf16 = lm::load_model(dir / "bf16", be, false, "auto");
  const auto widened = lm::load_model(dir / "bf16", be, false, "f32");
  const auto rounded = lm::load_model(dir / "f32", be, false, "bf16");
  const auto trunc = lm::load_model(dir / "trunc", be, false, "auto");
  const auto half = lm::load_model(dir / "f32", be, false, "f16");
  EXPECT_EQ(f32->weight_type(), WeightType::f32);
  EXPECT_EQ(bf16->weight_type(), WeightType::bf16);
  EXPECT_EQ(widened->weight_type(), WeightType::f32);
  EXPECT_EQ(rounded->weight_type(), WeightType::bf16);
  EXPECT_EQ(half->weight_type(), WeightType::f16);

  const auto reference = measures(*f32, data), held = measures(*bf16, data);
  EXPECT_EQ(held, measures(*widened, data)) << "held as bf16 must be the float32 path over the widened weights";
  const auto converted = measures(*rounded, data), control = measures(*trunc, data), f16 = measures(*half, data);
  for (const auto& [name, budget] : kBf16Budget) {
    const double error = difference(name, held.at(name), reference.at(name));
    const double error_converted = difference(name, converted.at(name), reference.at(name));
    const double control_error = difference(name, control.at(name), reference.at(name));
    const double error_f16 = difference(name, f16.at(name), reference.at(name));
    std::printf("%s: bf16 file %.3g, --dtype bf16 %.3g, --dtype f16 %.3g, 3-bit control %.3g, budget %.3g\n",
                name.c_str(), error, error_converted, error_f16, control_error, budget);
    EXPECT_LE(error_f16, budget / 4) << name << " (f16: u is 2^-11, an eighth of bf16's)";
    EXPECT_LE(error, budget) << name;
    EXPECT_LE(error_converted, budget) << name << " (--dtype bf16 on the float32 checkpoint)";
    EXPECT_GT(error, 0.0) << name << ": bf16 weights must move the number (else the test compares a model to itself)";
    EXPECT_GT(control_error, 5 * budget) << name << ": the control must exceed the budget by a wide margin";
  }
}

// The commands: --dtype auto holds a bf16 checkpoint in bf16 and says so (dtype, error_model), the
// loss within the budget of --dtype f32's; a --dtype that is not one of the four exits 2, one line.
TEST(Weight16Command, LmEvalAndAnalyzeReportTheTypeUsed) {
  ScratchDir dir;
  lm::export_hf(sharp_checkpoint(lm::Family::llama), dir / "f32");
  rewrite_as_bf16(dir / "f32", dir / "bf16", [](float x) { return engine::narrow_bits(x, WeightType::bf16); });
  std::vector<std::int32_t> ids;
  for (int i = 0; i < 4 * 32; ++i) ids.push_back((i * 37) % 1500);
  corpus::write_tokens_npy(dir / "t.npy", ids, 4, 32);
  const auto eval = [&](const std::string& dtype) {
    const auto r = run_qkvlab("lm eval " + shell_quoted(dir / "bf16") + " --tokens " + shell_quoted(dir / "t.npy") +
                              " --quiet --format json" + dtype);
    EXPECT_EQ(r.status, 0) << r.err;
    return engine::parse_json(r.out);
  };
  const auto field = [](const engine::Json& j, const std::string& key) {
    return j.items[std::size_t(std::find(j.keys.begin(), j.keys.end(), key) - j.keys.begin())].text;
  };
  const engine::Json held = eval(""), widened = eval(" --dtype f32");
  EXPECT_EQ(field(held, "dtype"), "bf16");
  EXPECT_NE(field(held, "error_model").find("2^-8"), std::string::npos) << field(held, "error_model");
  EXPECT_EQ(field(widened, "dtype"), "f32");
  EXPECT_EQ(field(held, "loss"), field(widened, "loss")) << "the same math over the same (widened) weights";
  const auto a = run_qkvlab("analyze entropy " + shell_quoted(dir / "bf16") + " --tokens " + shell_quoted(dir / "t.npy") +
                            " --quiet --format json --dtype f16");
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(field(engine::parse_json(a.out), "dtype"), "f16");
  const auto bad = run_qkvlab("lm eval " + shell_quoted(dir / "bf16") + " --tokens " + shell_quoted(dir / "t.npy") +
                              " --dtype f8");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("--dtype"), std::string::npos) << bad.err;
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
}

INSTANTIATE_TEST_SUITE_P(Families, Weight16Analyses, ::testing::Values(lm::Family::gpt2, lm::Family::llama),
                         [](const auto& info) { return info.param == lm::Family::gpt2 ? "gpt2" : "llama"; });

// 2 bytes per weight: the bf16 model's parameter storage against the float32 model's.
TEST(Weight16, Bf16ModelsHoldTheirWeightsInTwoBytes) {
  engine::CpuBackend<float> be(1);
  for (lm::Family f : {lm::Family::gpt2, lm::Family::llama}) {
    const lm::Config c = sharp_checkpoint(f).config;
    const lm::Model<float> f32(c, be), bf16(c, be, WeightType::bf16), f16(c, be, WeightType::f16);
    const auto layout = lm::parameter_layout(c, lm::make_plan(c));
    EXPECT_EQ(f32.weight_bytes(), 4 * layout.total());  // the control: float32, 4 bytes each
    const double ratio = double(bf16.weight_bytes()) / double(f32.weight_bytes());
    std::printf("%s: %zu bytes in f32, %zu in bf16 (%.4f)\n", f == lm::Family::gpt2 ? "gpt2" : "llama",
                f32.weight_bytes(), bf16.weight_bytes(), ratio);
    EXPECT_GE(ratio, 0.5);
    EXPECT_LE(ratio, 0.53);
    EXPECT_EQ(f16.weight_bytes(), bf16.weight_bytes());
  }
}

// A finite weight beyond f16's range (65520 and up) would be held as ±inf: refused, naming the
// tensor and the wider types. Control: the same value held in bf16 loads.
TEST(Weight16, AWeightBeyondF16sRangeIsRefusedNamingTheTensor) {
  engine::CpuBackend<float> be(1);
  const lm::Config c = sharp_checkpoint(lm::Family::llama).config;
  const std::string name = lm::layer_tensor(0, "attn.q.weight");
  const auto layout = lm::parameter_layout(c, lm::make_plan(c));
  std::vector<float> values(layout.at(name).size(), 0.5f);
  values[3] = 1e5f;
  lm::Model<float> f16(c, be, WeightType::f16), bf16(c, be, WeightType::bf16);
  try {
    f16.store(name, values.data(), values.size());
    ADD_FAILURE() << "an f16 overflow was held as inf";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(name + "\" element 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--dtype bf16"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(bf16.store(name, values.data(), values.size()));
}

}  // namespace
