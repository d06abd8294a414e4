// `qkvlab verify --checkpoint` and `--against` (theory_lm/, issue 25 item 1) on
// tiny models the tests make themselves: a GPT-2 (LayerNorm, biases, tied) and a
// Llama (RMSNorm, RoPE, GQA with two query heads per key head), each trained a
// few steps with `lm train` on a token stream, as own checkpoints and as Hugging
// Face directories (`lm export --hf`).
//
// Every run asserts both halves of the standard: the identities pass at every
// precision and every negative control fails as expected (the command's exit
// status and summary), and the skipped claims carry their reasons. --against:
// B made from A by a random head-wise reparametrization (GQA: one block per key
// head; RoPE: blocks in the rotations' commutant) and an exported copy pass;
// the same B with one head's W_K perturbed fails, naming the layer and head;
// the function comparison passes on B and fails on a copy with an MLP weight
// scaled by 1.5.
#include <gtest/gtest.h>

#include <Eigen/Dense>

#include <algorithm>
#include <complex>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "corpus/token_file.hpp"
#include "engine/json.hpp"
#include "lm/checkpoint.hpp"
#include "lm/eliminate.hpp"
#include "lm/parameters.hpp"
#include "run_command.hpp"
#include "scratch_dir.hpp"
#include "theory_lm/compare.hpp"

namespace {

namespace fs = std::filesystem;
using namespace qkvlab;
using test_support::expect_usage_error;
using test_support::run_qkvlab;
using test_support::ScratchDir;
using test_support::shell_quoted;

const engine::Json& member(const engine::Json& j, const std::string& key) {
  for (std::size_t i = 0; i < j.keys.size(); ++i)
    if (j.keys[i] == key) return j.items[i];
  throw std::runtime_error("no key " + key);
}

// The two tiny models, trained 8 steps on a token stream with structure (a
// repeating pattern with noise), so their weights are no longer the initialization's.
class CheckpointVerify : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir;
    Rng rng(7, "checkpoint_verify/tokens");
    std::vector<std::int32_t> ids(4000);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = rng.uniform() < 0.7 ? std::int32_t(i % 13) : rng.uniform_int(64);
    corpus::write_tokens_npy(path() / "tokens.npy", ids, std::int64_t(ids.size()), 0);
    const std::string common = " --layers 2 --d 32 --heads 4 --vocab 64 --positions 32 --tokens " +
                               shell_quoted(path() / "tokens.npy") +
                               " --steps 8 --batch 4 --seq-len 16 --eval-every 8 --quiet --threads 2";
    train("gpt2", "--family gpt2 --bias" + common);
    // The Llama with biases and a tied head (as docs/claims.md measured it): both are given, since
    // --family llama over the tiny preset takes the Llama family's untied head without biases.
    train("llama", "--family llama --kv-heads 2 --bias --tied" + common);
    // dense_skip's GPT-2: RoPE and no position table (--positions rope); no HF layout has it.
    std::string rope = common;
    rope.replace(rope.find("--positions 32"), 14, "--positions rope,32");
    train("gpt2-rope", "--family gpt2 --bias" + rope, false);
    // Norm-free and without biases (no query bias: Theorem 4.1 covers layer 1); no HF layout has them.
    train("gpt2-free", "--family gpt2 --norm none --bias=false" + common, false);
    train("llama-free", "--family llama --kv-heads 2 --norm none --bias=false --tied" + common, false);
  }
  static void TearDownTestSuite() { delete dir_; }

  static void train(const std::string& name, const std::string& flags, bool hf = true) {
    const auto r = run_qkvlab("lm train --out " + shell_quoted(path() / name) + " " + flags);
    ASSERT_EQ(r.status, 0) << r.err;
    if (!hf) return;
    const auto e = run_qkvlab("lm export " + shell_quoted(checkpoint(name)) + " --hf " + shell_quoted(path() / (name + "-hf")));
    ASSERT_EQ(e.status, 0) << e.err;
  }

  static const fs::path& path() { return dir_->path(); }
  static fs::path checkpoint(const std::string& name) { return path() / name / "checkpoint"; }

  static ScratchDir* dir_;
};
ScratchDir* CheckpointVerify::dir_ = nullptr;

struct Verified {
  int status;
  engine::Json json;
  std::string err;
};

Verified verify_json(const std::string& args) {
  const auto r = run_qkvlab("verify --format json --quiet " + args);
  Verified v{r.status, {}, r.err};
  if (!r.out.empty()) v.json = engine::parse_json(r.out);
  return v;
}

std::vector<std::string> strings(const engine::Json& array) {
  std::vector<std::string> out;
  for (const auto& item : array.items) out.push_back(item.text);
  return out;
}

// The largest rel_err of the comparison's invariants (0 when none) and the logits' rel_err.
std::pair<double, double> measured(const engine::Json& comparison) {
  double invariants = 0;
  for (std::size_t i = 0; i < comparison.keys.size(); ++i)
    if (comparison.keys[i] == "invariants")
      for (const auto& x : comparison.items[i].items) invariants = std::max(invariants, std::stod(member(x, "rel_err").text));
  return {invariants, std::stod(member(member(comparison, "logits"), "rel_err").text)};
}

bool contains(const std::vector<std::string>& xs, const std::string& x) { return std::ranges::find(xs, x) != xs.end(); }

// Every check passed, every control failed as expected, and each claim run has controls.
void expect_all_pass(const engine::Json& report) {
  const auto& summary = member(report, "summary");
  EXPECT_EQ(member(summary, "ok").text, "true");
  EXPECT_EQ(member(summary, "passed").text, member(summary, "checks").text);
  EXPECT_EQ(member(summary, "controls_failed_as_expected").text, member(summary, "controls").text);
  for (const std::string& id : strings(member(report, "claims_run"))) {
    int controls = 0;
    for (const auto& c : member(report, "controls").items) controls += member(c, "id").text == id;
    EXPECT_GT(controls, 0) << id;
  }
}

std::string skip_reason(const engine::Json& report, const std::string& id) {
  for (const auto& s : member(report, "skipped").items)
    if (member(s, "id").text == id) return member(s, "reason").text;
  return "";
}

std::vector<std::string> control_names(const engine::Json& report, const std::string& id) {
  std::vector<std::string> out;
  for (const auto& c : member(report, "controls").items)
    if (member(c, "id").text == id) out.push_back(member(c, "name").text);
  return out;
}

// The report of `verify --checkpoint` on the model's own checkpoint and on its export, each
// passing with every control failing.
std::vector<std::pair<std::string, engine::Json>> both_forms(const std::string& name, const fs::path& own,
                                                            const fs::path& hf) {
  std::vector<std::pair<std::string, engine::Json>> out;
  for (const auto& [form, dir] : {std::pair{name, own}, std::pair{name + "-hf", hf}}) {
    const auto v = verify_json("--checkpoint " + shell_quoted(dir));
    EXPECT_EQ(v.status, 0) << form << "\n" << v.err;
    if (v.status == 0) expect_all_pass(v.json);
    out.emplace_back(form, v.json);
  }
  return out;
}

// GPT-2 (LayerNorm, biases): the attention claims at every head and pair, the LayerNorm
// claims at every norm; RMSNorm's remark5 and the norm-free theorems skipped with reasons.
TEST_F(CheckpointVerify, Gpt2PassesWithItsControls) {
  for (const auto& [name, json] : both_forms("gpt2", checkpoint("gpt2"), path() / "gpt2-hf")) {
    const auto run = strings(member(json, "claims_run"));
    for (const char* id : {"qwe.lemma3.1", "qwe.prop4.1", "qwe.prop4.2", "qwe.freedom.vo", "qwe.lemma8.2", "qwe.thm8.3"})
      EXPECT_TRUE(contains(run, id)) << name << " " << id;
    EXPECT_TRUE(contains(control_names(json, "qwe.freedom.vo"), "N^-T (Prop. 4.2's contragredient) in place of N^-1 on W_O"));
    EXPECT_NE(skip_reason(json, "qwe.ext.qknorm").find("no QK-norm"), std::string::npos);
    EXPECT_TRUE(contains(run, "resformer.eq4")) << name;  // layer 2 against layer 1's values
    EXPECT_TRUE(contains(control_names(json, "resformer.eq4"), "A_n V_n: layer 1's values left out"));
    EXPECT_NE(skip_reason(json, "qwe.ext.rope").find("no RoPE"), std::string::npos);
    EXPECT_EQ(member(member(json, "checkpoint"), "family").text, "gpt2");
    EXPECT_EQ(member(member(json, "tokens"), "count").text, "32");  // 2 random sequences of 16
    EXPECT_NE(skip_reason(json, "qwe.remark5").find("LayerNorm"), std::string::npos);
    EXPECT_NE(skip_reason(json, "qwe.thm4.1").find("without normalization"), std::string::npos);
    EXPECT_NE(skip_reason(json, "qwe.sec8.3.1.mp").find("random"), std::string::npos);
    // 2 layers × 4 heads × 2 pairs, each at 4 precisions, the site named.
    int lemma31 = 0;
    bool named = false;
    for (const auto& c : member(json, "checks").items)
      if (member(c, "id").text == "qwe.lemma3.1") {
        ++lemma31;
        named = named || member(c, "config").text.find("layer=2 head=4 pair=VO") != std::string::npos;
      }
    EXPECT_EQ(lemma31, 2 * 4 * 2 * 4);
    EXPECT_TRUE(named);
  }
}

