// Parameter and KV-cache accounting (lm/accounting.hpp, qkvlab params/kv):
// the counts come from the model's own layout and plan; here they are checked
// against published totals and against docs/math/lm.md's closed forms, which the
// code does not use. Controls: the closed form of another variant, and the
// count with a planted bug (reused heads counted again), must disagree.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "lm/accounting.hpp"
#include "lm/config.hpp"
#include "run_command.hpp"

namespace {

using namespace qkvlab;
using test_support::run_qkvlab;

lm::Config gpt2_small(int vocab, bool bias) {
  lm::Config c = lm::family_defaults(lm::Family::gpt2, 12, 768, 12, vocab, 1024);
  c.tied = true, c.bias = bias;
  return c;
}

TEST(LmAccounting, Gpt2SmallIsHuggingFacesCount) {
  const auto a = lm::count_parameters(gpt2_small(50257, true));
  EXPECT_EQ(a.total, 124439808);  // GPT2LMHeadModel "gpt2": 124,439,808 parameters
  EXPECT_EQ(a.embedding, (50257 + 1024) * 768);
  std::int64_t sum = 0;
  for (const auto& c : a.components) sum += c.count;
  EXPECT_EQ(sum, a.total);
  EXPECT_EQ(a.component("attention.q"), 12 * (768 * 768 + 768));
  EXPECT_EQ(a.component("norms"), 25 * 2 * 768);
  EXPECT_EQ(a.component("head"), 0);  // tied
}

TEST(LmAccounting, NanoGptAndQueryIdentity) {
  // nanoGPT's bias-free GPT-2 (vocab padded to 50304, LayerNorm gains only): Query-weight elimination Table 2's baseline.
  const auto base = lm::count_parameters(gpt2_small(50304, false));
  EXPECT_EQ(base.total, 124373760);      // printed 124.37M
  EXPECT_EQ(base.non_embedding(), 84953856);  // printed 84.95M
  lm::Config q = gpt2_small(50304, false);
  q.variant.kind = lm::VariantKind::q_identity;
  const auto reduced = lm::count_parameters(q);
  EXPECT_EQ(base.total - reduced.total, 12LL * 768 * 768);  // W_Q gone, nothing else
  EXPECT_EQ(reduced.non_embedding(), 77875968);               // printed 77.88M
  // Control: with biases the difference also loses the 12 q biases.
  lm::Config qb = gpt2_small(50304, true), bb = qb;
  qb.variant.kind = lm::VariantKind::q_identity;
  EXPECT_EQ(lm::count_parameters(bb).total - lm::count_parameters(qb).total, 12LL * (768 * 768 + 768));
}

lm::Config llama(int L, int d, int H, int G, lm::VariantKind kind = lm::VariantKind::vanilla) {
  lm::Config c = lm::family_defaults(lm::Family::llama, L, d, H, 1000, 512);
  c.kv_heads = G;
  c.variant.kind = kind;
  return c;
}

std::int64_t kv(const lm::Config& c) { return lm::count_kv(c).elements_per_token(); }

// docs/math/lm.md's closed forms, per token, in elements.
TEST(LmAccounting, KvCacheMatchesTheClosedForms) {
  using K = lm::VariantKind;
  for (const auto& [L, d, H, G] : std::vector<std::array<int, 4>>{{24, 1024, 16, 16}, {24, 1024, 16, 8}, {7, 256, 8, 4},
                                                                  {12, 768, 12, 12}, {2, 64, 4, 2}}) {
    const std::int64_t dh = d / H, head = std::int64_t(G) * dh, half = std::int64_t(G / 2) * dh;
    SCOPED_TRACE("L=" + std::to_string(L) + " H=" + std::to_string(H) + " G=" + std::to_string(G));
    const std::int64_t mha = 2LL * L * G * dh;
    for (K k : {K::vanilla, K::resformer, K::neutreno, K::denseformer, K::q_identity, K::resformer_neutreno,
                K::resformer_k, K::resformer_q, K::resformer_previous, K::resformer_all, K::resformer_identity,
                K::resformer_cross})
      EXPECT_EQ(kv(llama(L, d, H, G, k)), mha);
    // SkipV1 at ρ = ½: L H d_h (keys) + H d_h + (L−1) H' d_h (values).
    const std::int64_t skip = L * head + head + (L - 1) * half;
    EXPECT_EQ(kv(llama(L, d, H, G, K::skipv1)), skip);
    EXPECT_EQ(kv(llama(L, d, H, G, K::svformer)), L * head + head);
    EXPECT_EQ(kv(llama(L, d, H, G, K::yoco_v)), L * head + (L / 2) * head);
    EXPECT_EQ(kv(llama(L, d, H, G, K::cla_v)), L * head + ((L + 1) / 2) * head);
    EXPECT_EQ(kv(llama(L, d, H, G, K::cla_k)), L * head + ((L + 1) / 2) * head);
    EXPECT_EQ(kv(llama(L, d, H, G, K::cla_kv)), 2 * ((L + 1) / 2) * head);
    if (L > 1) {  // control: CLA-KV is not CLA-V's count
      EXPECT_NE(kv(llama(L, d, H, G, K::cla_kv)), kv(llama(L, d, H, G, K::cla_v)));
    }
    EXPECT_EQ(kv(llama(L, d, H, G, K::skipkv1)), 2 * (head + (L - 1) * half));
    EXPECT_EQ(kv(llama(L, d, H, G, K::skipv1_yoco)), (L / 2) * head + head + (L - 1) * half);
    // SkipVk: layers ≤ k full; SkipV0 caches as SkipV1 (the injected heads are zero).
    lm::Config k3 = llama(L, d, H, G, K::skipv1);
    k3.variant.source_layer = std::min(3, L - 1);
    const int k = k3.variant.source_layer;
    EXPECT_EQ(kv(k3), L * head + k * head + (L - k) * half);
    // skipv1-yoco from a source layer k past L/2: every layer after L/2 still takes layer L/2's keys
    // (layers L/2+1 … k kept their own W_K and cached keys); control: SkipVk's own keys differ.
    if (L >= 4) {
      lm::Config yoco = llama(L, d, H, G, K::skipv1_yoco);
      yoco.variant.source_layer = L - 1;
      const int ky = L - 1;
      EXPECT_EQ(kv(yoco), (L / 2) * head + ky * head + (L - ky) * half);
      lm::Config skip = yoco;
      skip.variant.kind = K::skipv1;
      EXPECT_NE(kv(skip), kv(yoco));
    }
    // Controls: the MHA form does not describe SkipV1, nor does SkipV1's form SVFormer.
    EXPECT_NE(kv(llama(L, d, H, G, K::skipv1)), mha);
    EXPECT_NE(kv(llama(L, d, H, G, K::svformer)), skip);
    if (L > 1) {
      // The saving (L−1)/(4L) at ρ = ½ with G = H.
      EXPECT_DOUBLE_EQ(1.0 - double(skip) / double(mha), double(L - 1) / (4.0 * L));
    }
  }
}

TEST(LmAccounting, ReusedHeadsAreCountedOnceAtTheirOwner) {
  const auto a = lm::count_kv(llama(4, 64, 4, 4, lm::VariantKind::skipv1));
  ASSERT_EQ(a.layers.size(), 4u);
  EXPECT_TRUE(a.layers[0].reused.empty());
  for (int n = 1; n < 4; ++n) {
    ASSERT_EQ(a.layers[n].reused.size(), 1u);
    EXPECT_EQ(a.layers[n].reused[0].what, "values");
    EXPECT_EQ(a.layers[n].reused[0].layer, 1);
    // Numbered from 1 as the layer is (it was 2, 3: layers from 1, heads from 0): SkipV1's injected value
    // heads are H' + 1 … H_kv (docs/lm.md), here 3 and 4.
    EXPECT_EQ(a.layers[n].reused[0].heads, (std::vector<int>{3, 4}));
    EXPECT_EQ(a.layers[n].values, 2 * 16);
  }
  // kv's output numbers them so too (from_layer 1, heads 3 and 4), in JSON and in the table.
  const results::Value v = lm::kv_value(llama(4, 64, 4, 4, lm::VariantKind::skipv1), "f32", std::nullopt);
  const results::Value& reuse = v["layers"].items().at(1)["per_layer"]["reused"].items().at(0);
  EXPECT_EQ(v["layers"].items().at(1)["layers"].string(), "2-4");
  EXPECT_EQ(reuse["from_layer"].number(), 1);
  EXPECT_EQ(reuse["heads"].items().at(0).number(), 3);
  EXPECT_EQ(reuse["heads"].items().at(1).number(), 4);
  // Control (a planted bug): counting every head a layer attends to, reused ones included, is MHA's count.
  std::int64_t attended = 0;
  for (const auto& l : a.layers) {
    std::int64_t reused = 0;
    for (const auto& r : l.reused) reused += std::int64_t(r.heads.size()) * 16;
    attended += l.elements() + reused;
  }
  EXPECT_EQ(attended, 2 * 4 * 4 * 16);
  EXPECT_NE(attended, a.elements_per_token());
}

TEST(LmAccounting, ClaKvCountsEachSharedHeadOnceAtTheOddLayer) {
  const auto a = lm::count_kv(llama(4, 64, 4, 4, lm::VariantKind::cla_kv));
  for (int n : {1, 3}) {
    ASSERT_EQ(a.layers[n].reused.size(), 2u);
    EXPECT_EQ(a.layers[n].elements(), 0);
    for (const auto& r : a.layers[n].reused) EXPECT_EQ(r.layer, n);  // 1-based: layer n + 1 reads layer n
    EXPECT_TRUE(a.layers[n - 1].reused.empty());
    EXPECT_EQ(a.layers[n - 1].elements(), 2 * 4 * 16);
  }
}

TEST(LmAccounting, MlaCachesLatentAndRotaryKey) {
  lm::Config c = llama(24, 1024, 16, 16);
  c.mla = true, c.d_c = 256, c.d_r = 32;
  EXPECT_EQ(kv(c), 24 * (256 + 32));                // 6,912 elements: 13,824 bytes in bf16 (SkipV1Former Table 2)
  c.variant.kind = lm::VariantKind::skipv1;
  EXPECT_EQ(kv(c), (256 + 32) + 23 * (128 + 32));   // layer 1 keeps its whole latent: 3,968 (7,936 bytes)
  // Parameters: SkipV1-MLA halves W_DKV in layers 2…L: 23 · 1024 · 128 fewer.
  lm::Config v = c;
  v.variant.kind = lm::VariantKind::vanilla;
  EXPECT_EQ(lm::count_parameters(v).total - lm::count_parameters(c).total, 23LL * 1024 * 128);
}

TEST(LmAccounting, ParameterDifferencesOfTheVariants) {
  using K = lm::VariantKind;
  const lm::Config base = llama(6, 128, 8, 4);
  const std::int64_t total = lm::count_parameters(base).total, wv = 128LL * 4 * 16;
  auto diff = [&](K k) { return total - lm::count_parameters(llama(6, 128, 8, 4, k)).total; };
  EXPECT_EQ(diff(K::skipv1), 5 * wv / 2);
  EXPECT_EQ(diff(K::svformer), 5 * wv);
  EXPECT_EQ(diff(K::yoco_v), 3 * wv);
  EXPECT_EQ(diff(K::cla_v), 3 * wv);
  EXPECT_EQ(diff(K::cla_k), 3 * wv);  // W_K has W_V's shape
  EXPECT_EQ(diff(K::cla_kv), 6 * wv);
  for (K k : {K::resformer_neutreno, K::resformer_k, K::resformer_q, K::resformer_previous, K::resformer_all,
              K::resformer_identity, K::resformer_cross})
    EXPECT_EQ(diff(k), 0);
  EXPECT_EQ(diff(K::resformer), 0);
  EXPECT_EQ(diff(K::denseformer), -(2 + 3 + 4 + 5 + 6 + 7));  // α_{n,0…n} for n = 1 … 6
  EXPECT_EQ(diff(K::q_identity), 6LL * 128 * 128);
}

TEST(LmAccounting, CommandsReportTheCounts) {
  auto r = run_qkvlab("params --family gpt2 --layers 12 --d 768 --heads 12 --vocab 50257 --positions 1024 --tied --bias --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"total\": 124439808"), std::string::npos) << r.out;
  // With RoPE (dense_skip's GPT-2) the 1024 x 768 table of learned positions is gone, at any length.
  for (const char* positions : {"rope", "rope,1024", "2048,rope"}) {
    r = run_qkvlab(std::string("params --family gpt2 --layers 12 --d 768 --heads 12 --vocab 50257 --positions ") +
                   positions + " --tied --bias --format json");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("\"total\": 123653376"), std::string::npos) << positions << r.out;
  }
  r = run_qkvlab("params --family gpt2 --layers 12 --d 768 --heads 12 --vocab 50304 --positions 1024 --tied --format json");
  EXPECT_NE(r.out.find("\"total\": 124373760"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"non_embedding\": 84953856"), std::string::npos) << r.out;
  r = run_qkvlab("kv --family llama --layers 24 --d 1024 --heads 16 --kv-heads 8 --variant skipv1 --dtype f32 "
                 "--seq-len 1024 --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"bytes_per_token\": 74752"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"vanilla_bytes_per_token\": 98304"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"total_bytes\": 76546048"), std::string::npos) << r.out;
  // CLA-KV (ResFormer Fig. 4): keys and values cached in the odd layers only, 12 of 24.
  r = run_qkvlab("kv --family llama --layers 24 --d 1024 --heads 16 --kv-heads 8 --variant cla-kv --dtype f32 "
                 "--format json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"bytes_per_token\": 49152"), std::string::npos) << r.out;  // 2 · 12 · 8 · 64 · 4
  // resformer-neutreno's λ is the released 0.2 unless --lambda says otherwise (control).
  r = run_qkvlab("kv --variant resformer-neutreno --format json");
  EXPECT_NE(r.out.find("\"lambda\": 0.20000000000000001"), std::string::npos) << r.out;
  r = run_qkvlab("kv --variant resformer-neutreno --lambda 0.3 --format json");
  EXPECT_NE(r.out.find("\"lambda\": 0.29999999999999999"), std::string::npos) << r.out;
  // ResFormer's and NeuTRENO's weights on a model without them are refused, naming the variant, not
  // ignored (control: the λ form of resformer sets α = 1, β = λ).
  for (const char* flags : {"--variant resformer-cross --lambda 2", "--variant skipv1 --alpha 0.3",
                            "--variant resformer-all --beta 0.3", "--lambda 0.5"}) {
    r = run_qkvlab(std::string("kv ") + flags);
    EXPECT_EQ(r.status, 2) << flags;
    EXPECT_NE(r.err.find("(--variant "), std::string::npos) << flags << ": " << r.err;
  }
  r = run_qkvlab("kv --variant resformer --lambda 2 --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"beta\": 2"), std::string::npos) << r.out;
  r = run_qkvlab("kv --variant resformer --source-layer 0");  // ResFormer's source is a layer 1 … L−1
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("source layer"), std::string::npos) << r.err;
  r = run_qkvlab("kv --family gpt2 --layers 2 --d 64 --heads 4");  // text table
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("bytes_per_token"), std::string::npos) << r.out;
  // A directory and model flags together, or a bad dtype: one line, exit 2.
  r = run_qkvlab("params . --layers 3");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("not both"), std::string::npos) << r.err;
  r = run_qkvlab("kv --dtype f8");
  EXPECT_EQ(r.status, 2);
}

}  // namespace
