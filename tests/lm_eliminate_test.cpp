// Query-weight elimination on language models (lm/eliminate.hpp, `qkvlab lm
// eliminate`) and the norm-free models it is exact on (--norm none).
//
// Bound: a covered layer (no norm, one layer, no query bias; Theorem 4.1) must
// leave the logits equal to float rounding: logits_rel_err ≤ 1e3 u κ with
// u = 2^-24 and κ = cond_2(W_Q) (the project's error budget, normalized error
// e ≤ 1e3: both models run in float, their weights differ by a rounded change
// of basis whose errors are amplified at most κ-fold), and the loss by at most
// the same budget relative to the loss (cross-entropy moves by at most twice
// the largest logit change). Controls, each by a wide margin (rel_err ≥ 1e-2,
// |Δloss| ≥ 1e-2 nats): the same transform on the LayerNorm model (norm
// ignored), two layers under skips, and a query bias dropped.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "core/errors.hpp"
#include "core/linalg.hpp"
#include "core/rng.hpp"
#include "corpus/token_file.hpp"
#include "engine/cpu_backend.hpp"
#include "engine/json.hpp"
#include "lm/accounting.hpp"
#include "lm/checkpoint.hpp"
#include "lm/eliminate.hpp"
#include "lm/model.hpp"
#include "lm/parameters.hpp"
#include "run_command.hpp"
#include "scratch_dir.hpp"