// Llama (RMSNorm, RoPE, GQA): the per-head freedom in the rotations' commutant, one block per
// key head; the controls include a generic M and different blocks within a group.
TEST_F(CheckpointVerify, LlamaPassesWithRopeAndGqaControls) {
  for (const auto& [name, json] : both_forms("llama", checkpoint("llama"), path() / "llama-hf")) {
    EXPECT_TRUE(contains(strings(member(json, "claims_run")), "qwe.remark5"));
    EXPECT_TRUE(contains(strings(member(json, "claims_run")), "qwe.freedom.vo"));  // one N_g per value head
    EXPECT_TRUE(contains(control_names(json, "qwe.freedom.vo"), "full N applied to W_V only"));
    EXPECT_NE(skip_reason(json, "qwe.ext.gqa").find("one block per key head"), std::string::npos);
    EXPECT_NE(skip_reason(json, "qwe.lemma8.2").find("no LayerNorm in front of attention"), std::string::npos);
    EXPECT_TRUE(contains(control_names(json, "qwe.lemma3.1"), "generic M (not in the rotations' commutant)"));
    EXPECT_TRUE(contains(control_names(json, "qwe.prop4.2"), "a different block for each query head of a group"));
    EXPECT_TRUE(contains(control_names(json, "qwe.prop4.1"), "W_Q W_K^T without the rotation R_(t-s)"));
  }
}

// A GPT-2 with RoPE takes the rotations' forms of the attention claims, with their controls, and keeps
// LayerNorm's; control: the learned-positions GPT-2 skips qwe.ext.rope for having no RoPE, this one not.
// Its export is refused: the Hugging Face GPT-2 layout has no place for RoPE.
TEST_F(CheckpointVerify, Gpt2WithRopePassesWithTheRotationsControls) {
  const auto v = verify_json("--checkpoint " + shell_quoted(checkpoint("gpt2-rope")));
  ASSERT_EQ(v.status, 0) << v.err;
  expect_all_pass(v.json);
  EXPECT_TRUE(contains(strings(member(v.json, "claims_run")), "qwe.lemma8.2"));
  EXPECT_TRUE(contains(control_names(v.json, "qwe.lemma3.1"), "generic M (not in the rotations' commutant)"));
  EXPECT_TRUE(contains(control_names(v.json, "qwe.prop4.1"), "W_Q W_K^T without the rotation R_(t-s)"));
  EXPECT_EQ(skip_reason(v.json, "qwe.ext.rope").find("no RoPE"), std::string::npos);
  const auto e = run_qkvlab("lm export " + shell_quoted(checkpoint("gpt2-rope")) + " --hf " + shell_quoted(path() / "rope-hf"));
  EXPECT_EQ(e.status, 2);
  EXPECT_NE(e.err.find("RoPE in a gpt2 model"), std::string::npos) << e.err;
}

// Claims selected by prefix; the table names the skipped ones; token files are read; HDF5 and
// JUnit carry the context and the skipped claims.
TEST_F(CheckpointVerify, SelectionTableAndTokenFile) {
  const fs::path h5 = path() / "selection.h5", xml = path() / "selection.xml";
  const auto r = run_qkvlab("verify --quiet --checkpoint " + shell_quoted(checkpoint("llama")) +
                            " qwe.prop4 qwe.lemma8.2 --precision float,double --tokens " +
                            shell_quoted(path() / "tokens.npy") + " --sequences 3 --seq-len 8 --out " +
                            shell_quoted(h5) + " --junit " + shell_quoted(xml));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::is_regular_file(h5));
  std::ifstream junit(xml);
  const std::string text((std::istreambuf_iterator<char>(junit)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("<skipped message=\"the model has no LayerNorm"), std::string::npos) << text;
  EXPECT_NE(r.out.find("qwe.prop4.1"), std::string::npos);
  EXPECT_NE(r.out.find("skipped qwe.lemma8.2: the model has no LayerNorm"), std::string::npos);
  const auto count = r.out.find("tokens.count");
  ASSERT_NE(count, std::string::npos) << r.out;
  EXPECT_EQ(r.out.substr(count, r.out.find('\n', count) - count).substr(r.out.find_first_of("0123456789", count) - count), "24");
  EXPECT_EQ(r.out.find("qwe.lemma3.1"), std::string::npos);
}

// Same seed, same numbers, at any thread count.
TEST_F(CheckpointVerify, Reproducible) {
  const std::string args = "--checkpoint " + shell_quoted(checkpoint("gpt2")) + " qwe.lemma3.1 --precision float --seed 5";
  const auto one = run_qkvlab("verify --format json --quiet --threads 1 " + args);
  const auto two = run_qkvlab("verify --format json --quiet --threads 2 " + args);
  ASSERT_EQ(one.status, 0);
  const auto checks = [](const std::string& out) { return out.substr(out.find("\"checks\""), out.find("\"summary\"") - out.find("\"checks\"")); };
  EXPECT_EQ(checks(one.out), checks(two.out));
}

// B from A: every head's (W_Q, W_K) by (M_g, M_g^-T) and (W_V, W_O) by (N_g, N_g^-1), one pair
// of blocks per key head g shared by its query heads; M_g in the rotations' commutant under
// RoPE. Blocks Q diag(s) with s in [0.5, 2] (cond <= 4), so that float storage keeps the
// invariants to about 1e-6. Then, optionally, key head `perturb_head` of `perturb_layer`
// perturbed by 1e-2 relative.
// mix_pairs: under RoPE, M_g is instead a complex-linear map of all the frequency pairs together, in the
// rotations' commutant only where every pair has one frequency (θ = 1).
void reparametrize(const fs::path& from, const fs::path& to, int perturb_layer = -1, int perturb_head = -1,
                   bool mix_pairs = false) {
  lm::Checkpoint ck = lm::load_checkpoint(from);
  const lm::Config& c = ck.config;
  const auto layout = lm::parameter_layout(c, lm::make_plan(c));
  using Rows = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  auto tensor = [&](const std::string& name) {
    const auto& s = layout.at(name);
    return Eigen::Map<Rows>(ck.values.data() + s.offset, s.shape.size() == 2 ? s.shape[0] : 1, s.shape.back());
  };
  auto with_bias = [&](int l, const std::string& what) {  // [W; b] in double
    auto W = tensor(lm::layer_tensor(l, what + ".weight"));
    MatD out(W.rows() + (c.bias ? 1 : 0), W.cols());
    out.topRows(W.rows()) = W.cast<double>();
    if (c.bias) out.bottomRows(1) = tensor(lm::layer_tensor(l, what + ".bias")).cast<double>();
    return out;
  };
  auto store = [&](int l, const std::string& what, const MatD& value) {
    auto W = tensor(lm::layer_tensor(l, what + ".weight"));
    W = value.topRows(W.rows()).cast<float>();
    if (c.bias) tensor(lm::layer_tensor(l, what + ".bias")) = value.bottomRows(1).cast<float>();
  };
  Rng rng(11, "checkpoint_verify/reparametrize");
  const int dh = c.head_dim, half = dh / 2, group = c.heads / c.kv_heads;
  auto block = [&](bool commutant) {
    if (commutant && mix_pairs) {  // [[Re U, Im U], [-Im U, Re U]], U unitary times diag(s), s in [0.5, 2]
      const Eigen::MatrixXcd G = rng.gaussian(half, half).cast<std::complex<double>>() +
                                 std::complex<double>(0, 1) * rng.gaussian(half, half).cast<std::complex<double>>();
      Eigen::MatrixXcd U = Eigen::HouseholderQR<Eigen::MatrixXcd>(G).householderQ();
      for (int j = 0; j < half; ++j) U.col(j) *= 0.5 + 1.5 * rng.uniform();
      MatD M(dh, dh);
      M << U.real(), U.imag(), -U.imag(), U.real();
      return M;
    }
    if (commutant) {  // a I + b J on each frequency pair, |(a, b)| in [0.5, 2]
      MatD M = MatD::Zero(dh, dh);
      for (int i = 0; i < half; ++i) {
        const double r = 0.5 + 1.5 * rng.uniform(), angle = 6.283185307179586 * rng.uniform();
        M(i, i) = M(i + half, i + half) = r * std::cos(angle);
        M(i, i + half) = r * std::sin(angle), M(i + half, i) = -r * std::sin(angle);
      }
      return M;
    }
    const MatD Q = Eigen::HouseholderQR<MatD>(rng.gaussian(dh, dh)).householderQ();
    VecD s(dh);
    for (int i = 0; i < dh; ++i) s(i) = 0.5 + 1.5 * rng.uniform();
    return MatD(Q * s.asDiagonal());
  };
  for (int l = 0; l < c.layers; ++l) {
    MatD Q = with_bias(l, "attn.q"), K = with_bias(l, "attn.k"), V = with_bias(l, "attn.v");
    MatD O = tensor(lm::layer_tensor(l, "attn.o.weight")).cast<double>();
    for (int g = 0; g < c.kv_heads; ++g) {
      const MatD M = block(c.rope()), N = block(false);
      K.middleCols(g * dh, dh) = K.middleCols(g * dh, dh) * M.inverse().transpose();
      V.middleCols(g * dh, dh) = V.middleCols(g * dh, dh) * N;
      for (int h = g * group; h < (g + 1) * group; ++h) {
        Q.middleCols(h * dh, dh) = Q.middleCols(h * dh, dh) * M;
        O.middleRows(h * dh, dh) = N.inverse() * O.middleRows(h * dh, dh);
      }
    }
    if (l == perturb_layer) K.middleCols(perturb_head * dh, dh) *= 1.01;
    store(l, "attn.q", Q), store(l, "attn.k", K), store(l, "attn.v", V);
    tensor(lm::layer_tensor(l, "attn.o.weight")) = O.cast<float>();
  }
  lm::save_checkpoint(to, ck);
}

