// Hugging Face checkpoints in and out (lm/model_files.hpp, lm/hf.hpp): tiny
// HF directories written by tests/hf_fixtures.py (numpy, safetensors bytes by
// hand), loaded into lm::Model<float>, whose mean loss on fixed tokens must
// equal that of an independent numpy float64 implementation written from the
// HF layout (tests/hf_reference.py) to float32 rounding.
//
// Tolerance: |loss − reference| ≤ 1e3 · u · |reference|, u = 2^-24 (float32's
// unit roundoff): the project's error budget (e ≤ 1e3, κ = 1; docs/math/conventions.md)
// for a float32 forward against a float64 one on the same weights (BF16 and
// F16 values widen exactly, so both sides see the same numbers); measured
// e = |loss − reference| / (u · reference) is below 1. Each test has controls,
// the loader's likely bugs planted (a wrong transpose, q and k swapped in
// GPT-2's c_attn, BF16 bits decoded as F16): each must move the loss by a
// relative 1e-3 or more (docs/math/conventions.md's rule for a control), far outside the
// tolerance.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <numbers>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/errors.hpp"
#include "corpus/token_file.hpp"
#include "engine/json.hpp"
#include "engine/cpu_backend.hpp"
#include "lm/checkpoint.hpp"
#include "lm/hf.hpp"
#include "lm/hf_config.hpp"
#include "lm/model.hpp"
#include "lm/model_files.hpp"
#include "lm/parameters.hpp"
#include "run_command.hpp"
#include "scratch_dir.hpp"

namespace {

namespace fs = std::filesystem;
using namespace qkvlab;
using test_support::run_command;
using test_support::run_qkvlab;
using test_support::ScratchDir;
using test_support::shell_quoted;

constexpr double kU = 0x1p-24;
constexpr double kBudget = 1e3;

std::string python() { return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3"; }
std::string script(const std::string& name) { return shell_quoted(fs::path(QKVLAB_SOURCE_DIR) / "tests" / name); }

void fixture(const std::string& args) {
  const auto r = run_command(python() + " " + script("hf_fixtures.py") + " " + args);
  ASSERT_EQ(r.status, 0) << args << "\n" << r.err;
}

std::vector<std::int32_t> tokens(int T, int vocab) {
  std::vector<std::int32_t> ids(std::size_t(T), 0);
  std::uint64_t x = 12345;
  for (auto& id : ids) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    id = std::int32_t((x >> 33) % std::uint64_t(vocab));
  }
  return ids;
}

std::string joined(const std::vector<std::int32_t>& ids) {
  std::string s;
  for (auto id : ids) {
    if (!s.empty()) s += ',';
    s += std::to_string(id);
  }
  return s;
}

double reference_loss(const fs::path& dir, const std::vector<std::int32_t>& ids) {
  const auto r = run_command(python() + " " + script("hf_reference.py") + " " + shell_quoted(dir) + " --tokens " + joined(ids));
  EXPECT_EQ(r.status, 0) << r.err;
  const auto at = r.out.find("\"loss\": ");
  return at == std::string::npos ? NAN : std::stod(r.out.substr(at + 8));
}

double model_loss(lm::Model<float>& model, const std::vector<std::int32_t>& ids) {
  std::vector<std::int32_t> targets(ids.begin() + 1, ids.end());
  targets.push_back(-1);
  return model.forward(ids.data(), targets.data(), 1, int(ids.size()), lm::Pass::eval).mean();
}

// The model's loss after `bug` edits its parameter values (a loader bug, planted).
template <class Bug>
double loss_with(lm::Model<float>& model, const std::vector<std::int32_t>& ids, Bug bug) {
  const std::vector<float> saved = model.parameter_values();
  std::vector<float> values = saved;
  bug(model.parameters().layout, values);
  model.set_parameters(values);
  const double loss = model_loss(model, ids);
  model.set_parameters(saved);
  return loss;
}

double tolerance(double reference) { return kBudget * kU * std::abs(reference); }

// A control's loss is off by a relative 1e-3 or more (NaN and infinity count as off).
bool off(double control, double reference) { return !(std::abs(control - reference) < 1e-3 * std::abs(reference)); }

struct Loaded {
  engine::CpuBackend<float> backend{1};
  std::unique_ptr<lm::Model<float>> model;
};

void transpose_square(const engine::ParameterLayout& layout, std::vector<float>& v, const std::string& name) {
  const auto& s = layout.at(name);
  ASSERT_EQ(s.shape[0], s.shape[1]) << name;
  const std::size_t n = std::size_t(s.shape[0]);
  float* x = v.data() + s.offset;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) std::swap(x[i * n + j], x[j * n + i]);
}

