// Decoding with the cache (lm/model.hpp: begin_cache, extend; lm/generate.hpp) against the full
// forward pass recomputed at every step, for every variant of both families, with grouped-query
// attention and with MLA:
// - the logits of each step agree with the full forward's last position to rounding: rel_err ≤
//   kBudget u, u the unit roundoff of the scalar (the conventions' e ≤ 1e3 with κ = 1);
// - greedy decoding picks the same tokens;
// - control: a cache that drops the heads a layer reads from another layer (the model's test-only
//   fault switch) misses by rel_err ≥ 1e-3 in every variant that shares heads, and changes
//   nothing in the others;
// - the cache's bytes, measured from its allocation, are `qkvlab kv`'s count (lm/accounting.hpp);
// - `qkvlab lm generate`: JSON fields, reproducible sampling, bad input exits 2 with one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "corpus/token_file.hpp"
#include "engine/cpu_backend.hpp"
#include "engine/json.hpp"
#include "lm/accounting.hpp"
#include "lm/generate.hpp"
#include "lm/model.hpp"
#include "run_command.hpp"
#include "scratch_dir.hpp"

namespace {

using namespace qkvlab;
using namespace qkvlab::lm;
using test_support::run_qkvlab;
using test_support::ScratchDir;
using test_support::shell_quoted;

constexpr double kBudget = 1e3;    // unit roundoffs
constexpr double kDiffers = 1e-3;  // a faulty cache misses by more

struct Case {
  Family family;
  VariantKind kind;
  bool mla;
  bool rope = false;  // a gpt2 model with --positions rope
};

std::string name(const Case& c) {
  return to_string(c.family) + " " + to_string(c.kind) + (c.mla ? " MLA" : " GQA") + (c.rope ? " RoPE" : "");
}

std::vector<Case> cases() {
  const VariantKind all[] = {VariantKind::vanilla, VariantKind::resformer,   VariantKind::svformer,
                             VariantKind::neutreno, VariantKind::denseformer, VariantKind::skipv1,
                             VariantKind::yoco_v,  VariantKind::cla_v,       VariantKind::skipkv1,
                             VariantKind::skipv1_yoco, VariantKind::q_identity, VariantKind::resformer_neutreno,
                             VariantKind::resformer_k, VariantKind::resformer_q, VariantKind::resformer_previous, VariantKind::resformer_all,
                             VariantKind::resformer_identity, VariantKind::cla_k, VariantKind::cla_kv,
                             VariantKind::resformer_cross};
  const VariantKind mla[] = {VariantKind::vanilla, VariantKind::skipv1, VariantKind::resformer, VariantKind::svformer};
  std::vector<Case> out;
  for (Family f : {Family::gpt2, Family::llama}) {
    for (VariantKind k : all) out.push_back({f, k, false});
    for (VariantKind k : mla) out.push_back({f, k, true});
  }
  for (VariantKind k : {VariantKind::vanilla, VariantKind::skipv1}) out.push_back({Family::gpt2, k, false, true});
  return out;
}

// L = 4, d = 16, H = 4 on H_kv = 2 (MLA: d_c = 8, d_R = 4), V = 29, 16 positions.
Config tiny(const Case& c) {
  Config config = family_defaults(c.family, 4, 16, 4, 29, 16);
  config.ffn = 24, config.kv_heads = 2, config.variant.kind = c.kind;
  if (c.mla) config.mla = true, config.d_c = 8, config.d_r = 4;
  if (c.rope) config.position_encoding = PositionEncoding::rope;
  return config;
}

// Weights large enough that the logits are far from uniform (no near-ties for greedy decoding).
template <class S>
std::vector<S> random_values(const engine::ParameterLayout& layout) {
  std::vector<S> v(layout.total());
  for (const auto& spec : layout.specs()) {
    Rng rng(7, spec.name);
    const bool gain = spec.shape.size() == 1 && spec.name.find(".weight") != std::string::npos;
    for (std::size_t i = 0; i < spec.size(); ++i) v[spec.offset + i] = S(gain ? 1 + 0.2 * rng.normal() : 0.3 * rng.normal());
  }
  return v;
}

template <class S>
struct FinalNorm : Recorder<S> {
  std::vector<S> rows;  // N_f(X_L): (B·T, d)
  bool wants(Site site, int) const override { return site == Site::final; }
  void record(const Activation<S>& a) override {
    rows.assign(a.data, a.data + std::size_t(a.B) * a.T * a.width);
  }
};

int argmax(const double* x, int V) { return int(std::max_element(x, x + V) - x); }

struct Comparison {
  double worst = 0;         // the largest rel_err of a step's logits (all sequences)
  int token_mismatches = 0;  // steps × sequences where greedy decoding chose differently
};

// B = 2 sequences of different prompts (P = 5), 6 greedy steps; the reference is Model::forward
// over the whole sequence so far, its last position's N_f(X_L) times Uᵀ (in double).
template <class S>
Comparison decode_against_full(const Config& config, bool faulty) {
  const int B = 2, P = 5, steps = 6, V = config.vocab, d = config.d;
  engine::CpuBackend<S> be(2);
  Model<S> cached(config, be), full(config, be);
  const std::vector<S> values = random_values<S>(cached.parameters().layout);
  cached.set_parameters(values), full.set_parameters(values);
  cached.set_cache_fault(faulty);
  const auto& head = cached.parameters().layout.at(config.tied ? "wte" : "lm_head.weight");
  std::vector<std::vector<std::int32_t>> seqs(B);
  Rng rng(3, "prompts");
  std::vector<std::int32_t> fed;
  for (auto& s : seqs)
    for (int t = 0; t < P; ++t) s.push_back(rng.uniform_int(V)), fed.push_back(s.back());
  cached.begin_cache(B, P + steps - 1, P);
  std::vector<S> logits(std::size_t(B) * V);
  cached.extend(fed.data(), P, logits.data());
  Comparison out;
  for (int step = 0; step < steps; ++step) {
    const int T = int(seqs[0].size());
    std::vector<std::int32_t> all;
    for (const auto& s : seqs) all.insert(all.end(), s.begin(), s.end());
    FinalNorm<S> rec;
    full.forward(all.data(), nullptr, B, T, Pass::eval, 0, &rec);
    std::vector<double> ref(std::size_t(B) * V);
    double diff = 0, norm = 0;
    fed.clear();
    for (int b = 0; b < B; ++b) {
      const S* nf = rec.rows.data() + (std::size_t(b) * T + T - 1) * d;
      double* r = ref.data() + std::size_t(b) * V;
      for (int v = 0; v < V; ++v) {
        r[v] = 0;
        for (int i = 0; i < d; ++i) r[v] += double(nf[i]) * double(values[head.offset + std::size_t(v) * d + i]);
        const double c = double(logits[std::size_t(b) * V + v]);
        diff += (c - r[v]) * (c - r[v]), norm += r[v] * r[v];
      }
      std::vector<double> mine(logits.begin() + std::ptrdiff_t(b) * V, logits.begin() + std::ptrdiff_t(b + 1) * V);
      const int chosen = argmax(mine.data(), V);
      out.token_mismatches += chosen != argmax(r, V);
      seqs[std::size_t(b)].push_back(chosen), fed.push_back(chosen);
    }
    out.worst = std::max(out.worst, std::sqrt(diff / norm));
    if (step + 1 < steps) cached.extend(fed.data(), 1, logits.data());
  }
  return out;
}

// Whether some layer reads a head that another layer projects (the fault switch's target).
bool shares_heads(const Config& config) {
  const auto plan = make_plan(config);
  for (std::size_t l = 0; l < plan.size(); ++l)
    for (const Mix* mix : {&plan[l].keys, &plan[l].values, &plan[l].direct})
      for (const auto& sources : *mix)
        for (const Source& s : sources)
          if (s.layer != int(l)) return true;
  return false;
}

template <class S>
void check_every_variant(double u) {
  for (const Case& c : cases()) {
    const Config config = tiny(c);
    const Comparison ok = decode_against_full<S>(config, false);
    EXPECT_LE(ok.worst, kBudget * u) << name(c);
    EXPECT_EQ(ok.token_mismatches, 0) << name(c);
    const Comparison faulty = decode_against_full<S>(config, true);
    if (shares_heads(config))
      EXPECT_GE(faulty.worst, kDiffers) << name(c) << ": a cache without the shared heads was not caught";
    else
      EXPECT_LE(faulty.worst, kBudget * u) << name(c) << ": nothing is shared, the fault must change nothing";
  }
}

TEST(LmGenerate, CachedDecodingIsTheFullForwardInDouble) { check_every_variant<double>(0x1p-53); }
TEST(LmGenerate, CachedDecodingIsTheFullForwardInFloat) { check_every_variant<float>(0x1p-24); }

// The cache's allocation against lm/accounting's count (what `qkvlab kv` prints), per token; the
// control: the variants that drop heads would not match vanilla's count.
TEST(LmGenerate, CacheBytesAreTheAccountedCount) {
  for (const Case& c : cases()) {
    const Config config = tiny(c);
    engine::CpuBackend<float> be(1);
    Model<float> model(config, be);
    EXPECT_EQ(model.cache_bytes(), 0u);
    model.begin_cache(3, 7, 7);
    const std::int64_t per_token = count_kv(config).elements_per_token() * std::int64_t(sizeof(float));
    EXPECT_EQ(std::int64_t(model.cache_bytes()), 3 * 7 * per_token) << name(c);
    Config vanilla = config;
    vanilla.variant = Variant{};
    const bool drops = c.kind == VariantKind::svformer || c.kind == VariantKind::skipv1 ||
                       c.kind == VariantKind::yoco_v || c.kind == VariantKind::cla_v || c.kind == VariantKind::skipkv1 ||
                       c.kind == VariantKind::skipv1_yoco || c.kind == VariantKind::cla_k ||
                       c.kind == VariantKind::cla_kv;
    if (drops) {
      EXPECT_LT(per_token, count_kv(vanilla).elements_per_token() * 4) << name(c);
    }
  }
}

TEST(LmGenerate, PositionsBeyondTheCacheOrTheModelAreRefused) {
  engine::CpuBackend<float> be(1);
  Model<float> model(tiny({Family::llama, VariantKind::skipv1, false}), be);
  EXPECT_THROW(model.begin_cache(1, 17, 4), std::invalid_argument);  // 16 positions
  model.begin_cache(1, 4, 4);
  std::vector<std::int32_t> ids{1, 2, 3};
  std::vector<float> logits(29);
  model.extend(ids.data(), 3, logits.data());
  EXPECT_THROW(model.extend(ids.data(), 2, logits.data()), std::invalid_argument);
  ids = {29};
  EXPECT_THROW(model.extend(ids.data(), 1, logits.data()), std::invalid_argument);
}

TEST(LmGenerate, NonFiniteLogitsAreRefusedNotSampled) {
  engine::CpuBackend<float> be(1);
  Model<float> model(tiny({Family::gpt2, VariantKind::vanilla, false}), be);
  model.initialize(1);
  const std::vector<std::int32_t> prompt{1, 2, 3};
  const Sampling greedy{0.0, 0, 1.0, 0};
  const Generation finite = generate(model, prompt, 3, 2, greedy);
  EXPECT_EQ(finite.ids[1].size(), 3u);  // control: finite weights decode
  EXPECT_TRUE(finite.nonfinite.empty()) << finite.nonfinite;
  std::vector<float> w = model.parameter_values();
  w.back() = std::numeric_limits<float>::quiet_NaN();  // the last parameter reaches every logit
  model.set_parameters(w);
  const Generation stopped = generate(model, prompt, 3, 2, greedy);
  EXPECT_NE(stopped.nonfinite.find("new token 1 of sequence 0: the logit of token id 0 is nan"), std::string::npos)
      << stopped.nonfinite;
  EXPECT_TRUE(stopped.ids[0].empty()) << "a NaN logit was sampled";
}

// ---- qkvlab lm generate ----

const engine::Json& field(const engine::Json& j, const std::string& key) {
  for (std::size_t i = 0; i < j.keys.size(); ++i)
    if (j.keys[i] == key) return j.items[i];
  static const engine::Json none;
  ADD_FAILURE() << "no field " << key;
  return none;
}

std::vector<long> ids_of(const engine::Json& j) {
  std::vector<long> out;
  for (const auto& item : j.items) out.push_back(std::stol(item.text));
  return out;
}

struct Files {
  ScratchDir dir;
  std::string model = " --layers 2 --d 16 --heads 4 --kv-heads 2 --vocab 50 --positions 16 --variant skipv1";
  Files() {
    EXPECT_EQ(run_qkvlab("lm init " + shell_quoted(dir / "m") + " --family llama" + model).status, 0);
    corpus::write_tokens_npy(dir / "p.npy", {3, 1, 4, 1, 5}, 5, 0);
  }
  std::string generate(const std::string& args) const {
    return "lm generate " + shell_quoted(dir / "m") + " " + args;
  }
};

TEST(LmGenerateCommand, ReportsTheNewTokensAndTheMeasuredCache) {
  const Files f;
  const auto r = run_qkvlab(f.generate("--tokens " + shell_quoted(f.dir / "p.npy") + " --max-new 6 --format json"));
  ASSERT_EQ(r.status, 0) << r.err;
  const engine::Json j = engine::parse_json(r.out);
  std::vector<std::string> keys = j.keys;
  EXPECT_EQ(keys, (std::vector<std::string>{"prompt_ids", "ids", "cache_bytes_per_token", "prefill_tokens_per_s",
                                            "decode_tokens_per_s", "peak_bytes", "dtype", "error_model"}));
  EXPECT_EQ(field(j, "dtype").text, "f32");  // --dtype auto on the toolkit's F32 checkpoint
  EXPECT_EQ(ids_of(field(j, "prompt_ids")), (std::vector<long>{3, 1, 4, 1, 5}));
  EXPECT_EQ(field(j, "ids").items.size(), 6u);
  const auto kv = run_qkvlab("kv --family llama" + f.model + " --format json");
  ASSERT_EQ(kv.status, 0) << kv.err;
  EXPECT_EQ(std::stod(field(j, "cache_bytes_per_token").text),
            std::stod(field(engine::parse_json(kv.out), "bytes_per_token").text));
  EXPECT_GT(std::stod(field(j, "decode_tokens_per_s").text), 0);
  EXPECT_GT(std::stod(field(j, "peak_bytes").text), 0);
}

TEST(LmGenerateCommand, SamplingIsReproducibleAtAnyThreadCountAndBatch) {
  const Files f;
  const std::string args = "--tokens " + shell_quoted(f.dir / "p.npy") +
                           " --max-new 8 --temperature 1.5 --top-k 20 --top-p 0.9 --format json";
  auto ids = [&](const std::string& more) {
    const auto r = run_qkvlab(f.generate(args + more));
    EXPECT_EQ(r.status, 0) << r.err;
    return engine::parse_json(r.out);
  };
  const auto one = ids_of(field(ids(" --seed 11 --threads 1"), "ids"));
  EXPECT_EQ(one, ids_of(field(ids(" --seed 11 --threads 2"), "ids")));
  const engine::Json batch = field(ids(" --seed 11 --batch 3"), "ids");
  ASSERT_EQ(batch.items.size(), 3u);
  EXPECT_EQ(ids_of(batch.items[0]), one);  // sequence 0 draws from the same stream at any batch size
  EXPECT_NE(ids_of(batch.items[1]), one);  // control: another stream, other tokens
  EXPECT_NE(ids_of(field(ids(" --seed 12"), "ids")), one);
}

TEST(LmGenerateCommand, BadInputExitsTwoWithOneLine) {
  const Files f;
  corpus::write_tokens_npy(f.dir / "long.npy", std::vector<std::int32_t>(14, 2), 14, 0);
  corpus::write_tokens_npy(f.dir / "oov.npy", {1, 50, 2}, 3, 0);
  corpus::write_tokens_npy(f.dir / "empty.npy", {}, 0, 0);
  corpus::write_tokens_npy(f.dir / "two.npy", {1, 2, 3, 4}, 2, 2);
  const std::pair<std::string, std::string> bad[] = {
      {"--tokens " + shell_quoted(f.dir / "long.npy") + " --max-new 4", "17 positions; the model has 16"},
      {"--tokens " + shell_quoted(f.dir / "oov.npy"), "outside the model's vocabulary [0, 50)"},
      {"--tokens " + shell_quoted(f.dir / "empty.npy"), "empty"},
      {"--tokens " + shell_quoted(f.dir / "two.npy"), "1-D"},
      {"--prompt hello", "tokenizer"},  // the model has no tokenizer files
      {"--prompt-file " + shell_quoted(f.dir / "p.npy"), "tokenizer"},
      {"", "--tokens"},
      {"--tokens " + shell_quoted(f.dir / "p.npy") + " --top-p 0", "--top-p"},
      {"--tokens " + shell_quoted(f.dir / "p.npy") + " --max-new 0", "--max-new"},
  };
  for (const auto& [args, says] : bad) {
    const auto r = run_qkvlab(f.generate(args));
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_NE(r.err.find(says), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
}

}  // namespace