// One MLP weight of layer 1 scaled by 1.5.
void tamper_mlp(const fs::path& from, const fs::path& to) {
  lm::Checkpoint ck = lm::load_checkpoint(from);
  const auto layout = lm::parameter_layout(ck.config, lm::make_plan(ck.config));
  const std::string name = lm::layer_tensor(0, ck.config.family == lm::Family::gpt2 ? "mlp.fc.weight" : "mlp.up.weight");
  const auto& s = layout.at(name);
  for (std::size_t i = 0; i < s.size(); ++i) ck.values[s.offset + i] *= 1.5f;
  lm::save_checkpoint(to, ck);
}

TEST_F(CheckpointVerify, AgainstPassesForReparametrizedAndExportedCopies) {
  for (const std::string name : {"gpt2", "llama"}) {
    const fs::path A = checkpoint(name), B = path() / (name + "-B");
    reparametrize(A, B);
    auto v = verify_json("--checkpoint " + shell_quoted(B) + " --against " + shell_quoted(A));
    ASSERT_EQ(v.status, 0) << name << "\n" << v.err;
    const auto& comparison = member(v.json, "comparison");
    EXPECT_NE(member(comparison, "method").text.find("gauge invariants"), std::string::npos);
    EXPECT_EQ(member(comparison, "ok").text, "true");
    const auto [invariants, logits] = measured(comparison);
    std::cout << name << " reparametrized: largest invariant rel_err " << invariants << ", logits rel_err " << logits << "\n";
    // The head-wise reparametrization changed the weights by O(1): the invariants are what agree.
    v = verify_json("--checkpoint " + shell_quoted(path() / (name + "-hf")) + " --against " + shell_quoted(A));
    EXPECT_EQ(v.status, 0) << name << " export\n" << v.err;
    // The function comparison accepts B too.
    v = verify_json("--checkpoint " + shell_quoted(B) + " --against " + shell_quoted(A) + " --compare function");
    EXPECT_EQ(v.status, 0) << name << " function\n" << v.err;
    EXPECT_NE(member(member(v.json, "comparison"), "method").text.find("function"), std::string::npos);
  }
}

TEST_F(CheckpointVerify, AgainstFailsNamingLayerAndHead) {
  // GPT-2: key head 3 of layer 2 (1-based) perturbed; Llama: key head 2 of layer 1, read by query heads 3 and 4.
  for (const auto& [name, layer, head, named] :
       {std::tuple{"gpt2", 1, 2, std::string("layer 2 head 3: W_Q W_K^T differs")},
        std::tuple{"llama", 0, 1, std::string("layer 1 head 4: W_Q R W_K^T per frequency pair differs")}}) {
    const fs::path A = checkpoint(name), B = path() / (std::string(name) + "-perturbed");
    reparametrize(A, B, layer, head);
    const auto r = run_qkvlab("verify --quiet --checkpoint " + shell_quoted(B) + " --against " + shell_quoted(A));
    EXPECT_EQ(r.status, 1) << name << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find(named), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("layer 1 head 1:"), std::string::npos) << r.out;  // only the perturbed heads are named
  }
}

// At θ = 1 every RoPE pair has one frequency: a complex-linear map mixing the pairs keeps the function
// (qwe.ext.rope), and the invariants are per frequency, not per pair (review r12: the gauge comparison
// said "differs" for the same function). Control: the same mixing at θ = 10000, where the pairs'
// frequencies differ, changes the function, and both comparisons say so.
TEST_F(CheckpointVerify, AgainstGroupsRopePairsOfOneFrequency) {
  for (const auto& [theta, same] : {std::pair{"1", true}, {"10000", false}}) {
    const fs::path A = path() / ("theta" + std::string(theta)), B = path() / ("theta" + std::string(theta) + "-mixed");
    const auto init = run_qkvlab("lm init " + shell_quoted(A) + " --family llama --layers 1 --d 16 --heads 2 --kv-heads 1"
                                 " --vocab 64 --positions 32 --seed 3 --rope-theta " + theta);
    ASSERT_EQ(init.status, 0) << init.err;
    reparametrize(A, B, -1, -1, true);
    for (const char* compare : {"gauge", "function"}) {
      const auto v = verify_json("--checkpoint " + shell_quoted(B) + " --against " + shell_quoted(A) + " --compare " + compare);
      EXPECT_EQ(v.status, same ? 0 : 1) << theta << " " << compare << "\n" << v.err;
    }
  }
}

TEST_F(CheckpointVerify, FunctionComparisonFailsOnATamperedWeight) {
  for (const std::string name : {"gpt2", "llama"}) {
    const fs::path A = checkpoint(name), B = path() / (name + "-tampered");
    tamper_mlp(A, B);
    for (const char* method : {"auto", "function"}) {
      const auto v = verify_json("--checkpoint " + shell_quoted(B) + " --against " + shell_quoted(A) + " --compare " + method);
      EXPECT_EQ(v.status, 1) << name << " " << method;
      const auto mismatches = strings(member(member(v.json, "comparison"), "mismatches"));
      ASSERT_FALSE(mismatches.empty());
      EXPECT_NE(mismatches.back().find("logits differ"), std::string::npos) << mismatches.back();
      if (std::string(method) == "auto") {  // one architecture: the tensor itself is named
        EXPECT_NE(mismatches.front().find("tensor h.0.mlp."), std::string::npos) << mismatches.front();
      }
      std::cout << name << " tampered (" << method << "): logits rel_err " << measured(member(v.json, "comparison")).second << "\n";
    }
  }
}

// Columns c0 … c0 + n − 1 of a tensor (a bias's entries) multiplied by `factor`; `config` edits the
// configuration the copy records.
void scale_columns(const fs::path& from, const fs::path& to, const std::string& tensor, int c0, int n, float factor,
                   const std::function<void(lm::Config&)>& config = {}) {
  lm::Checkpoint ck = lm::load_checkpoint(from);
  const auto layout = lm::parameter_layout(ck.config, lm::make_plan(ck.config));
  const auto& s = layout.at(tensor);
  const std::size_t rows = s.shape.size() == 2 ? s.shape[0] : 1, cols = s.shape.back();
  for (std::size_t r = 0; r < rows; ++r)
    for (int c = c0; c < c0 + n; ++c) ck.values[s.offset + r * cols + std::size_t(c)] *= factor;
  if (config) config(ck.config);
  lm::save_checkpoint(to, ck);
}