namespace {

namespace fs = std::filesystem;
using namespace qkvlab;
using namespace qkvlab::lm;
using test_support::run_qkvlab;
using test_support::ScratchDir;
using test_support::shell_quoted;

constexpr double kControlMin = 1e-2;

Config small(Family family, bool norm, bool bias = false) {
  Config c = family_defaults(family, 3, 16, 4, 40, 16);
  c.norm = norm, c.bias = bias;
  return c;
}

// Weights at the scale of a trained model's function: matrices N(0, 1/fan_in), embeddings N(0, 1),
// biases N(0, 0.1²), gains 1 + N(0, 0.1²).
Checkpoint random_model(const Config& c, std::uint64_t seed) {
  Checkpoint ck;
  ck.config = c;
  const auto layout = parameter_layout(c, make_plan(c));
  ck.values.assign(layout.total(), 0.0f);
  for (const auto& spec : layout.specs()) {
    Rng rng(seed, spec.name);
    const bool matrix = spec.shape.size() == 2, embedding = spec.name == "wte" || spec.name == "wpe";
    const bool gain = !matrix && spec.name.ends_with(".weight");
    const double sd = embedding ? 1.0 : matrix ? 1 / std::sqrt(double(spec.shape[0])) : 0.1;
    for (std::size_t i = 0; i < spec.size(); ++i)
      ck.values[spec.offset + i] = float((gain ? 1.0 : 0.0) + sd * rng.normal());
  }
  return ck;
}

void zero_query_biases(Checkpoint& ck) {
  const auto layout = parameter_layout(ck.config, make_plan(ck.config));
  for (int l = 0; l < ck.config.layers; ++l)
    if (const auto* s = layout.find(layer_tensor(l, "attn.q.bias")))
      std::fill_n(ck.values.begin() + std::ptrdiff_t(s->offset), s->size(), 0.0f);
}

EliminationReport measure(const Checkpoint& ck, const std::vector<int>& layers) {
  engine::CpuBackend<float> backend(1);
  return eliminate_and_measure(ck, layers, random_sequences(ck.config.vocab, 6, 12, 3), backend, 4);
}

// ---- the identity: a covered layer leaves the function unchanged ----

TEST(LmEliminate, CoveredLayerLeavesTheLossUnchangedInBothFamilies) {
  for (Family f : {Family::gpt2, Family::llama})
    for (bool bias : {false, true}) {
      if (f == Family::llama && bias) continue;  // llama's biases are tested through gpt2's: same transform
      Checkpoint ck = random_model(small(f, false, bias), 7);
      zero_query_biases(ck);  // the theorem has none; every other bias is random
      for (int layer = 1; layer <= ck.config.layers; ++layer) {
        const EliminationReport r = measure(ck, {layer});
        ASSERT_EQ(r.layers.size(), 1u);
        const LayerVerdict& v = r.layers[0];
        const std::string what = to_string(f) + (bias ? " with biases" : "") + ", layer " + std::to_string(layer);
        EXPECT_TRUE(v.coverage.covered) << what << ": " << v.coverage.reason;
        EXPECT_TRUE(v.exact) << what;
        const double u = unit_roundoff<float>(), u64 = unit_roundoff<double>();
        EXPECT_LE(v.change.logits_rel_err, exact_budget(v.layer.kappa, u)) << what;
        EXPECT_LE(std::abs(v.change.loss - v.change.loss_reference), exact_budget(v.layer.kappa, u) * v.change.loss_reference)
            << what;
        EXPECT_GT(v.change.logits_rel_err, 0) << what << ": float rounding should show";
        EXPECT_LE(v.logits_rel_err_double, exact_budget(v.layer.kappa, u64)) << what;  // the transform, in double
        EXPECT_LT(v.logits_rel_err_double, 1e-6 * v.change.logits_rel_err) << what << ": double's rounding, not float's";
        EXPECT_EQ(r.result.untied, f == Family::gpt2) << what;  // gpt2's head is tied by default
        EXPECT_EQ(r.result.checkpoint.config.q_identity_layers, std::vector<int>{layer});
        EXPECT_FALSE(r.contradicted());
      }
    }
}

// Progress: one call per model run over the tokens, the source's then each prefix's, ending at total.
TEST(LmEliminate, ReportsProgressAfterEachModelRun) {
  const Checkpoint ck = random_model(small(Family::gpt2, false, false), 7);
  engine::CpuBackend<float> backend(1);
  std::vector<std::pair<std::size_t, std::size_t>> calls;
  eliminate_and_measure(ck, {1, 2}, random_sequences(ck.config.vocab, 2, 8, 3), backend, 2,
                        [&](std::size_t done, std::size_t total) { calls.emplace_back(done, total); });
  EXPECT_EQ(calls, (std::vector<std::pair<std::size_t, std::size_t>>{{1, 3}, {2, 3}, {3, 3}}));
}

// The check in double resolves what float's budget cannot: a transform off by a factor 1 + 1e-6 in
// one key head (W_K of the eliminated layer) moves the logits by about 1e-7, below float's budget
// (1e3 u κ ≥ 6e-5) and far above double's (1e3 u_double κ), which the exact transform stays within.
TEST(LmEliminate, TheIdentityIsCheckedInDoubleWhereFloatsBudgetIsLoose) {
  Checkpoint ck = random_model(small(Family::gpt2, false, false), 7);
  const TokenSequences data = random_sequences(ck.config.vocab, 6, 12, 3);
  const Elimination e = eliminate_queries(ck, {1});
  std::vector<double> values = eliminated_in_double(ck, {1});
  const double kappa = e.layers[0].kappa, exact = logits_rel_err_in_double(ck, e.checkpoint.config, values, data, 4);
  EXPECT_LE(exact, exact_budget(kappa, unit_roundoff<double>()));
  const auto layout = parameter_layout(e.checkpoint.config, make_plan(e.checkpoint.config));
  const auto& k = layout.at(layer_tensor(0, "attn.k.weight"));
  for (std::size_t i = 0; i < k.size(); ++i) values[k.offset + i] *= 1 + 1e-6;
  const double off = logits_rel_err_in_double(ck, e.checkpoint.config, values, data, 4);
  EXPECT_GT(off, 1e3 * exact_budget(kappa, unit_roundoff<double>())) << "control: a transform that is not the identity";
  EXPECT_LT(off, exact_budget(kappa, unit_roundoff<float>())) << "float's budget would not have seen it";
  std::printf("kappa %.3g: the identity in double %.2e, off by 1e-6 in W_K %.2e (budgets: double %.2e, float %.2e)\n",
              kappa, exact, off, exact_budget(kappa, unit_roundoff<double>()), exact_budget(kappa, unit_roundoff<float>()));
}

// ---- the controls: where no theorem covers it, the loss changes by a wide margin ----

TEST(LmEliminateControl, LayerNormModelWithItsNormIgnoredChangesTheLoss) {
  for (Family f : {Family::gpt2, Family::llama}) {
    Checkpoint ck = random_model(small(f, true), 7);
    const EliminationReport r = measure(ck, {2});
    const LayerVerdict& v = r.layers[0];
    EXPECT_FALSE(v.coverage.covered);
    EXPECT_FALSE(v.exact);
    EXPECT_NE(v.coverage.reason.find(norm_name(ck.config)), std::string::npos) << v.coverage.reason;
    EXPECT_GT(v.change.logits_rel_err, kControlMin) << to_string(f);
    EXPECT_GT(std::abs(v.change.loss - v.change.loss_reference), kControlMin) << to_string(f);
    EXPECT_FALSE(r.contradicted());  // not covered: a measured change is no contradiction
  }
}

TEST(LmEliminateControl, TwoLayersUnderSkipsAreNotCovered) {
  const Checkpoint ck = random_model(small(Family::llama, false), 7);
  const EliminationReport r = measure(ck, {1, 3});
  ASSERT_EQ(r.layers.size(), 2u);
  EXPECT_TRUE(r.layers[0].exact);  // layer 1 alone
  EXPECT_EQ(r.layers[1].eliminated, (std::vector<int>{1, 3}));
  EXPECT_FALSE(r.layers[1].coverage.covered);
  EXPECT_GT(r.layers[1].change.logits_rel_err, kControlMin);
  EXPECT_GT(std::abs(r.layers[1].change.loss - r.layers[1].change.loss_reference), kControlMin);
}

TEST(LmEliminateControl, DroppedQueryBiasIsNotCovered) {
  const Checkpoint ck = random_model(small(Family::gpt2, false, true), 7);
  const LayerVerdict v = measure(ck, {2}).layers[0];
  EXPECT_TRUE(v.layer.query_bias);
  EXPECT_FALSE(v.coverage.covered);
  EXPECT_GT(v.change.logits_rel_err, kControlMin);
}

// ---- the other parameterizations of the same function ----

TEST(LmEliminate, ExplicitQueriesKeepTheFunction) {
  Checkpoint ck = random_model(small(Family::gpt2, true, true), 5);
  const Checkpoint eliminated = eliminate_queries(ck, {1, 3}).checkpoint;
  const Checkpoint explicit_q = explicit_queries(eliminated);
  EXPECT_TRUE(explicit_q.config.q_identity_layers.empty());
  engine::CpuBackend<float> backend(1);
  const auto data = random_sequences(ck.config.vocab, 4, 10, 9);
  const FunctionChange same = compare_function(eliminated, explicit_q, data, backend, 4);
  EXPECT_LE(same.logits_rel_err, 1e3 * 0x1p-24);
  // Control: W_K left unhalved (the Q-identity scale's factor forgotten) changes the function.
  Checkpoint wrong = explicit_q;
  const auto layout = parameter_layout(wrong.config, make_plan(wrong.config));
  const auto& k = layout.at(layer_tensor(0, "attn.k.weight"));
  for (std::size_t i = 0; i < k.size(); ++i) wrong.values[k.offset + i] *= 2;
  EXPECT_GT(compare_function(eliminated, wrong, data, backend, 4).logits_rel_err, kControlMin);
}

TEST(LmEliminate, ConfigurationRoundTripsThroughMetadata) {
  Config c = small(Family::llama, false);
  c.q_identity_layers = {1, 3};
  const Config back = from_metadata(to_metadata(c));
  EXPECT_FALSE(back.norm);
  EXPECT_EQ(back.q_identity_layers, c.q_identity_layers);
  EXPECT_EQ(to_metadata(back), to_metadata(c));
  EXPECT_TRUE(back.identity_query(0) && !back.identity_query(1) && back.identity_query(2));
  EXPECT_DOUBLE_EQ(back.attention_scale(0), 0.5 * back.attention_scale(1));
  // A default model's metadata has neither key (older checkpoints keep theirs).
  EXPECT_EQ(to_metadata(small(Family::gpt2, true)).count("norm"), 0u);
  EXPECT_EQ(to_metadata(small(Family::gpt2, true)).count("q_identity_layers"), 0u);
  // Controls: malformed or out-of-range lists are refused.
  auto m = to_metadata(c);
  for (const char* bad : {"1,,3", "3,1", "0", "4", "x"}) {
    m["q_identity_layers"] = bad;
    EXPECT_THROW(from_metadata(m), UsageError) << bad;
  }
  m = to_metadata(c);
  m["norm"] = "layernorm";  // a llama model's norm is rmsnorm
  EXPECT_THROW(from_metadata(m), UsageError);
}

TEST(LmEliminate, NormFreeModelsHaveNoNormParameters) {
  for (Family f : {Family::gpt2, Family::llama}) {
    const Config with = small(f, true, true), without = small(f, false, true);
    const std::int64_t norm_tensors = 2 * with.layers + 1, per_norm = f == Family::gpt2 ? 2 * with.d : with.d;
    EXPECT_EQ(count_parameters(without).component("norms"), 0);
    EXPECT_EQ(count_parameters(with).component("norms"), norm_tensors * per_norm);  // control: the count sees norms
    EXPECT_EQ(count_parameters(with).total - count_parameters(without).total, norm_tensors * per_norm);
    EXPECT_EQ(count_kv(with).elements_per_token(), count_kv(without).elements_per_token());
  }
}

TEST(LmEliminateCommand, TrainsANormFreeModel) {
  ScratchDir dir;
  corpus::write_tokens_npy(dir / "t.npy", random_sequences(50, 1, 2000, 2).ids, 1, 2000);
  const auto r = run_qkvlab("lm train --family llama --norm none --layers 2 --d 16 --heads 4 --vocab 50 --positions 16 "
                            "--tokens " + shell_quoted(dir / "t.npy") + " --seq-len 16 --batch 4 --steps 3 --out " +
                            shell_quoted(dir / "run") + " --quiet");
  ASSERT_EQ(r.status, 0) << r.err;
  const Checkpoint ck = load_checkpoint(dir / "run" / "checkpoint");
  EXPECT_FALSE(ck.config.norm);
  EXPECT_EQ(parameter_layout(ck.config, make_plan(ck.config)).find("ln_f.weight"), nullptr);
}

// ---- the command: loadable output, JSON fields, bad input ----

double json_number(const engine::Json& j, const std::string& key) {
  for (std::size_t i = 0; i < j.keys.size(); ++i)
    if (j.keys[i] == key) return std::stod(j.items[i].text);
  ADD_FAILURE() << "no field " << key;
  return NAN;
}

const engine::Json& json_field(const engine::Json& j, const std::string& key) {
  for (std::size_t i = 0; i < j.keys.size(); ++i)
    if (j.keys[i] == key) return j.items[i];
  throw std::out_of_range("no field " + key);
}

TEST(LmEliminateCommand, OutputLoadsInEvalAnalyzeAndExport) {
  ScratchDir dir;
  const auto ids = random_sequences(50, 4, 12, 1).ids;
  corpus::write_tokens_npy(dir / "t.npy", ids, 4, 12);
  for (const std::string norm : {"none", "layernorm", "rmsnorm"}) {
    const std::string family = norm == "rmsnorm" ? "llama" : "gpt2";
    const fs::path ckpt = dir / ("m-" + norm), out = dir / ("e-" + norm);
    ASSERT_EQ(run_qkvlab("lm init " + shell_quoted(ckpt) + " --family " + family + " --norm " + norm +
                         " --layers 2 --d 16 --heads 4 --vocab 50 --positions 16")
                  .status,
              0);
    const auto r = run_qkvlab("lm eliminate " + shell_quoted(ckpt) + " --out " + shell_quoted(out) +
                              " --layers 2 --tokens " + shell_quoted(dir / "t.npy") + " --sequences 4 --format json");
    ASSERT_EQ(r.status, 0) << r.err;
    const engine::Json report = engine::parse_json(r.out);
    const engine::Json& layer = json_field(report, "layers").items.at(0);
    EXPECT_EQ(json_number(layer, "layer"), 2);
    EXPECT_EQ(json_field(layer, "exact").text, norm == "none" ? "true" : "false") << norm;
    const double rel_err = json_number(layer, "logits_rel_err"), loss_change = json_number(layer, "loss_change");
    EXPECT_TRUE(std::isfinite(rel_err) && std::isfinite(loss_change));
    const double loss = json_number(layer, "loss");
    EXPECT_DOUBLE_EQ(loss - json_number(report, "loss"), loss_change);
    const auto eval = run_qkvlab("lm eval " + shell_quoted(out) + " --tokens " + shell_quoted(dir / "t.npy") +
                                 " --format json --quiet");
    ASSERT_EQ(eval.status, 0) << eval.err;
    EXPECT_NEAR(json_number(engine::parse_json(eval.out), "loss"), loss, 1e-12 * loss) << norm;  // the same passes
    const auto analyze = run_qkvlab("analyze entropy " + shell_quoted(out) + " --tokens " + shell_quoted(dir / "t.npy") +
                                    " --sequences 0 --quiet");
    EXPECT_EQ(analyze.status, 0) << analyze.err;
    const auto exported = run_qkvlab("lm export " + shell_quoted(out) + " --hf " + shell_quoted(dir / ("hf-" + norm)));
    if (norm == "none") {  // the HF layouts have no model without norms
      EXPECT_EQ(exported.status, 2);
      EXPECT_NE(exported.err.find("without norms"), std::string::npos) << exported.err;
      continue;
    }
    ASSERT_EQ(exported.status, 0) << exported.err;
    const auto hf_eval = run_qkvlab("lm eval " + shell_quoted(dir / ("hf-" + norm)) + " --tokens " +
                                    shell_quoted(dir / "t.npy") + " --format json --quiet");
    ASSERT_EQ(hf_eval.status, 0) << hf_eval.err;
    EXPECT_NEAR(json_number(engine::parse_json(hf_eval.out), "loss"), loss, 1e3 * 0x1p-24 * loss) << norm;
  }
}

TEST(LmEliminateCommand, BadInputExitsTwoWithOneLine) {
  ScratchDir dir;
  const std::string model = " --layers 2 --d 16 --heads 4 --vocab 50 --positions 16";
  ASSERT_EQ(run_qkvlab("lm init " + shell_quoted(dir / "m") + " --norm none" + model).status, 0);
  ASSERT_EQ(run_qkvlab("lm init " + shell_quoted(dir / "mla") + " --family llama --mla --d-c 8" + model).status, 0);
  ASSERT_EQ(run_qkvlab("lm init " + shell_quoted(dir / "qid") + " --variant q-identity" + model).status, 0);
  ASSERT_EQ(run_qkvlab("lm init " + shell_quoted(dir / "wide") + " --head-dim 8" + model).status, 0);
  ASSERT_EQ(run_qkvlab("lm init " + shell_quoted(dir / "rq") + " --norm none --variant resformer-q" + model).status, 0);
  Checkpoint singular = load_checkpoint(dir / "m");
  const auto layout = parameter_layout(singular.config, make_plan(singular.config));
  const auto& q = layout.at(layer_tensor(0, "attn.q.weight"));
  for (std::size_t i = 0; i < 16; ++i) singular.values[q.offset + i * 16] = 0;  // column 0 of W_Q
  save_checkpoint(dir / "singular", singular);
  const std::pair<std::string, std::string> cases[] = {
      {"m --layers 3", "not one of the model's layers"},
      {"m --layers 1,1", "--layers: 1 is given twice"},
      {"mla", "MLA"},
      {"qid", "q-identity"},
      {"wide", "heads x head width != d"},
      {"rq --layers 1", "shares its key or query heads"},  // layer 2 mixes layer 1's queries
      {"rq --layers 2", "shares its key or query heads"},
      {"singular --layers 1", "singular"},
      {"m --seq-len 17", "longer than the model's 16 positions"},
      {"m --tokens " + shell_quoted(dir / "absent.npy"), "absent.npy"},
  };
  for (const auto& [args, expected] : cases) {
    const fs::path out = dir / "out";
    const auto r = run_qkvlab("lm eliminate " + shell_quoted(dir.path()) + "/" + args + " --out " + shell_quoted(out));
    EXPECT_EQ(r.status, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
    EXPECT_FALSE(fs::exists(out)) << args << ": nothing is written";
  }
}

}  // namespace