TEST(LmHf, Gpt2SingleF32FileWithPrefixAndMaskBuffersMatchesTheReference) {
  ScratchDir dir;
  fixture("gpt2 " + shell_quoted(dir / "g") + " --dtype F32 --prefix transformer.");
  const lm::ModelFiles files = lm::open_model(dir / "g");
  EXPECT_EQ(files.format, "gpt2");
  EXPECT_EQ(files.config.family, lm::Family::gpt2);
  EXPECT_TRUE(files.config.bias && files.config.tied);
  EXPECT_EQ(files.config.gelu, lm::GeluForm::tanh);
  Loaded m;
  m.model = lm::load_model(dir / "g", m.backend);
  const auto ids = tokens(16, 61);
  const double ref = reference_loss(dir / "g", ids), loss = model_loss(*m.model, ids);
  EXPECT_NEAR(loss, ref, tolerance(ref)) << "e = " << std::abs(loss - ref) / (kU * ref);
  std::cout << "gpt2: loss " << loss << ", reference " << ref << ", e = " << std::abs(loss - ref) / (kU * ref) << "\n";

  // Controls: q and k swapped in c_attn's split; c_proj read as nn.Linear (transposed).
  const double swapped = loss_with(*m.model, ids, [](const engine::ParameterLayout& l, std::vector<float>& v) {
    const auto &q = l.at("h.0.attn.q.weight"), &k = l.at("h.0.attn.k.weight");
    std::swap_ranges(v.begin() + std::ptrdiff_t(q.offset), v.begin() + std::ptrdiff_t(q.offset + q.size()),
                     v.begin() + std::ptrdiff_t(k.offset));
  });
  const double transposed = loss_with(*m.model, ids, [](const engine::ParameterLayout& l, std::vector<float>& v) {
    transpose_square(l, v, "h.1.attn.o.weight");
  });
  EXPECT_TRUE(off(swapped, ref)) << swapped;
  EXPECT_TRUE(off(transposed, ref)) << transposed;
  std::cout << "controls: q/k swapped " << swapped << ", c_proj transposed " << transposed << "\n";
}

TEST(LmHf, LlamaGqaBf16InTwoShardsMatchesTheReference) {
  ScratchDir dir;
  fixture("llama " + shell_quoted(dir / "l") + " --dtype BF16 --shards 2");
  fixture("llama " + shell_quoted(dir / "l32") + " --dtype F32");  // the same weights, not rounded
  ASSERT_TRUE(fs::exists(dir / "l" / "model.safetensors.index.json"));
  const lm::ModelFiles files = lm::open_model(dir / "l");
  EXPECT_EQ(files.shards.size(), 2u);
  EXPECT_EQ(files.config.family, lm::Family::llama);
  EXPECT_EQ(files.config.heads, 4);
  EXPECT_EQ(files.config.kv_heads, 2);
  EXPECT_FALSE(files.config.tied);
  EXPECT_EQ(files.config.rope_theta, 1000.0);
  EXPECT_EQ(files.config.norm_eps, 1e-5);
  Loaded m;
  m.model = lm::load_model(dir / "l", m.backend);
  const auto ids = tokens(32, 53);
  const double ref = reference_loss(dir / "l", ids), loss = model_loss(*m.model, ids);
  EXPECT_NEAR(loss, ref, tolerance(ref)) << "e = " << std::abs(loss - ref) / (kU * ref);
  std::cout << "llama bf16: loss " << loss << ", reference " << ref << ", e = " << std::abs(loss - ref) / (kU * ref)
            << "\n";

  // Controls: q_proj used as stored (no transpose); BF16 bits decoded as F16.
  const double untransposed = loss_with(*m.model, ids, [](const engine::ParameterLayout& l, std::vector<float>& v) {
    for (int i = 0; i < 2; ++i) transpose_square(l, v, lm::layer_tensor(i, "attn.q.weight"));
  });
  const double as_f16 = loss_with(*m.model, ids, [](const engine::ParameterLayout& l, std::vector<float>& v) {
    for (const auto& s : l.specs())
      for (std::size_t i = 0; i < s.size(); ++i) {
        const std::uint8_t bits[2] = {std::uint8_t(std::bit_cast<std::uint32_t>(v[s.offset + i]) >> 16),
                                      std::uint8_t(std::bit_cast<std::uint32_t>(v[s.offset + i]) >> 24)};
        engine::decode_floats(engine::DType::F16, bits, 1, &v[s.offset + i]);
      }
  });
  EXPECT_TRUE(off(untransposed, ref)) << untransposed;
  EXPECT_TRUE(off(as_f16, ref)) << as_f16;
  // For the record: the same weights unrounded (F32) move the loss by less than the budget.
  const double unrounded = reference_loss(dir / "l32", ids);
  std::cout << "controls: q_proj untransposed " << untransposed << ", BF16 read as F16 " << as_f16
            << "; F32 (unrounded) reference " << unrounded << " (e = " << std::abs(unrounded - ref) / (kU * ref) << ")\n";
}