// --against on one architecture compares every tensor, not the logits alone: an embedding row
// changed is named (the function comparison sees only the given tokens' rows). A configuration
// field the weights do not show (RoPE's base) makes two architectures, compared by function. The
// key bias, which the softmax removes without RoPE, is left out of W_Q W_K^T: a head whose b_K is
// 1e4 times larger is the same function (passes), and its W_K scaled by 1.01 is still seen
// (control: with b_K inside the invariant the change was diluted below the tolerance).
TEST_F(CheckpointVerify, AgainstSeesEveryTensorTheConfigAndNotTheKeyBias) {
  const fs::path gpt2 = checkpoint("gpt2"), llama = checkpoint("llama");
  const fs::path row = path() / "gpt2-wte-row", theta = path() / "llama-theta", bias = path() / "gpt2-key-bias",
                 key = path() / "gpt2-key-bias-wk";
  scale_columns(gpt2, row, "wte", 0, 1, 3.0f);  // column 0 of every token's row
  auto r = run_qkvlab("verify --quiet --checkpoint " + shell_quoted(row) + " --against " + shell_quoted(gpt2));
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("tensor wte differs"), std::string::npos) << r.out;
  scale_columns(llama, theta, "wte", 0, 0, 1.0f, [](lm::Config& c) { c.rope_theta = 20000; });
  auto v = verify_json("--checkpoint " + shell_quoted(theta) + " --against " + shell_quoted(llama));
  EXPECT_NE(member(member(v.json, "comparison"), "method").text.find("function"), std::string::npos);
  EXPECT_EQ(verify_json("--checkpoint " + shell_quoted(theta) + " --against " + shell_quoted(llama) + " --compare gauge")
                .status,
            2);  // the gauge comparison is refused: the configurations differ
  const int dh = lm::load_checkpoint(gpt2).config.head_dim;
  scale_columns(gpt2, bias, lm::layer_tensor(0, "attn.k.bias"), 0, dh, 1e4f);
  v = verify_json("--checkpoint " + shell_quoted(bias) + " --against " + shell_quoted(gpt2));
  EXPECT_EQ(v.status, 0) << v.err;
  scale_columns(bias, key, lm::layer_tensor(0, "attn.k.weight"), 0, dh, 1.01f);
  r = run_qkvlab("verify --quiet --checkpoint " + shell_quoted(key) + " --against " + shell_quoted(gpt2));
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("layer 1 head 1: W_Q W_K^T differs"), std::string::npos) << r.out;
}

// Key head `head` (0-based) of layer `layer` (0-based) plus Gaussian noise of 10 times its RMS: the
// models trained 8 steps attend almost uniformly (tiny scores), so that this moves the head's
// pattern by ~1e-3 and the logits by ~1e-5 only (measured); the gauge comparison sees 1%.
void perturb_key(const fs::path& from, const fs::path& to, int layer, int head) {
  lm::Checkpoint ck = lm::load_checkpoint(from);
  const auto layout = lm::parameter_layout(ck.config, lm::make_plan(ck.config));
  const auto& s = layout.at(lm::layer_tensor(layer, "attn.k.weight"));
  using Rows = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<Rows> K(ck.values.data() + s.offset, s.shape[0], s.shape[1]);
  auto block = K.middleCols(head * ck.config.head_dim, ck.config.head_dim);
  Rng rng(13, "checkpoint_verify/perturb_key");
  block += (10 * block.norm() / std::sqrt(double(block.size())) * rng.gaussian(block.rows(), block.cols())).cast<float>();
  lm::save_checkpoint(to, ck);
}

double relative_change(const fs::path& a, const fs::path& b, const std::string& tensor) {
  const lm::Checkpoint A = lm::load_checkpoint(a), B = lm::load_checkpoint(b);
  const auto la = lm::parameter_layout(A.config, lm::make_plan(A.config)), lb = lm::parameter_layout(B.config, lm::make_plan(B.config));
  const auto &sa = la.at(tensor), &sb = lb.at(tensor);
  const Eigen::Map<const Eigen::VectorXf> x(A.values.data() + sa.offset, Eigen::Index(sa.size())),
      y(B.values.data() + sb.offset, Eigen::Index(sb.size()));
  return (x - y).norm() / x.norm();
}

// Norm-free models: the norm claims skipped with their reason, the attention claims run; on
// the model `lm eliminate --layers 1` made (W_Q = I in layer 1) they run on layer 2 only,
// layer 1 skipped with its reason.
TEST_F(CheckpointVerify, NormFreeAndEliminatedModels) {
  for (const std::string name : {"gpt2-free", "llama-free"}) {
    const fs::path A = checkpoint(name), B = path() / (name + "-eliminated");
    const auto e = run_qkvlab("lm eliminate " + shell_quoted(A) + " --out " + shell_quoted(B) +
                              " --layers 1 --seq-len 16 --sequences 4");
    ASSERT_EQ(e.status, 0) << e.out << e.err;
    auto v = verify_json("--checkpoint " + shell_quoted(A));
    ASSERT_EQ(v.status, 0) << name << "\n" << v.err;
    expect_all_pass(v.json);
    EXPECT_EQ(member(member(v.json, "checkpoint"), "norm").text, "none");
    for (const char* id : {"qwe.lemma3.1", "qwe.prop4.1", "qwe.prop4.2", "qwe.freedom.vo", "resformer.eq4"})
      EXPECT_TRUE(contains(strings(member(v.json, "claims_run")), id)) << name << " " << id;
    for (const char* id : {"qwe.lemma8.2", "qwe.thm8.3", "qwe.remark5"})
      EXPECT_NE(skip_reason(v.json, id).find("no norms"), std::string::npos) << name << " " << id;
    v = verify_json("--checkpoint " + shell_quoted(B));
    ASSERT_EQ(v.status, 0) << name << " eliminated\n" << v.err;
    expect_all_pass(v.json);
    EXPECT_NE(skip_reason(v.json, "qwe.lemma3.1").find("on layers 1: W_Q = I"), std::string::npos);
    EXPECT_NE(skip_reason(v.json, "resformer.eq4").find("Q-identity layers"), std::string::npos);
    int layer1 = 0, layer2 = 0;
    for (const auto& c : member(v.json, "checks").items) {
      const std::string config = member(c, "config").text;
      layer1 += config.find("layer=1 ") != std::string::npos;
      layer2 += config.find("layer=2 ") != std::string::npos;
    }
    EXPECT_EQ(layer1, 0) << name;
    EXPECT_GT(layer2, 0) << name;
  }
}

// B = `lm eliminate A --layers 1` (Theorem 4.1 covers layer 1 of a norm-free model): every
// weight changed, the function kept, so --against passes by the function comparison; B with
// one key head of layer 1 perturbed fails, naming layer 1 and the query heads reading it.
TEST_F(CheckpointVerify, AgainstOnAnEliminatedModel) {
  for (const auto& [name, named] : {std::pair{std::string("gpt2-free"), std::vector<int>{2}},
                                    std::pair{std::string("llama-free"), std::vector<int>{3, 4}}}) {
    const fs::path A = checkpoint(name), B = path() / (name + "-eliminated"), P = path() / (name + "-eliminated-perturbed");
    if (!fs::exists(B)) {
      ASSERT_EQ(run_qkvlab("lm eliminate " + shell_quoted(A) + " --out " + shell_quoted(B) +
                           " --layers 1 --seq-len 16 --sequences 4").status, 0);
    }
    for (const char* tensor : {"wte", "h.0.attn.k.weight", "h.1.attn.q.weight"})
      EXPECT_GT(relative_change(A, B, tensor), 1e-2) << name << " " << tensor;
    auto v = verify_json("--checkpoint " + shell_quoted(B) + " --against " + shell_quoted(A));
    ASSERT_EQ(v.status, 0) << name << "\n" << v.err;
    const auto& comparison = member(v.json, "comparison");
    EXPECT_NE(member(comparison, "method").text.find("function"), std::string::npos);
    std::cout << name << " eliminated: logits rel_err " << measured(comparison).second << "\n";
    perturb_key(B, P, 0, 1);
    const auto r = run_qkvlab("verify --quiet --checkpoint " + shell_quoted(P) + " --against " + shell_quoted(A));
    EXPECT_EQ(r.status, 1) << name << "\n" << r.out << r.err;
    for (int head : named)
      EXPECT_NE(r.out.find("layer 1 head " + std::to_string(head) + ": attention pattern differs"), std::string::npos)
          << name << "\n" << r.out;
    EXPECT_EQ(r.out.find("layer 1 head 1:"), std::string::npos) << r.out;  // the unperturbed heads are not named
    EXPECT_EQ(r.out.find("layer 2 head"), std::string::npos) << r.out;      // nor the layers after the first
    std::cout << name << " eliminated, key head 2 of layer 1 perturbed:\n" << r.out;
  }
}