// Other layouts of the same loader: untied GPT-2 in F16 without buffers or
// prefix, GPT-2 with the erf GELU, tied Llama in F32 without prefix, Mistral.
TEST(LmHf, OtherLayoutsMatchTheReference) {
  struct Case {
    std::string family, args;
    int vocab, T;
  };
  const std::vector<Case> cases = {{"gpt2", "--dtype F16 --untied --no-buffers --prefix ''", 61, 16},
                                   {"gpt2", "--config activation_function='\"gelu\"'", 61, 9},
                                   {"llama", "--dtype F32 --tied --prefix ''", 53, 32},
                                   {"llama", "--mistral --shards 3", 53, 20}};
  for (const Case& c : cases) {
    ScratchDir dir;
    fixture(c.family + " " + shell_quoted(dir / "m") + " " + c.args);
    Loaded m;
    m.model = lm::load_model(dir / "m", m.backend);
    const auto ids = tokens(c.T, c.vocab);
    const double ref = reference_loss(dir / "m", ids), loss = model_loss(*m.model, ids);
    EXPECT_NEAR(loss, ref, tolerance(ref)) << c.family << " " << c.args;
  }
}

// Llama 3.1's rope_scaling "llama3" against the reference's statement of it. At d_h = 8, θ = 1000
// and an original context of 64, the four frequencies fall in all three bands (kept, blended,
// divided by the factor). Control: the same weights without the scaling give a loss that is off,
// so a loader that ignored it would fail the comparison.
TEST(LmHf, Llama31RopeScalingMatchesTheReference) {
  ScratchDir dir;
  const std::string scaling = R"('{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, )"
                              R"("high_freq_factor": 4.0, "original_max_position_embeddings": 64}')";
  fixture("llama " + shell_quoted(dir / "s") + " --dtype F32 --config rope_scaling=" + scaling);
  fixture("llama " + shell_quoted(dir / "u") + " --dtype F32");
  Loaded m;
  m.model = lm::load_model(dir / "s", m.backend);
  const lm::Config& c = m.model->config();
  EXPECT_EQ(c.rope_factor, 8.0);
  EXPECT_EQ(c.rope_original_context, 64.0);
  const auto f = c.rope_frequencies();
  const double w1 = std::pow(1000.0, -2.0 / 8);  // wavelength 35.3: between 64/4 and 64/1
  const double g = (64 / (2 * std::numbers::pi / w1) - 1) / 3;
  EXPECT_EQ(f.omega(0, 8), 1.0);
  EXPECT_DOUBLE_EQ(f.omega(1, 8), (1 - g) * w1 / 8 + g * w1);
  EXPECT_DOUBLE_EQ(f.omega(3, 8), std::pow(1000.0, -6.0 / 8) / 8);
  const auto ids = tokens(32, 53);
  const double ref = reference_loss(dir / "s", ids), loss = model_loss(*m.model, ids);
  EXPECT_NEAR(loss, ref, tolerance(ref)) << "e = " << std::abs(loss - ref) / (kU * ref);
  const double unscaled = reference_loss(dir / "u", ids);
  EXPECT_TRUE(off(unscaled, ref)) << "scaled " << ref << ", unscaled " << unscaled;
  std::cout << "llama3 rope scaling: loss " << loss << ", reference " << ref << ", unscaled reference " << unscaled
            << "\n";
  // The export writes the scaling back in the form the loader reads.
  const lm::Config back = lm::parse_hf_config(lm::hf_config_json(c), "export").config;
  EXPECT_EQ(lm::to_metadata(back), lm::to_metadata(c));
}

TEST(LmHf, ThePrefixIsOptionalAndChangesNothing) {
  ScratchDir dir;
  for (const std::string family : {"gpt2", "llama"}) {
    const std::string prefix = family == "gpt2" ? "transformer." : "model.";
    fixture(family + " " + shell_quoted(dir / (family + "_with")) + " --prefix " + prefix);
    fixture(family + " " + shell_quoted(dir / (family + "_without")) + " --prefix ''");
    const auto with = lm::open_model(dir / (family + "_with")), without = lm::open_model(dir / (family + "_without"));
    const auto layout = lm::parameter_layout(with.config, lm::make_plan(with.config));
    std::vector<float> a(layout.total()), b(layout.total());
    lm::read_parameters(with, layout, [&](const auto& s, const float* x) { std::copy(x, x + s.size(), a.begin() + std::ptrdiff_t(s.offset)); });
    lm::read_parameters(without, layout, [&](const auto& s, const float* x) { std::copy(x, x + s.size(), b.begin() + std::ptrdiff_t(s.offset)); });
    EXPECT_EQ(a, b) << family;
    // Control: a prefix the loader does not know leaves every tensor unrecognized.
    fixture(family + " " + shell_quoted(dir / (family + "_wrong")) + " --prefix decoder.");
    EXPECT_THROW(lm::open_model(dir / (family + "_wrong")), UsageError) << family;
  }
}

// A broken directory: one line naming the problem (UsageError), and exit 2 from the CLI.
void expect_refused(const fs::path& dir, const std::string& needle) {
  try {
    lm::open_model(dir);
    ADD_FAILURE() << "accepted: " << dir << " (expected: " << needle << ")";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  const auto r = run_qkvlab("params " + shell_quoted(dir));
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(LmHf, BrokenDirectoriesAreRefusedNamingTheProblem) {
  ScratchDir dir;
  int k = 0;
  auto make = [&](const std::string& args) {
    const fs::path p = dir / ("case" + std::to_string(k++));
    fixture(args.substr(0, args.find(' ')) + " " + shell_quoted(p) + args.substr(args.find(' ')));
    return p;
  };
  expect_refused(make("gpt2 --drop h.1.mlp.c_fc.bias"), "missing tensor \"transformer.h.1.mlp.c_fc.bias\"");
  expect_refused(make("gpt2 --extra h.0.attn.rotary"), "unknown tensor \"transformer.h.0.attn.rotary\"");
  expect_refused(make("gpt2 --extra h.2.attn.bias"), "unknown tensor \"transformer.h.2.attn.bias\"");  // layer 3 of 2
  expect_refused(make("gpt2 --reshape h.0.attn.c_attn.weight"), "\"transformer.h.0.attn.c_attn.weight\" has shape [3071]");
  expect_refused(make("gpt2 --config n_embd=48"), "has shape");
  expect_refused(make("gpt2 --config activation_function='\"relu\"'"), "activation_function \"relu\"");
  expect_refused(make("gpt2 --config model_type='\"bert\"'"), "unsupported model_type \"bert\"");
  expect_refused(make("llama --config rope_scaling='{\"type\": \"linear\", \"factor\": 2.0}'"),
                 "rope_scaling (type \"linear\") is not implemented");
  expect_refused(make("llama --config attention_bias=true"), "attention_bias and mlp_bias differ");
  expect_refused(make("llama --config num_key_value_heads=3"), "multiple of the key/value heads");
  expect_refused(make("llama --drop layers.1.self_attn.k_proj.weight --shards 2"),
                 "missing tensor \"model.layers.1.self_attn.k_proj.weight\"");
  expect_refused(make("llama --dtype F64 --config num_key_value_heads=4"), "has shape");
  // The index: a shard that is not there, a name that leaves the directory, a tensor the index does not list.
  const fs::path sharded = make("llama --shards 2");
  fs::remove(sharded / "model-00002-of-00002.safetensors");
  expect_refused(sharded, "shard \"model-00002-of-00002.safetensors\"");
  const fs::path escaping = make("llama --shards 2");
  {
    std::ifstream in(escaping / "model.safetensors.index.json");
    std::stringstream text;
    text << in.rdbuf();
    std::string s = text.str();
    s.replace(s.find("\"model-00001"), 1, "\"../");
    std::ofstream(escaping / "model.safetensors.index.json") << s;
  }
  expect_refused(escaping, "is not a plain file name");
  // A model.safetensors that is a FIFO or a directory: "not a regular file" (it was "no model.safetensors
  // or model.safetensors.index.json"; lm eliminate's and lm convert's reader: "no model.safetensors"),
  // the FIFO opened without blocking.
  for (const std::string what : {"fifo", "directory"}) {
    const fs::path p = make("gpt2 --seed 7");
    fs::remove(p / "model.safetensors");
    if (what == "fifo") ASSERT_EQ(::mkfifo((p / "model.safetensors").c_str(), 0600), 0);
    else fs::create_directory(p / "model.safetensors");
    expect_refused(p, "model.safetensors: not a regular file");
    EXPECT_NE(test_support::usage_error([&] { lm::load_checkpoint(p); }).find("model.safetensors: not a regular file"),
              std::string::npos) << what;
  }
}

// Old Llama checkpoints carry each layer's RoPE inv_freq, which transformers computed in float32
// (1 / θ^(2i/d_h), the exponent rounded): such a buffer loads at a head width that is not a power of
// two and θ = 5e5, and in F16 where θ = 1e6 puts the lowest frequencies among f16's subnormals.
// Control: a buffer computed at another θ is refused, with both values in full.
TEST(LmHf, RopeInvFreqBuffersAsTransformersWroteThemLoad) {
  ScratchDir dir;
  fixture("llama " + shell_quoted(dir / "f32") + " --head-dim 10 --inv-freq F32 --config rope_theta=500000.0");
  EXPECT_NO_THROW(lm::open_model(dir / "f32"));
  fixture("llama " + shell_quoted(dir / "f16") + " --head-dim 16 --inv-freq F16 --config rope_theta=1000000.0");
  EXPECT_NO_THROW(lm::open_model(dir / "f16"));
  fixture("llama " + shell_quoted(dir / "other") +
          " --head-dim 10 --inv-freq F32 --inv-freq-theta 510000 --config rope_theta=500000.0");
  expect_refused(dir / "other", "tensor \"model.layers.0.self_attn.rotary_emb.inv_freq\" disagrees with rope_theta 500000 at 1 (");
}

// A non-finite weight is named by its element in the stored tensor, as the file's reader counts it:
// in a Llama q_proj (stored [out, in], the toolkit's tensor its transpose) and in GPT-2's c_attn (the
// toolkit's q, k and v are blocks of its columns). Control: element 0 is reported as 0.
TEST(LmHf, ANonFiniteWeightIsNamedByItsStoredElement) {
  ScratchDir dir;
  for (const auto& [family, tensor, k] :
       {std::tuple{"llama", "layers.0.self_attn.q_proj.weight", 3}, {"llama", "layers.0.self_attn.q_proj.weight", 0},
        {"gpt2", "h.0.attn.c_attn.weight", 100}}) {
    const fs::path p = dir / (std::string(family) + std::to_string(k));
    fixture(std::string(family) + " " + shell_quoted(p) + " --nan " + tensor + ":" + std::to_string(k));
    engine::CpuBackend<float> be(1);
    try {
      lm::load_model(p, be);
      ADD_FAILURE() << "a NaN weight loaded: " << tensor;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(tensor) + "\" holds a non-finite weight (nan at element " +
                                           std::to_string(k) + ")"),
                std::string::npos)
          << e.what();
    }
  }
}