// A comparison judges every number it reports by one rule, NaN failing: logits that overflow (ln_f's
// gain 3e38, finite weights) are a mismatch and exit 1 (they passed as the same function); a head
// whose W_Q and b_Q are zero is the same as itself (0/0 was NaN, "differs"), and differs from the
// trained head in either order (+inf); every tensor of a copy compared with itself passes, the
// zeroed ln_1 bias included. Controls: the trained model against itself passes by function.
TEST_F(CheckpointVerify, AgainstJudgesNaNAndZeroTensorsByOneRule) {
  const fs::path gpt2 = checkpoint("gpt2"), big = path() / "gpt2-ln-f-3e38", zero = path() / "gpt2-zero-head",
                 zero2 = path() / "gpt2-zero-head-copy";
  const int d = lm::load_checkpoint(gpt2).config.d, dh = lm::load_checkpoint(gpt2).config.head_dim;
  auto compare = [](const fs::path& B, const fs::path& A, const std::string& method) {
    return verify_json("--checkpoint " + shell_quoted(B) + " --against " + shell_quoted(A) + " --compare " + method);
  };
  EXPECT_EQ(compare(gpt2, gpt2, "function").status, 0);
  scale_columns(gpt2, big, "ln_f.weight", 0, d, 3e38f);
  for (const auto& [B, A] : {std::pair{big, gpt2}, std::pair{gpt2, big}}) {
    const auto v = compare(B, A, "function");
    EXPECT_EQ(v.status, 1) << v.err;
    const auto& comparison = member(v.json, "comparison");
    EXPECT_EQ(member(comparison, "ok").text, "false");
    EXPECT_EQ(member(member(comparison, "logits"), "pass").text, "false");
    const auto mismatches = strings(member(comparison, "mismatches"));
    ASSERT_FALSE(mismatches.empty());
    EXPECT_NE(mismatches.back().find("logits differ (rel_err "), std::string::npos) << mismatches.back();
  }
  scale_columns(gpt2, zero, lm::layer_tensor(0, "attn.q.weight"), 0, dh, 0.0f);
  scale_columns(zero, zero, lm::layer_tensor(0, "attn.q.bias"), 0, dh, 0.0f);
  scale_columns(zero, zero2, "h.0.ln_1.bias", 0, d, 0.0f);
  auto v = compare(zero2, zero2, "auto");
  EXPECT_EQ(v.status, 0) << v.err;
  for (const auto& t : member(member(v.json, "comparison"), "tensors").items)
    EXPECT_EQ(member(t, "pass").text, "true") << member(t, "tensor").text;
  for (const auto& [B, A] : {std::pair{zero, gpt2}, std::pair{gpt2, zero}}) {
    const auto r = run_qkvlab("verify --quiet --checkpoint " + shell_quoted(B) + " --against " + shell_quoted(A));
    EXPECT_EQ(r.status, 1) << r.out << r.err;
    EXPECT_NE(r.out.find("layer 1 head 1: W_Q W_K^T differs"), std::string::npos) << r.out;
  }
}

// The worst position is where the logits differ most in norm. By each row's relative error, a reference
// whose logits are all zero at some positions named one of them (0/0, or x/0 = inf at a small change).
TEST(CompareLogits, TheWorstPositionIsTheLargestDifference) {
  MatD A(4, 3), B(4, 3);
  A << 0, 0, 0, 1, 2, 3, 0, 0, 0, 4, 5, 6;
  B = A;
  B(0, 1) = 1e-9;  // a tiny change where A is zero: infinite relative error
  B(3, 2) += 2.0;  // the largest change
  EXPECT_EQ(theory_lm::most_different_row(A, B), 3);
  // Control: with that change gone, the tiny one at the zero row is the largest.
  B(3, 2) = A(3, 2);
  EXPECT_EQ(theory_lm::most_different_row(A, B), 0);
}

// The comparison says whether it compared the attention patterns: on the worst sequence when the
// models have the same layers and heads, and "not compared" with the counts otherwise (it was
// silent, while "method" said every layer's patterns were compared).
TEST_F(CheckpointVerify, AgainstSaysWhetherItComparedThePatterns) {
  const fs::path gpt2 = checkpoint("gpt2"), deeper = path() / "gpt2-three-layers";
  auto patterns = [](const Verified& v) { return member(member(member(v.json, "comparison"), "logits"), "patterns").text; };
  auto v = verify_json("--checkpoint " + shell_quoted(gpt2) + " --against " + shell_quoted(gpt2) + " --compare function");
  EXPECT_EQ(v.status, 0) << v.err;
  EXPECT_EQ(patterns(v).rfind("every layer's, on sequence ", 0), 0u) << patterns(v);
  ASSERT_EQ(run_qkvlab("lm init --layers 3 --d 32 --heads 4 --vocab 64 --positions 32 " + shell_quoted(deeper)).status, 0);
  v = verify_json("--checkpoint " + shell_quoted(deeper) + " --against " + shell_quoted(gpt2));
  EXPECT_EQ(v.status, 1) << v.err;
  EXPECT_EQ(patterns(v), "not compared: the models have 3 and 2 layers of 4 and 4 heads");
}

// Heads a and b of `layer` swapped: their query, key and value columns (and biases) and their rows of
// W_O, so the copy computes the same function with its heads in another order; with `queries_only`
// only W_Q's columns (and b_Q) move, which changes the function.
void swap_heads(const fs::path& from, const fs::path& to, int layer, int a, int b, bool queries_only = false) {
  lm::Checkpoint ck = lm::load_checkpoint(from);
  const lm::Config& c = ck.config;
  const auto layout = lm::parameter_layout(c, lm::make_plan(c));
  const int dh = c.head_dim;
  auto swap_columns = [&](const std::string& name) {
    const auto& s = layout.at(name);
    const std::size_t rows = s.shape.size() == 2 ? s.shape[0] : 1, cols = s.shape.back();
    for (std::size_t r = 0; r < rows; ++r)
      for (int k = 0; k < dh; ++k)
        std::swap(ck.values[s.offset + r * cols + std::size_t(a * dh + k)], ck.values[s.offset + r * cols + std::size_t(b * dh + k)]);
  };
  for (const char* p : {"q", "k", "v"}) {
    if (queries_only && std::string(p) != "q") continue;
    swap_columns(lm::layer_tensor(layer, std::string("attn.") + p + ".weight"));
    if (c.bias) swap_columns(lm::layer_tensor(layer, std::string("attn.") + p + ".bias"));
  }
  if (!queries_only) {
    const auto& s = layout.at(lm::layer_tensor(layer, "attn.o.weight"));
    const std::size_t cols = s.shape.back();
    for (int k = 0; k < dh; ++k)
      std::swap_ranges(ck.values.begin() + std::ptrdiff_t(s.offset + std::size_t(a * dh + k) * cols),
                       ck.values.begin() + std::ptrdiff_t(s.offset + std::size_t(a * dh + k + 1) * cols),
                       ck.values.begin() + std::ptrdiff_t(s.offset + std::size_t(b * dh + k) * cols));
  }
  lm::save_checkpoint(to, ck);
}