// A finite weight beyond the type it is read into is named as the file stores it, as an overflow: an
// F64 value past float's range (it was called "non-finite": inf), and under --dtype f16 a Llama
// up_proj value past f16's (it was named by the toolkit's name and index, "h.0.mlp.up.weight"
// element 240, the transpose's). Controls: a NaN in the F64 file is still non-finite; with
// --allow-nonfinite the F64 one loads; the f16 one loads in bf16.
TEST(LmHf, AWeightBeyondItsTypesRangeIsAnOverflowNamedAsStored) {
  ScratchDir dir;
  engine::CpuBackend<float> be(1);
  const auto refusal = [&](const fs::path& p, const std::string& dtype) {
    return test_support::usage_error([&] { lm::load_model(p, be, false, dtype); });
  };
  fixture("gpt2 " + shell_quoted(dir / "big") + " --dtype F64 --set h.0.ln_1.weight:3=1e300");
  EXPECT_NE(refusal(dir / "big", "auto").find("tensor \"transformer.h.0.ln_1.weight\" element 3 (1e+300) overflows float32"),
            std::string::npos)
      << refusal(dir / "big", "auto");
  EXPECT_NO_THROW(lm::load_model(dir / "big", be, true));
  fixture("gpt2 " + shell_quoted(dir / "nan") + " --dtype F64 --nan h.0.ln_1.weight:3");
  EXPECT_NE(refusal(dir / "nan", "auto").find("\"transformer.h.0.ln_1.weight\" holds a non-finite weight (nan at element 3)"),
            std::string::npos)
      << refusal(dir / "nan", "auto");
  fixture("llama " + shell_quoted(dir / "f16") + " --dtype F32 --set layers.0.mlp.up_proj.weight:5=70000");
  EXPECT_NE(refusal(dir / "f16", "f16").find("model.safetensors: tensor \"model.layers.0.mlp.up_proj.weight\" element 5 "
                                             "(70000) overflows f16"),
            std::string::npos)
      << refusal(dir / "f16", "f16");
  EXPECT_NO_THROW(lm::load_model(dir / "f16", be, false, "bf16"));
}

// A tied model whose file also stores lm_head.weight (transformers writes it, and ties it on loading)
// loads when the head is the embedding, bit for bit, in both families; a head that differs
// contradicts config.json's tie and is refused.
TEST(LmHf, ATiedModelsStoredHeadLoadsWhenItIsTheEmbedding) {
  ScratchDir dir;
  for (const std::string family : {"gpt2", "llama --tied"}) {
    const std::string name = family.substr(0, family.find(' '));
    fixture(family + " " + shell_quoted(dir / (name + "-same")) + " --head-copy same");
    EXPECT_TRUE(lm::open_model(dir / (name + "-same")).config.tied) << family;
    fixture(family + " " + shell_quoted(dir / (name + "-other")) + " --head-copy other");
    expect_refused(dir / (name + "-other"), "differs from the embedding, which config.json ties it to");
  }
}

TEST(LmHf, AnUntiedGpt2WithoutItsHeadIsRefusedAndWithItLoads) {
  // The case above, spelled out: --untied writes lm_head.weight (its own weights); a tied config with
  // it is contradicted (a head that is the embedding loads: ATiedModelsStoredHeadLoadsWhenItIsTheEmbedding).
  ScratchDir dir;
  fixture("gpt2 " + shell_quoted(dir / "u") + " --untied");
  EXPECT_NO_THROW(lm::open_model(dir / "u"));
  fixture("gpt2 " + shell_quoted(dir / "t") + " --untied --config tie_word_embeddings=true");
  expect_refused(dir / "t", "tensor \"lm_head.weight\" differs from the embedding");
  fixture("gpt2 " + shell_quoted(dir / "n") + " --config tie_word_embeddings=false");
  expect_refused(dir / "n", "missing tensor \"lm_head.weight\"");
}