// The function comparison matches a layer's heads as a set: a copy with two heads swapped computes
// the same function, passes, and the report names the order (the patterns were matched by index, so
// it "differed" at both heads). The gauge comparison still matches its invariants by index (it fails).
// Control: swapping only the two heads' W_Q changes the function and fails, naming both heads.
TEST_F(CheckpointVerify, FunctionComparisonMatchesHeadsInAnyOrder) {
  const fs::path A = checkpoint("gpt2"), swapped = path() / "gpt2-swapped", queries = path() / "gpt2-queries-swapped";
  swap_heads(A, swapped, 0, 0, 1);
  swap_heads(A, queries, 0, 0, 1, true);
  auto v = verify_json("--checkpoint " + shell_quoted(swapped) + " --against " + shell_quoted(A) + " --compare function");
  EXPECT_EQ(v.status, 0) << v.err << strings(member(member(v.json, "comparison"), "mismatches")).size();
  const std::string patterns = member(member(member(v.json, "comparison"), "logits"), "patterns").text;
  EXPECT_NE(patterns.find("layer 1's heads in another order (A's 1 as 2, 2 as 1)"), std::string::npos) << patterns;
  EXPECT_EQ(patterns.find("layer 2"), std::string::npos) << patterns;
  v = verify_json("--checkpoint " + shell_quoted(swapped) + " --against " + shell_quoted(A) + " --compare gauge");
  EXPECT_EQ(v.status, 1);
  v = verify_json("--checkpoint " + shell_quoted(queries) + " --against " + shell_quoted(A) + " --compare function");
  EXPECT_EQ(v.status, 1);
  const auto mismatches = strings(member(member(v.json, "comparison"), "mismatches"));
  const auto named = [&](const std::string& text) {
    return std::any_of(mismatches.begin(), mismatches.end(), [&](const std::string& m) { return m.find(text) == 0; });
  };
  EXPECT_TRUE(named("layer 1 head 1: attention pattern differs") && named("layer 1 head 2: attention pattern differs"))
      << mismatches.size();
  // Heads 1 and 2 swapped and head 3's W_Q changed: head 3 alone is named (the swapped pair was too).
  const fs::path changed = path() / "gpt2-swapped-and-changed";
  const int dh = lm::load_checkpoint(A).config.head_dim;
  scale_columns(swapped, changed, "h.0.attn.q.weight", 2 * dh, dh, 1.5f);
  v = verify_json("--checkpoint " + shell_quoted(changed) + " --against " + shell_quoted(A) + " --compare function");
  EXPECT_EQ(v.status, 1);
  const auto named_there = strings(member(member(v.json, "comparison"), "mismatches"));
  std::vector<std::string> heads;
  for (const std::string& m : named_there)
    if (m.find("attention pattern differs") != std::string::npos) heads.push_back(m.substr(0, m.find(':')));
  EXPECT_EQ(heads, std::vector<std::string>{"layer 1 head 3"});
}

// qwe.thm8.3 carries its change of basis into the maps that read the norm: at ln_1 the layer's own
// W_Q, W_K, W_V, which ResFormer's layers do not have alone. Those sites are listed as skipped with
// the reason (they were dropped silently); ln_2 and ln_f run, and qwe.lemma8.2 runs at ln_1.
// Control: on the vanilla GPT-2 every ln_1 site runs and nothing of thm8.3 is skipped.
TEST_F(CheckpointVerify, Thm83NamesTheNormSitesItCannotRun) {
  const fs::path resformer = path() / "resformer";
  ASSERT_EQ(run_qkvlab("lm init --variant resformer --layers 2 --d 32 --heads 4 --vocab 64 --positions 32 " +
                       shell_quoted(resformer)).status, 0);
  auto sites = [](const engine::Json& report, const std::string& id) {
    std::vector<std::string> out;
    for (const auto& c : member(report, "checks").items)
      if (member(c, "id").text == id) out.push_back(member(c, "config").text);
    return out;
  };
  auto count_ln1 = [](const std::vector<std::string>& xs) {
    return std::ranges::count_if(xs, [](const std::string& x) { return x.find("norm=ln_1") != std::string::npos; });
  };
  auto v = verify_json("--precision double --checkpoint " + shell_quoted(resformer) + " qwe.lemma8.2 qwe.thm8.3");
  ASSERT_EQ(v.status, 0) << v.err;
  EXPECT_EQ(skip_reason(v.json, "qwe.thm8.3").rfind("norm=ln_1 of layers 1, 2: the variant resformer", 0), 0u)
      << skip_reason(v.json, "qwe.thm8.3");
  EXPECT_EQ(count_ln1(sites(v.json, "qwe.thm8.3")), 0);
  EXPECT_EQ(count_ln1(sites(v.json, "qwe.lemma8.2")), 2);
  EXPECT_EQ(sites(v.json, "qwe.thm8.3").size(), 3u);
  v = verify_json("--precision double --checkpoint " + shell_quoted(checkpoint("gpt2")) + " qwe.thm8.3");
  ASSERT_EQ(v.status, 0) << v.err;
  EXPECT_EQ(skip_reason(v.json, "qwe.thm8.3"), "");
  EXPECT_EQ(count_ln1(sites(v.json, "qwe.thm8.3")), 2);
}