TEST(LmHf, ConfigJsonMapsToTheToolkitsConfig) {
  // GPT-2: n_ctx when n_positions is absent, n_inner, the erf GELU, an untied head.
  auto c = lm::parse_hf_config(R"({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 3, "n_ctx": 128,
                                   "vocab_size": 100, "n_inner": 200, "activation_function": "gelu",
                                   "tie_word_embeddings": false, "layer_norm_epsilon": 1e-6})", "c").config;
  EXPECT_EQ(c.positions, 128);
  EXPECT_EQ(c.ffn, 200);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.gelu, lm::GeluForm::erf);
  EXPECT_FALSE(c.tied);
  EXPECT_EQ(c.norm_eps, 1e-6);
  // Llama: head_dim given (H·d_h ≠ d), GQA, HF's defaults for what is absent.
  c = lm::parse_hf_config(R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                              "num_key_value_heads": 1, "head_dim": 32, "num_hidden_layers": 2,
                              "intermediate_size": 96, "vocab_size": 10})", "c").config;
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.kv_heads, 1);
  EXPECT_EQ(c.positions, 2048);
  EXPECT_EQ(c.norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 10000);
  EXPECT_FALSE(c.tied || c.bias);
  // Mistral: a sliding window below the context becomes the positions; null means none; absent is 4096.
  const std::string mistral = R"({"model_type": "mistral", "hidden_size": 64, "num_attention_heads": 4,
                                  "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 96,
                                  "vocab_size": 10, "max_position_embeddings": 32768)";
  EXPECT_EQ(lm::parse_hf_config(mistral + R"(, "sliding_window": 1024})", "c").config.positions, 1024);
  EXPECT_EQ(lm::parse_hf_config(mistral + R"(, "sliding_window": null})", "c").config.positions, 32768);
  EXPECT_EQ(lm::parse_hf_config(mistral + "}", "c").config.positions, 4096);
  // rope_scaling: "default" is no scaling; "llama3" needs all four of its numbers.
  const std::string llama = R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                                "num_hidden_layers": 2, "intermediate_size": 96, "vocab_size": 10, "rope_scaling": )";
  EXPECT_EQ(lm::parse_hf_config(llama + R"({"rope_type": "default"}})", "c").config.rope_original_context, 0);
  c = lm::parse_hf_config(llama + R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})", "c")
          .config;
  EXPECT_EQ(c.rope_factor, 8);
  EXPECT_EQ(c.rope_low_freq_factor, 1);
  EXPECT_EQ(c.rope_high_freq_factor, 4);
  EXPECT_EQ(c.rope_original_context, 8192);
  try {
    lm::parse_hf_config(llama + R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0}})", "c");
    ADD_FAILURE() << "a llama3 scaling without original_max_position_embeddings was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("original_max_position_embeddings"), std::string::npos) << e.what();
  }
}

lm::Checkpoint random_checkpoint(lm::Config c, std::uint64_t seed) {
  lm::Checkpoint ck;
  ck.config = c;
  const auto layout = lm::parameter_layout(c, lm::make_plan(c));
  ck.values = lm::initial_values<float>(c, layout, seed);
  // Non-trivial gains and biases, so a misplaced one shows.
  std::uint64_t x = seed;
  for (const auto& s : layout.specs())
    if (s.shape.size() == 1)
      for (std::size_t i = 0; i < s.size(); ++i) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        ck.values[s.offset + i] += float(double(x >> 40) / double(1ULL << 24) - 0.5) * 0.4f;
      }
  return ck;
}

lm::Config small(lm::Family f, bool tied, bool bias, int kv_heads) {
  lm::Config c = lm::family_defaults(f, 2, 32, 4, 50, 24);
  c.tied = tied, c.bias = bias, c.kv_heads = kv_heads;
  return c;
}

TEST(LmHf, OwnCheckpointsOpenThroughTheSameLoader) {
  ScratchDir dir;
  const lm::Checkpoint ck = random_checkpoint(small(lm::Family::llama, false, true, 2), 3);
  lm::save_checkpoint(dir / "own", ck);
  const lm::ModelFiles files = lm::open_model(dir / "own");
  EXPECT_EQ(files.format, "qkvlab");
  const lm::Checkpoint back = lm::load_checkpoint(dir / "own");
  EXPECT_EQ(back.values, ck.values);
}

TEST(LmHf, ExportWritesTheHfLayoutThatReadsBackExactly) {
  struct Case {
    lm::Config config;
    std::string what;
  };
  const std::vector<Case> cases = {{small(lm::Family::gpt2, true, true, 4), "gpt2 tied with biases"},
                                   {small(lm::Family::gpt2, false, false, 4), "gpt2 untied, no biases"},
                                   {small(lm::Family::llama, false, false, 2), "llama GQA untied"},
                                   {small(lm::Family::llama, true, true, 4), "llama tied with biases"}};
  for (const Case& c : cases) {
    ScratchDir dir;
    const lm::Checkpoint ck = random_checkpoint(c.config, 5);
    lm::save_checkpoint(dir / "own", ck);
    const auto r = run_qkvlab("lm export " + shell_quoted(dir / "own") + " --hf " + shell_quoted(dir / "hf"));
    ASSERT_EQ(r.status, 0) << c.what << r.err;
    const lm::ModelFiles files = lm::open_model(dir / "hf");
    EXPECT_EQ(files.format, c.config.family == lm::Family::gpt2 ? "gpt2" : "llama") << c.what;
    // The values read back equal the checkpoint's (a bias-free gpt2 reads back with zero biases).
    const auto layout = lm::parameter_layout(files.config, lm::make_plan(files.config));
    const auto own_layout = lm::parameter_layout(c.config, lm::make_plan(c.config));
    read_parameters(files, layout, [&](const engine::ParameterSpec& s, const float* x) {
      const engine::ParameterSpec* mine = own_layout.find(s.name);
      for (std::size_t i = 0; i < s.size(); ++i)
        ASSERT_EQ(x[i], mine ? ck.values[mine->offset + i] : 0.0f) << c.what << " " << s.name << "[" << i << "]";
    });
    // The same loss from our model on the checkpoint, and from the numpy reference on the export.
    engine::CpuBackend<float> backend(1);
    lm::Model<float> model(c.config, backend);
    model.set_parameters(ck.values);
    const auto ids = tokens(20, 50);
    const double loss = model_loss(model, ids), ref = reference_loss(dir / "hf", ids);
    EXPECT_NEAR(loss, ref, tolerance(ref)) << c.what;
  }
}

// An export replaces an earlier export's files, never another model's: a model.safetensors and
// config.json that no export wrote (here an own checkpoint's, without its manifest) are refused,
// every file as it was. config.json is removed first and written last: an export cut short (its
// tokenizer.json cannot be written) leaves no configuration, so no reader loads the new weights
// with the old configuration. Control: the same export twice into one directory.
TEST(LmHf, ExportReplacesOnlyAnEarlierExportAndWritesItsConfigurationLast) {
  ScratchDir dir;
  const lm::Checkpoint ck = random_checkpoint(small(lm::Family::gpt2, true, true, 4), 7);
  for (int k = 0; k < 2; ++k) ASSERT_NO_THROW(lm::export_hf(ck, dir / "hf")) << k;
  EXPECT_EQ(lm::open_model(dir / "hf").format, "gpt2");
  lm::save_checkpoint(dir / "own", ck);
  fs::create_directories(dir / "other");
  for (const char* name : {"model.safetensors", "config.json"}) fs::copy_file(dir / "own" / name, dir / "other" / name);
  const auto weights = fs::file_size(dir / "other" / "model.safetensors");
  const std::string refused = test_support::usage_error([&] { lm::export_hf(ck, dir / "other"); });
  EXPECT_NE(refused.find("is another model's (its weights lack lm export's mark"), std::string::npos) << refused;
  fs::create_directories(dir / "config-only");  // a config.json and no weights: not "its weights lack …"
  fs::copy_file(dir / "own" / "config.json", dir / "config-only" / "config.json");
  const std::string config_only = test_support::usage_error([&] { lm::export_hf(ck, dir / "config-only"); });
  EXPECT_NE(config_only.find("config.json is another model's (no model.safetensors beside it"), std::string::npos) << config_only;
  EXPECT_EQ(fs::file_size(dir / "other" / "model.safetensors"), weights);
  EXPECT_TRUE(lm::is_own_checkpoint(dir / "other"));
  lm::Checkpoint with_tokenizer = ck;
  with_tokenizer.tokenizer_json = "{}";
  fs::create_directories(dir / "hf" / "tokenizer.json" / "in-the-way");  // its rename fails
  EXPECT_ANY_THROW(lm::export_hf(with_tokenizer, dir / "hf"));
  EXPECT_FALSE(fs::exists(dir / "hf" / "config.json"));
  EXPECT_ANY_THROW(lm::open_model(dir / "hf"));
}