// No command writes over the model it reads: lm eliminate --out its own checkpoint, verify's
// --out/--junit and analyze's --csv in the checkpoint's (or --against's) directory are usage errors
// (exit 2, one line) that leave every file as it was. A checkpoint saved without optimizer state
// drops the one its directory held (a resume would have read another model's moments). Controls:
// the same outputs elsewhere are written; a save with optimizer state keeps it.
TEST_F(CheckpointVerify, OutputsNeverReplaceTheModelRead) {
  const fs::path own = path() / "gpt2-free-copy";
  fs::copy(checkpoint("gpt2-free"), own);
  auto bytes = [](const fs::path& f) {
    std::ifstream in(f, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string model = bytes(own / "model.safetensors"), config = bytes(own / "config.json");
  const std::string q = shell_quoted(own), elsewhere = shell_quoted(path() / "elsewhere");
  for (const std::string& command :
       {"lm eliminate " + q + " --out " + q + " --layers 1 --sequences 2 --seq-len 16",
        "verify --quiet --checkpoint " + q + " qwe.prop4.1 --out " + shell_quoted(own / "model.safetensors"),
        "verify --quiet --checkpoint " + shell_quoted(checkpoint("gpt2")) + " --against " + q + " --junit " +
            shell_quoted(own / "config.json"),
        "analyze entropy " + q + " --sequences 2 --seq-len 16 --quiet --csv " + shell_quoted(own / "model.safetensors")}) {
    const auto r = run_qkvlab(command);
    EXPECT_EQ(r.status, 2) << command << "\n" << r.err;
    EXPECT_EQ(std::ranges::count(r.err, '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("write elsewhere"), std::string::npos) << r.err;
  }
  EXPECT_EQ(bytes(own / "model.safetensors"), model);
  EXPECT_EQ(bytes(own / "config.json"), config);
  EXPECT_EQ(run_qkvlab("lm eliminate " + q + " --out " + elsewhere + " --layers 1 --sequences 2 --seq-len 16 --quiet").status, 0);
  EXPECT_EQ(run_qkvlab("verify --quiet --checkpoint " + q + " qwe.prop4.1 --out " + shell_quoted(path() / "report.h5")).status, 0);
  ASSERT_TRUE(fs::exists(own / "optimizer.safetensors"));
  lm::save_checkpoint(own, lm::load_checkpoint(own, true));
  EXPECT_TRUE(fs::exists(own / "optimizer.safetensors"));
  lm::save_checkpoint(own, lm::load_checkpoint(own));
  EXPECT_FALSE(fs::exists(own / "optimizer.safetensors"));
}

// No output is another's file or a file the command reads: --out and --junit given one name, and an
// --out that is the --tokens file (it was replaced by the HDF5 report, exit 0), are usage errors
// (exit 2, one line) that leave every file as it was. Control: distinct outputs are both written.
TEST_F(CheckpointVerify, OutputsAreDistinctFilesAndNeverAnInput) {
  const fs::path tokens = path() / "tokens-copy.npy";
  fs::copy_file(path() / "tokens.npy", tokens, fs::copy_options::overwrite_existing);
  auto bytes = [](const fs::path& f) {
    std::ifstream in(f, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string before = bytes(tokens), ck = shell_quoted(checkpoint("gpt2")), t = shell_quoted(tokens);
  const std::string report = shell_quoted(path() / "same.out");
  for (const auto& [command, says] : std::vector<std::pair<std::string, std::string>>{
           {"verify --quiet --checkpoint " + ck + " qwe.prop4.1 --tokens " + t + " --out " + t, "is the file --tokens reads"},
           {"analyze entropy " + ck + " --tokens " + t + " --sequences 2 --seq-len 16 --quiet --out " + t,
            "is the file --tokens reads"},
           {"verify --quiet --checkpoint " + ck + " qwe.prop4.1 --out " + report + " --junit " + report, "is also --out's file"}}) {
    const auto r = run_qkvlab(command);
    EXPECT_EQ(r.status, 2) << command << "\n" << r.err;
    EXPECT_EQ(std::ranges::count(r.err, '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  }
  EXPECT_EQ(bytes(tokens), before);
  EXPECT_FALSE(fs::exists(path() / "same.out"));
  // A name derived from an output's (analyze all's STEM-TABLE.csv, a figure's STEM.svg) is checked
  // too, before the work: the run writes none of its tables, and the token file is left as it was.
  // Refused with a model that does not exist, the check comes before the model is read.
  const fs::path derived = path() / "t-entropy.npy";
  fs::copy_file(tokens, derived, fs::copy_options::overwrite_existing);
  for (const std::string& model : {ck, shell_quoted(path() / "no-such-model")}) {
    const std::string all = "analyze all " + model + " --tokens " + shell_quoted(derived) +
                            " --sequences 2 --seq-len 16 --quiet --csv " + shell_quoted(path() / "t.npy");
    const auto refused = run_qkvlab(all);
    EXPECT_EQ(refused.status, 2) << refused.err;
    EXPECT_NE(refused.err.find("--csv " + (path() / "t-entropy.npy").string() + " is the file --tokens reads"),
              std::string::npos) << refused.err;
  }
  EXPECT_EQ(bytes(derived), before);
  EXPECT_FALSE(fs::exists(path() / "t-similarity.npy"));
  const fs::path text = path() / "f-spectrum.svg";
  std::ofstream(text) << "a text whose name is one of the figure's files";
  const auto figure = run_qkvlab("analyze all " + shell_quoted(path() / "no-such-model") + " --text " + shell_quoted(text) +
                                 " --seq-len 16 --quiet --csv " + shell_quoted(path() / "f.csv") + " --figure " +
                                 shell_quoted(path() / "f"));
  EXPECT_EQ(figure.status, 2) << figure.err;
  EXPECT_NE(figure.err.find("--figure " + text.string() + " is the file --text reads"), std::string::npos) << figure.err;
  // Control: the checkpoint's own absence is what a run with distinct names reports.
  const auto absent = run_qkvlab("analyze all " + shell_quoted(path() / "no-such-model") + " --tokens " + shell_quoted(derived) +
                                 " --seq-len 16 --quiet --csv " + shell_quoted(path() / "u.npy"));
  EXPECT_EQ(absent.status, 2) << absent.err;
  EXPECT_EQ(absent.err.find("reads: write elsewhere"), std::string::npos) << absent.err;
  const auto r = run_qkvlab("verify --quiet --checkpoint " + ck + " qwe.prop4.1 --tokens " + t + " --out " +
                            shell_quoted(path() / "distinct.h5") + " --junit " + shell_quoted(path() / "distinct.xml"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(bytes(path() / "distinct.h5").substr(1, 3), "HDF");
  EXPECT_EQ(bytes(path() / "distinct.xml").rfind("<?xml", 0), 0u);
  // A device takes several outputs: it is written into, never replaced.
  EXPECT_EQ(run_qkvlab("verify --quiet --checkpoint " + ck + " qwe.prop4.1 --out /dev/null --junit /dev/null").status, 0);
}

// Every reader of a model's values checks its files against its manifest.json: a checkpoint whose
// model.safetensors was changed after the manifest was written (one weight), or whose config.json
// is another write's, is refused naming the file (verify --checkpoint read it, exit 0; lm eval
// and analyze likewise). Control: the untouched copy runs.
TEST_F(CheckpointVerify, ModelReadersRefuseFilesThatDoNotMatchTheManifest) {
  const fs::path copy = path() / "gpt2-manifest";
  fs::remove_all(copy);
  fs::copy(checkpoint("gpt2"), copy);
  const std::string c = shell_quoted(copy);
  const std::vector<std::string> commands = {"verify --quiet --checkpoint " + c + " qwe.prop4.1",
                                             "analyze entropy " + c + " --tokens " + shell_quoted(path() / "tokens.npy") +
                                                 " --sequences 2 --seq-len 16 --quiet",
                                             "lm eval " + c + " --tokens " + shell_quoted(path() / "tokens.npy") +
                                                 " --seq-len 16 --quiet"};
  for (const std::string& command : commands) EXPECT_EQ(run_qkvlab(command).status, 0) << command;
  {
    std::fstream f(copy / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-4, std::ios::end);
    char last[4];
    f.read(last, 4);
    last[0] ^= 1;  // the low bit of the last float's mantissa
    f.seekp(-4, std::ios::end);
    f.write(last, 4);
  }
  for (const std::string& command : commands) {
    const auto r = run_qkvlab(command);
    EXPECT_EQ(r.status, 2) << command << "\n" << r.err;
    EXPECT_NE(r.err.find("model.safetensors: does not match manifest.json"), std::string::npos) << r.err;
  }
  fs::copy_file(checkpoint("gpt2") / "model.safetensors", copy / "model.safetensors", fs::copy_options::overwrite_existing);
  std::ofstream(copy / "config.json") << "{";
  const auto r = run_qkvlab(commands[0]);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("config.json: does not match manifest.json"), std::string::npos) << r.err;
}

// A Hugging Face directory's manifest.json of another tool is not a checkpoint manifest and is left
// alone (it made the model unreadable); one of the checkpoints' format there is checked. An export
// into a checkpoint's directory is refused (its manifest and optimizer state would describe other
// files), as into a directory holding another model's tokenizer files.
TEST_F(CheckpointVerify, HuggingFaceDirectoriesAndTheirManifests) {
  const fs::path hf = path() / "gpt2-hf-with-manifest";
  fs::remove_all(hf);
  fs::copy(path() / "gpt2-hf", hf);
  std::ofstream(hf / "manifest.json") << R"({"name": "my model"})";
  const std::string args = " qwe.prop4.1 --precision float";
  EXPECT_EQ(run_qkvlab("verify --quiet --checkpoint " + shell_quoted(hf) + args).status, 0);
  fs::copy_file(checkpoint("gpt2") / "manifest.json", hf / "manifest.json", fs::copy_options::overwrite_existing);
  const auto r = run_qkvlab("verify --quiet --checkpoint " + shell_quoted(hf) + args);
  EXPECT_EQ(r.status, 2) << r.err;  // the checkpoint's manifest lists files this directory does not hold
  const fs::path into = path() / "export-into-a-checkpoint";
  fs::remove_all(into);
  fs::copy(checkpoint("gpt2-free"), into);
  const auto e = run_qkvlab("lm export " + shell_quoted(checkpoint("gpt2")) + " --hf " + shell_quoted(into));
  EXPECT_EQ(e.status, 2) << e.err;
  EXPECT_NE(e.err.find("export into an empty directory"), std::string::npos) << e.err;
}

// Review r12: --against checks the second model's vocabulary and positions before either model runs
// (`--checkpoint A --against B` of vocabularies 64 and 32 said "token id 53 ... outside the model's
// vocabulary of 32", the intended message only in the other order; a shorter model was not named);
// --tolerance 1 admits any output (an all-zero model passed) and is refused; a training run's
// directory names its checkpoint; the skip reasons say what is true of the model (MLA's RoPE
// extension named lemma3.1 and prop4.2 as running; Q-identity's VO freedom blamed a W_Q it does not
// involve). Controls: each model against itself passes, --tolerance 0.999 runs.
TEST_F(CheckpointVerify, AgainstAndReasonsNameWhatIsTrueOfTheModels) {
  const fs::path gpt2 = checkpoint("gpt2"), small = path() / "gpt2-vocab-32", short_ = path() / "gpt2-positions-8";
  const std::string shape = " --layers 2 --d 32 --heads 4 --bias ";
  ASSERT_EQ(run_qkvlab("lm init" + shape + "--vocab 32 --positions 32 " + shell_quoted(small)).status, 0);
  ASSERT_EQ(run_qkvlab("lm init" + shape + "--vocab 64 --positions 8 " + shell_quoted(short_)).status, 0);
  const auto against = [&](const fs::path& b, const fs::path& a, const std::string& more = "") {
    return run_qkvlab("verify --quiet --checkpoint " + shell_quoted(b) + " --against " + shell_quoted(a) + more);
  };
  for (const auto& [b, a] : {std::pair{gpt2, small}, std::pair{small, gpt2}})
    expect_usage_error(against(b, a), "vocabularies", "--against: the checkpoints have different vocabularies");
  expect_usage_error(against(gpt2, short_), "positions",
                     "--against " + short_.string() + ": sequences of 16 tokens are longer than its 8 positions");
  expect_usage_error(against(gpt2, gpt2, " --tolerance 1"), "--tolerance 1", "--tolerance: must be a number from 0 to below 1");
  EXPECT_EQ(against(gpt2, gpt2, " --tolerance 0.999").status, 0);
  EXPECT_EQ(against(small, small).status, 0);
  expect_usage_error(run_qkvlab("verify --quiet --checkpoint " + shell_quoted(path() / "gpt2")), "run directory",
                     "a training run's directory: its model is " + gpt2.string());
  const fs::path mla = path() / "llama-mla", qi = path() / "gpt2-q-identity";
  ASSERT_EQ(run_qkvlab("lm init --family llama --mla --d-c 16 --d-r 4 --layers 2 --d 32 --heads 4 --vocab 64 --positions 32 " +
                       shell_quoted(mla)).status, 0);
  ASSERT_EQ(run_qkvlab("lm init --variant q-identity" + shape + "--vocab 64 --positions 32 " + shell_quoted(qi)).status, 0);
  const Verified on_mla = verify_json("--checkpoint " + shell_quoted(mla));
  EXPECT_NE(skip_reason(on_mla.json, "qwe.ext.rope").find("multi-head latent attention"), std::string::npos)
      << skip_reason(on_mla.json, "qwe.ext.rope");
  const Verified on_qi = verify_json("--checkpoint " + shell_quoted(qi));
  EXPECT_NE(skip_reason(on_qi.json, "qwe.freedom.vo").find("a limit of the check, not of the statement"), std::string::npos)
      << skip_reason(on_qi.json, "qwe.freedom.vo");
  EXPECT_NE(skip_reason(on_qi.json, "qwe.lemma3.1").find("no W_Q"), std::string::npos);  // control: W_Q's freedom has none
}

TEST_F(CheckpointVerify, UsageErrors) {
  const std::string ckpt = shell_quoted(checkpoint("gpt2"));
  for (const std::string& args :
       {"--against " + ckpt, "--checkpoint " + ckpt + " --d 16", "--checkpoint " + shell_quoted(path() / "absent"),
        "--checkpoint " + ckpt + " --against " + ckpt + " qwe.lemma3.1",
        "--checkpoint " + ckpt + " --against " + shell_quoted(checkpoint("llama")) + " --compare gauge",
        "--checkpoint " + ckpt + " --tokens " + shell_quoted(path() / "tokens.npy") + " --corpus brown",
        "--checkpoint " + ckpt + " --seq-len 64", "--checkpoint " + ckpt + " qwe.nonexistent"}) {
    const auto r = run_qkvlab("verify --quiet " + args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.out << r.err;
    EXPECT_EQ(std::ranges::count(r.err, '\n'), 1) << args << "\n" << r.err;
  }
}

}  // namespace

// --against's default tolerance is sized by an lm eliminate output's recorded condition (eliminated.kappa):
// the committed norm-free model's layer 1 has kappa 1.3e4, and its exact elimination differed from
// the source by 1.15e-4 in layer 4's patterns on 8 x 128 tokens, failing the fixed 1e-4 (review r12).
// It passes at u kappa (7.9e-4), stated as the tolerance's basis. Controls: --tolerance 1e-4 given
// still fails it; the elimination with one key head of layer 2 scaled by 1.1 (1.5e-3 in its patterns)
// fails at u kappa.
TEST_F(CheckpointVerify, AgainstSizesItsToleranceByAnEliminationsCondition) {
  const fs::path A = fs::path(QKVLAB_SOURCE_DIR) / "outputs/lm/eliminate/norm-free/model", B = path() / "free-layer-1";
  ASSERT_EQ(run_qkvlab("lm eliminate " + shell_quoted(A) + " --out " + shell_quoted(B) + " --layers 1 --seq-len 16 --sequences 4 --quiet")
                .status, 0);
  const std::string tokens = " --sequences 8 --seq-len 128";
  const Verified sized = verify_json("--checkpoint " + shell_quoted(B) + " --against " + shell_quoted(A) + tokens);
  EXPECT_EQ(sized.status, 0) << sized.err;
  const auto& comparison = member(sized.json, "comparison");
  EXPECT_NEAR(std::stod(member(comparison, "tolerance").text), 7.94e-4, 1e-6);
  EXPECT_EQ(member(comparison, "tolerance_basis").text.rfind("u kappa", 0), 0u) << member(comparison, "tolerance_basis").text;
  EXPECT_EQ(verify_json("--checkpoint " + shell_quoted(B) + " --against " + shell_quoted(A) + tokens + " --tolerance 1e-4").status, 1);
  lm::Checkpoint changed = lm::load_checkpoint(B);
  const auto layout = lm::parameter_layout(changed.config, lm::make_plan(changed.config));
  const auto& k = layout.at(lm::layer_tensor(1, "attn.k.weight"));
  const std::size_t cols = std::size_t(k.shape.back());
  for (std::size_t r = 0; r < std::size_t(k.shape[0]); ++r)
    for (int c = 0; c < changed.config.head_dim; ++c) changed.values[k.offset + r * cols + std::size_t(c)] *= 1.1f;
  lm::save_checkpoint(path() / "free-layer-1-changed", changed);
  const Verified caught = verify_json("--checkpoint " + shell_quoted(path() / "free-layer-1-changed") + " --against " +
                                      shell_quoted(A) + tokens);
  EXPECT_EQ(caught.status, 1) << caught.err;
  // A recorded condition lm eliminate would not record (1e300 would admit any output) is refused, naming it.
  for (const char* kappa : {"1e300", "nan", "-5", "abc"}) {
    lm::Checkpoint tampered = lm::load_checkpoint(B);
    tampered.metadata[lm::kEliminatedKappa] = kappa;
    const fs::path dir = path() / (std::string("free-layer-1-kappa-") + (kappa[0] == '-' ? "neg" : kappa));
    lm::save_checkpoint(dir, tampered);
    expect_usage_error(run_qkvlab("verify --quiet --checkpoint " + shell_quoted(dir) + " --against " + shell_quoted(A)), kappa,
                       std::string("eliminated.kappa \"") + kappa + "\" is not a condition lm eliminate records");
  }
  // A record on a model without Q-identity layers is no elimination's: the tolerance stays 1e-4; and
  // lm eliminate of such a model records its own kappa, not the source's (1e300 was copied).
  lm::Checkpoint marked = lm::load_checkpoint(A);
  marked.metadata[lm::kEliminatedKappa] = "1e300";
  lm::save_checkpoint(path() / "free-marked", marked);
  const Verified unmarked = verify_json("--checkpoint " + shell_quoted(path() / "free-marked") + " --against " + shell_quoted(A));
  EXPECT_EQ(unmarked.status, 0) << unmarked.err;
  EXPECT_NEAR(std::stod(member(member(unmarked.json, "comparison"), "tolerance").text), 1e-4, 1e-12);
  ASSERT_EQ(run_qkvlab("lm eliminate " + shell_quoted(path() / "free-marked") + " --out " + shell_quoted(path() / "free-marked-1") +
                       " --layers 1 --seq-len 16 --sequences 4 --quiet").status, 0);
  EXPECT_NEAR(std::stod(lm::load_checkpoint(path() / "free-marked-1").metadata.at(lm::kEliminatedKappa)), 13319.4, 0.1);
}

// The committed trained tiny GPT-2s of outputs/lm/eliminate (L = 4, d = 64; LayerNorm, and
// norm-free): every applicable claim holds on their own weights with its controls failing, and
// the norm-free model's layer-2 elimination is the same function (control: the LayerNorm model's
// elimination is not, and --against says so with exit 1).
TEST_F(CheckpointVerify, CommittedTrainedCheckpoints) {
  const fs::path committed = fs::path(QKVLAB_SOURCE_DIR) / "outputs/lm/eliminate";
  for (const char* model : {"model", "norm-free/model"}) {
    const Verified v = verify_json("--precision float,double --checkpoint " + shell_quoted(committed / model));
    ASSERT_EQ(v.status, 0) << model << ": " << v.err;
    EXPECT_EQ(member(member(v.json, "summary"), "ok").text, "true") << model;
    EXPECT_TRUE(contains(strings(member(v.json, "claims_run")), "qwe.lemma3.1")) << model;
  }
  for (const auto& [model, same] : {std::pair{"norm-free/model", true}, std::pair{"model", false}}) {
    const fs::path A = committed / model, B = path() / (std::string(same ? "free" : "ln") + "-eliminated");
    ASSERT_EQ(run_qkvlab("lm eliminate " + shell_quoted(A) + " --out " + shell_quoted(B) +
                         " --layers 2 --seq-len 16 --sequences 4").status, 0) << model;
    const auto r = run_qkvlab("verify --quiet --checkpoint " + shell_quoted(B) + " --against " + shell_quoted(A));
    EXPECT_EQ(r.status, same ? 0 : 1) << model << ": " << r.out << r.err;
  }
}