TEST(LmHf, ExportRefusesWhatTheLayoutCannotHold) {
  ScratchDir dir;
  int k = 0;
  for (const std::string flags : {"--variant skipv1", "--variant q-identity", "--mla --d-c 32 --d-r 4",
                                  "--variant denseformer", "--kv-heads 2"}) {
    const fs::path own = dir / ("own" + std::to_string(k++));
    ASSERT_EQ(run_qkvlab("lm init " + shell_quoted(own) + " --family gpt2 --layers 2 --d 32 --heads 4 --vocab 50 " + flags).status, 0) << flags;
    const auto r = run_qkvlab("lm export " + shell_quoted(own) + " --hf " + shell_quoted(own / "hf"));
    EXPECT_EQ(r.status, 2) << flags << r.out;
    EXPECT_NE(r.err.find("the Hugging Face layout has no place for"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(own / "hf")) << flags;
  }
}

// ---- qkvlab analyze on HF directories against the reference's analyses --------------------------

const engine::Json& field(const engine::Json& j, const std::string& key) {
  for (std::size_t i = 0; i < j.keys.size(); ++i)
    if (j.keys[i] == key) return j.items[i];
  throw std::out_of_range("no \"" + key + "\"");
}

double number(const engine::Json& j) { return std::stod(j.text); }

// The reference's value of `key` at layer l, averaged over the sequences.
double reference_mean(const std::vector<engine::Json>& refs, const std::string& key, std::size_t l) {
  double sum = 0;
  for (const auto& r : refs) sum += number(field(r, key).items[l]);
  return sum / double(refs.size());
}

// Entropy, similarity, the value spectrum and the first-token ratios of `qkvlab analyze all`
// (float32 forward passes) against the reference's float64 implementation of docs/analysis.md on
// the same two sequences, for a GPT-2 directory (F32, prefixed) and a Llama one (GQA, BF16 in two
// shards). Tolerance 1e3·u·max(|reference|, 1). Control: the row definition of the entropy, which
// the reference also computes, is off from what analyze reports by the default (column) one.
TEST(LmHf, AnalysesMatchTheReference) {
  ScratchDir dir;
  fixture("gpt2 " + shell_quoted(dir / "g") + " --dtype F32 --prefix transformer.");
  fixture("llama " + shell_quoted(dir / "l") + " --dtype BF16 --shards 2");
  for (const auto& [name, vocab] : {std::pair{"g", 61}, std::pair{"l", 53}}) {
    const int T = 12, S = 2;
    const auto ids = tokens(T * S, vocab);
    corpus::write_tokens_npy(dir / "t.npy", ids, S, T);
    const auto r = run_qkvlab("analyze all " + shell_quoted(dir / name) + " --tokens " + shell_quoted(dir / "t.npy") +
                              " --sequences 0 --format json --quiet");
    ASSERT_EQ(r.status, 0) << r.err;
    const engine::Json got = engine::parse_json(r.out);
    std::vector<engine::Json> refs;
    for (int s = 0; s < S; ++s) {
      const std::vector<std::int32_t> seq(ids.begin() + s * T, ids.begin() + (s + 1) * T);
      const auto ref = run_command(python() + " " + script("hf_reference.py") + " " + shell_quoted(dir / name) +
                                   " --tokens " + joined(seq) + " --analyze");
      ASSERT_EQ(ref.status, 0) << ref.err;
      refs.push_back(engine::parse_json(ref.out));
    }
    const auto near = [](double value, double reference) {
      return std::abs(value - reference) <= kBudget * kU * std::max(std::abs(reference), 1.0);
    };
    const auto& entropy = field(field(got, "entropy"), "layers").items;
    const auto& first = field(field(got, "first_token"), "layers").items;
    const auto& spectrum = field(field(got, "spectrum"), "layers").items;
    const auto& similarity = field(field(got, "similarity"), "layers").items;
    ASSERT_EQ(entropy.size(), 2u);
    ASSERT_EQ(similarity.size(), 3u);  // L + 1 hf states
    for (std::size_t l = 0; l < entropy.size(); ++l) {
      const double e = number(field(entropy[l], "mean")), e_ref = reference_mean(refs, "entropy", l);
      EXPECT_TRUE(near(e, e_ref)) << name << " layer " << l << ": entropy " << e << " vs " << e_ref;
      EXPECT_FALSE(near(e, reference_mean(refs, "entropy_row", l))) << "control: the row definition";
      for (const char* k : {"importance_ratio", "value_norm_ratio", "hidden_norm_ratio"})
        EXPECT_TRUE(near(number(field(first[l], k)), reference_mean(refs, k, l))) << name << " " << k << " " << l;
      const auto& ev = field(spectrum[l], "eigenvalues").items;
      for (std::size_t i = 0; i < ev.size(); ++i) {
        double ref = 0;
        for (const auto& rj : refs) ref += number(field(rj, "eigenvalues").items[l].items[i]) / S;
        EXPECT_TRUE(near(number(ev[i]), ref)) << name << " layer " << l << " eigenvalue " << i;
      }
    }
    for (std::size_t l = 0; l < similarity.size(); ++l)
      EXPECT_TRUE(near(number(field(similarity[l], "mean")), reference_mean(refs, "similarity", l)))
          << name << " state " << l;
  }
}

}  // namespace
