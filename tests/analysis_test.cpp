// analysis/: the measures against closed forms, each with a control that must
// move the number, and analyze() on a model whose attention is known exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "analysis/analyze.hpp"
#include "analysis/measures.hpp"
#include "core/errors.hpp"
#include "core/rng.hpp"
#include "engine/cpu_backend.hpp"
#include "lm/model.hpp"

namespace qkvlab::analysis {
namespace {

// H heads of the uniform causal pattern: A_ij = 1/(i+1) for j ≤ i.
std::vector<float> uniform_causal(int H, int T) {
  std::vector<float> p(std::size_t(H) * T * T, 0.0f);
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < T; ++i)
      for (int j = 0; j <= i; ++j) p[(std::size_t(h) * T + i) * T + j] = 1.0f / float(i + 1);
  return p;
}

// Every query on token 0 (an attention sink).
std::vector<float> sink(int H, int T) {
  std::vector<float> p(std::size_t(H) * T * T, 0.0f);
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < T; ++i) p[(std::size_t(h) * T + i) * T] = 1.0f;
  return p;
}

// Column entropy of the uniform causal pattern: a_j = Σ_{i≥j} 1/(i+1), normalized by T.
double uniform_column_entropy(int T) {
  double e = 0;
  for (int j = 0; j < T; ++j) {
    double a = 0;
    for (int i = j; i < T; ++i) a += 1.0 / (i + 1);
    e -= a / T * std::log(a / T);
  }
  return e;
}

TEST(AttentionEntropy, ClosedFormsOfTheUniformCausalPattern) {
  const int H = 3, T = 17;
  const auto p = uniform_causal(H, T);
  EXPECT_NEAR(attention_entropy(p.data(), H, T, EntropyDefinition::column), uniform_column_entropy(T), 1e-6);
  double row = 0;  // query i spreads over i + 1 tokens: entropy ln(i + 1)
  for (int i = 0; i < T; ++i) row += std::log(double(i + 1)) / T;
  EXPECT_NEAR(attention_entropy(p.data(), H, T, EntropyDefinition::row), row, 1e-6);
  EXPECT_NEAR(attention_entropy(p.data(), H, T, EntropyDefinition::printed), std::log(double(T)), 1e-12);
}

// Control: a sink concentrates everything on one token. The column and row definitions
// drop to 0; Eq. 11 as printed stays at ln T, because it cannot tell the two apart.
TEST(AttentionEntropy, ASinkMovesColumnAndRowButNotThePrintedDefinition) {
  const int H = 2, T = 9;
  const auto p = sink(H, T);
  EXPECT_NEAR(attention_entropy(p.data(), H, T, EntropyDefinition::column), 0.0, 1e-12);
  EXPECT_NEAR(attention_entropy(p.data(), H, T, EntropyDefinition::row), 0.0, 1e-12);
  EXPECT_NEAR(attention_entropy(p.data(), H, T, EntropyDefinition::printed), std::log(double(T)), 1e-12);
  EXPECT_GT(uniform_column_entropy(T), 1.0);
}

TEST(AttentionEntropy, ImportanceSumsTheQueryRows) {
  const int H = 2, T = 5;
  const auto a = token_importance(uniform_causal(H, T).data(), H, T);
  EXPECT_NEAR(std::accumulate(a.begin(), a.end(), 0.0), double(T), 1e-6);  // every row sums to 1
  EXPECT_NEAR(a[0], 1 + 1. / 2 + 1. / 3 + 1. / 4 + 1. / 5, 1e-6);
  EXPECT_NEAR(a[4], 1. / 5, 1e-6);
  EXPECT_TRUE(std::isinf(first_ratio(token_importance(sink(H, T).data(), H, T))));
  EXPECT_NEAR(first_ratio({4, 1, 2, 3}), 2.0, 1e-15);
}

TEST(TokenSimilarity, IdenticalOrthogonalAndRandomTokens) {
  RowMatrix same(6, 4);
  for (int i = 0; i < 6; ++i) same.row(i) << 1, -2, 3, 0.5;
  same.row(3) *= 7;  // the scale of a token does not change its direction
  EXPECT_NEAR(token_similarity(same), 1.0, 1e-14);
  EXPECT_NEAR(token_similarity(RowMatrix::Identity(5, 5)), 0.0, 1e-14);
  // Control: random tokens in 64 dimensions are nearly orthogonal, far from 1.
  Rng rng(3, "analysis_test/similarity");
  const RowMatrix random = rng.gaussian(16, 64);
  EXPECT_LT(std::abs(token_similarity(random)), 0.2);
  // Against the definition: the mean of the T(T−1) off-diagonal cosines.
  const RowMatrix c = cosine_matrix(random);
  EXPECT_NEAR(token_similarity(random), (c.sum() - c.trace()) / (16.0 * 15.0), 1e-12);
}

TEST(ValueSpectrum, TraceIsTheMeanSquaredNormAndBothShapesAgreeWithTheCovariance) {
  Rng rng(5, "analysis_test/spectrum");
  for (auto [T, width] : {std::pair{10, 4}, std::pair{4, 10}}) {
    const RowMatrix V = rng.gaussian(T, width);
    const auto ev = covariance_spectrum(V);
    ASSERT_EQ(int(ev.size()), std::min(T, width));
    EXPECT_TRUE(std::is_sorted(ev.rbegin(), ev.rend()));
    EXPECT_NEAR(std::accumulate(ev.begin(), ev.end(), 0.0), V.squaredNorm() / T, 1e-12);
    const Eigen::MatrixXd C = V.transpose() * V / double(T);
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> direct(C);
    EXPECT_NEAR(ev.front(), direct.eigenvalues().maxCoeff(), 1e-12);
    // Control: doubling the values quadruples the spectrum (so the 1/T is not silently a 1/T²).
    EXPECT_NEAR(covariance_spectrum(RowMatrix(2 * V)).front(), 4 * ev.front(), 1e-11);
  }
}

TEST(HeadCombination, ConcatKeepsAndMeanAverages) {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};  // T = 2, heads = 2, width = 2
  EXPECT_EQ(combine_heads(x.data(), 2, 2, 2, HeadCombination::concat).row(1), Eigen::RowVector4d(5, 6, 7, 8));
  EXPECT_EQ(combine_heads(x.data(), 2, 2, 2, HeadCombination::mean).row(1), Eigen::RowVector2d(6, 7));
}

lm::TokenSequences numbered(std::int64_t n, int T) {
  lm::TokenSequences s{{}, n, T};
  for (std::int64_t i = 0; i < n * T; ++i) s.ids.push_back(std::int32_t(i / T));
  return s;
}

TEST(ChooseSequences, SeededWithoutReplacementInFileOrder) {
  const auto all = numbered(50, 3);
  const auto a = choose_sequences(all, 10, 1), b = choose_sequences(all, 10, 1), c = choose_sequences(all, 10, 2);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_NE(a.ids, c.ids);  // control: the seed matters
  ASSERT_EQ(a.sequences, 10);
  for (std::int64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(a.ids[std::size_t(3 * i)], a.ids[std::size_t(3 * i + 2)]);  // whole sequences
    if (i) {
      EXPECT_LT(a.ids[std::size_t(3 * (i - 1))], a.ids[std::size_t(3 * i)]);  // distinct, in order
    }
  }
  EXPECT_EQ(choose_sequences(all, 0, 1).ids, all.ids);
  EXPECT_EQ(choose_sequences(all, 80, 1).ids, all.ids);
}

// A model whose query and key maps are zero attends uniformly over the causal prefix in
// every layer: its column entropy is the closed form at every layer. Control: the same
// model with its query and key maps scaled by 50 (entries of standard deviation 1, so the
// scores are far from 0) is measured differently.
struct TinyModel {
  engine::CpuBackend<float> backend{1};
  lm::Config config;
  std::unique_ptr<lm::Model<float>> model;
  explicit TinyModel(float qk_scale = 1) {
    config = lm::family_defaults(lm::Family::gpt2, 3, 16, 4, 32, 64);
    config.bias = false;
    model = std::make_unique<lm::Model<float>>(config, backend);
    model->initialize(9);
    if (qk_scale == 1) return;
    std::vector<float> values = model->parameter_values();
    for (const auto& spec : model->parameters().layout.specs())
      if (spec.name.find("attn.q.") != std::string::npos || spec.name.find("attn.k.") != std::string::npos)
        for (std::size_t i = 0; i < spec.size(); ++i) values[spec.offset + i] *= qk_scale;
    model->set_parameters(values);
  }
};

lm::TokenSequences random_tokens(std::int64_t n, int T, int vocab) {
  Rng rng(4, "analysis_test/tokens");
  lm::TokenSequences s{{}, n, T};
  for (std::int64_t i = 0; i < n * T; ++i) s.ids.push_back(std::int32_t(rng.uniform_int(vocab)));
  return s;
}

TEST(Analyze, UniformAttentionGivesTheClosedFormAtEveryLayer) {
  const int T = 12;
  const auto data = random_tokens(5, T, 32);
  TinyModel zero(0), random(50);
  Options o;
  o.batch = 2;  // 5 sequences: the last batch has one row that is not counted
  const Report r = analyze(*zero.model, Kind::entropy, data, o);
  const Report control = analyze(*random.model, Kind::entropy, data, o);
  ASSERT_EQ(r.entropy.size(), 3u);
  for (std::size_t l = 0; l < 3; ++l) {
    EXPECT_EQ(r.entropy[l].layer, int(l) + 1);
    EXPECT_NEAR(r.entropy[l].summary.value, uniform_column_entropy(T), 1e-5);
    EXPECT_NEAR(r.entropy[l].summary.std, 0.0, 1e-5);
    EXPECT_GT(std::abs(control.entropy[l].summary.value - uniform_column_entropy(T)), 1e-3);
  }
  EXPECT_EQ(r.sequences, 5);
  EXPECT_EQ(r.seq_len, T);
  // The JSON is the typed report's: its layers in order, with their summaries.
  const results::Value v = r.to_value();
  ASSERT_EQ(v["layers"].items().size(), 3u);
  EXPECT_EQ(v["layers"].items()[2]["layer"].number(), 3);
  EXPECT_EQ(v["layers"].items()[2]["mean"].number(), r.entropy[2].summary.value);
  EXPECT_EQ(v["layers"].items()[2]["se"].number(), r.entropy[2].summary.se);
  EXPECT_EQ(v["seq_len"].number(), T);
}

// The batch size is how the work is cut, not what is measured.
TEST(Analyze, AllAnalysesAreIndependentOfTheBatch) {
  const auto data = random_tokens(5, 10, 32);
  TinyModel m;
  Options one, three;
  one.batch = 1, three.batch = 3;
  const Report a = analyze(*m.model, Kind::all, data, one), b = analyze(*m.model, Kind::all, data, three);
  const results::Value va = a.to_value(), vb = b.to_value();
  for (const char* part : {"entropy", "similarity", "first_token"}) {
    const auto& la = va[part]["layers"];
    const auto& lb = vb[part]["layers"];
    ASSERT_EQ(la.items().size(), lb.items().size());
    for (std::size_t l = 0; l < la.items().size(); ++l) {
      const char* key = std::string(part) == "first_token" ? "importance_ratio" : "mean";
      EXPECT_NEAR(la.items()[l][key].number(), lb.items()[l][key].number(), 1e-5) << part << " " << l;
    }
  }
  EXPECT_EQ(a.similarity.size(), 4u);  // hf: L + 1 states
  EXPECT_EQ(va["similarity"]["layers"].items().size(), 4u);
  EXPECT_EQ(a.tables.size(), a.figures.size());
}

// Each sequence is measured on its own and the summaries add the measures in sequence order,
// so every number is the same bit for bit at any thread count. Control: other sequences differ.
TEST(Analyze, TheSameNumbersAtAnyThreadCount) {
  const auto data = random_tokens(7, 10, 32);
  TinyModel m;
  Options one, three;
  one.batch = three.batch = 4, one.threads = 1, three.threads = 3;
  for (Kind kind : {Kind::all, Kind::cross_layer}) {
    SCOPED_TRACE(to_string(kind));
    const std::string a = analyze(*m.model, kind, data, one).to_value().json();
    EXPECT_EQ(a, analyze(*m.model, kind, data, three).to_value().json());
    auto other = data;
    other.ids[0] = (other.ids[0] + 1) % 32;
    EXPECT_NE(a, analyze(*m.model, kind, other, three).to_value().json()) << "control: one token moved";
  }
}

TEST(Analyze, MatricesOfOneLayer) {
  const auto data = random_tokens(2, 6, 32);
  TinyModel m;
  Options o;
  o.layer = 1;
  const Report heads = analyze(*m.model, Kind::heads, data, o), tokens = analyze(*m.model, Kind::tokens, data, o);
  EXPECT_EQ(heads.cosine->mean.rows(), 4);
  EXPECT_EQ(tokens.cosine->mean.rows(), 6);
  EXPECT_EQ(heads.cosine->layer, 2);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(heads.cosine->mean(i, i), 1.0, 1e-6);
  const results::Value v = heads.to_value();
  ASSERT_EQ(v["matrix"].items().size(), 4u);
  EXPECT_EQ(v["matrix"].items()[1].items()[2].number(), heads.cosine->mean(1, 2));
  // The off-diagonal means: of the 12 entries i != j, and of their absolute values.
  double off = 0, magnitude = 0;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      if (i != j) off += heads.cosine->mean(i, j) / 12, magnitude += std::abs(heads.cosine->mean(i, j)) / 12;
  EXPECT_NEAR(heads.cosine->mean_off_diagonal(), off, 1e-15);
  EXPECT_NEAR(heads.cosine->mean_abs_off_diagonal(), magnitude, 1e-15);
  EXPECT_GT(std::abs(heads.cosine->mean_off_diagonal() - (heads.cosine->mean.sum() / 16)), 1e-3)
      << "control: the diagonal counted";
  o.layer = 3;
  EXPECT_THROW(analyze(*m.model, Kind::heads, data, o), qkvlab::UsageError);
}

// The matrices' spread, as every other measure's: each entry's sample standard deviation over the
// sequences and its standard error, equal to those of the matrices measured one sequence at a time
// (in the JSON as matrix_std and matrix_se, in the table as std and se). Controls: the population
// deviation (divided by n) is not it; one sequence has none (NaN).
TEST(Analyze, MatricesCarryTheirSpreadOverSequences) {
  const int n = 5, T = 6;
  const auto data = random_tokens(n, T, 32);
  TinyModel m;
  Options o;
  o.layer = 1;
  for (Kind kind : {Kind::heads, Kind::tokens}) {
    SCOPED_TRACE(to_string(kind));
    const Report all = analyze(*m.model, kind, data, o);
    std::vector<RowMatrix> each;
    for (int b = 0; b < n; ++b) {
      const lm::TokenSequences one{{data.ids.begin() + b * T, data.ids.begin() + (b + 1) * T}, 1, T};
      const Report r = analyze(*m.model, kind, one, o);
      EXPECT_TRUE(r.cosine->std.array().isNaN().all()) << "control: one sequence has no spread";
      // The text says what the JSON says of it: null, never nan.
      EXPECT_EQ(r.to_value().text().find("nan"), std::string::npos) << r.to_value().text();
      EXPECT_NE(r.to_value().text().find("matrix_std.[0]              null null"), std::string::npos) << r.to_value().text();
      each.push_back(r.cosine->mean);
    }
    RowMatrix mean = RowMatrix::Zero(each[0].rows(), each[0].cols()), sq = mean;
    for (const RowMatrix& c : each) mean += c / n;
    for (const RowMatrix& c : each) sq += (c - mean).cwiseAbs2();
    const RowMatrix sd = (sq / (n - 1)).cwiseSqrt();
    EXPECT_LT((all.cosine->std - sd).cwiseAbs().maxCoeff(), 1e-12);
    EXPECT_LT((all.cosine->se - sd / std::sqrt(double(n))).cwiseAbs().maxCoeff(), 1e-12);
    EXPECT_GT(sd.maxCoeff(), 1e-3);
    EXPECT_GT((all.cosine->std - (sq / n).cwiseSqrt()).cwiseAbs().maxCoeff(), 1e-4) << "control: divided by n";
    const results::Value v = all.to_value();
    EXPECT_EQ(v["matrix_std"].items()[1].items()[0].number(), all.cosine->std(1, 0));
    EXPECT_EQ(v["matrix_se"].items()[1].items()[0].number(), all.cosine->se(1, 0));
    const results::Table& t = all.tables.at(0);
    EXPECT_EQ(t.find("std")->values.at(std::size_t(all.cosine->mean.cols())), all.cosine->std(1, 0));
    EXPECT_EQ(t.find("se")->values.at(1), all.cosine->se(0, 1));
  }
}

// One layer's activations for cross_layer_cosines, drawn at random: T tokens, H query heads
// reading G key/value heads.
struct RandomLayer {
  int T, H, G, dk = 3, dv = 2;
  std::vector<float> q, k, v, pattern, k_m, v_m;
  RandomLayer(int T_, int H_, int G_, std::uint64_t seed) : T(T_), H(H_), G(G_) {
    Rng rng(seed, "analysis_test/cross_layer");
    auto draw = [&](std::size_t n) {
      std::vector<float> x(n);
      for (auto& e : x) e = float(rng.normal());
      return x;
    };
    q = draw(std::size_t(T) * H * dk), k = draw(std::size_t(T) * G * dk), v = draw(std::size_t(T) * G * dv);
    k_m = draw(k.size()), v_m = draw(v.size());
    pattern.assign(std::size_t(H) * T * T, 0.0f);  // A = softmax(q kᵀ / √d_k), causal
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        double z = 0;
        std::vector<double> e(std::size_t(i) + 1);
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int c = 0; c < dk; ++c)
            dot += double(q[(std::size_t(i) * H + h) * dk + c]) * k[(std::size_t(j) * G + h / (H / G)) * dk + c];
          z += e[std::size_t(j)] = std::exp(dot / std::sqrt(double(dk)));
        }
        for (int j = 0; j <= i; ++j) pattern[(std::size_t(h) * T + i) * T + j] = float(e[std::size_t(j)] / z);
      }
  }
  AttentionLayer layer() const { return {q.data(), k.data(), v.data(), pattern.data(), T, H, G, dk, dv}; }
  CrossLayerCosines against(const std::vector<float>& keys, const std::vector<float>& values) const {
    return cross_layer_cosines(layer(), keys.data(), values.data(), 1 / std::sqrt(double(dk)));
  }
};

// With K_m = K_n, Eq. 2 is Eq. 3 exactly (Eq. 4): cosine 1 for any values, with grouped heads too.
// Control: other keys K_m move it far from 1. Eq. 6 is not Eq. 2 in either case.
TEST(CrossLayerCosines, Eq3IsExactWhenTheKeysAgreeAndNotOtherwise) {
  for (auto [H, G] : {std::pair{2, 2}, std::pair{4, 2}}) {
    const RandomLayer x(9, H, G, 11);
    const CrossLayerCosines same = x.against(x.k, x.v_m);
    EXPECT_NEAR(same.eq3, 1.0, 1e-7) << H << " " << G;
    EXPECT_LT(same.eq6, 0.95);
    RandomLayer scaled = x;  // keys of another layer, scaled up so the scores differ widely
    for (float& e : scaled.k_m) e *= 3;
    EXPECT_LT(x.against(scaled.k_m, x.v_m).eq3, 0.99);
  }
}

// Token 0 sees only itself: Eq. 3 and Eq. 6 both give ½(v_n,0 + v_m,0) up to scale, and Eq. 2 weighs
// the two by the softmax of its two scores: the cosines are those of the closed form.
TEST(CrossLayerCosines, OneTokenHasTheClosedForm) {
  RandomLayer x(1, 1, 1, 12);
  for (float& e : x.k_m) e *= 3;  // scores far apart: Eq. 2 weighs the two values unequally
  x.v = {1, 0}, x.v_m = {0, 1};   // orthogonal values: the weighting shows in the cosine
  const auto score = [&](const std::vector<float>& k) {
    double d = 0;
    for (int c = 0; c < x.dk; ++c) d += double(x.q[std::size_t(c)]) * k[std::size_t(c)];
    return d / std::sqrt(double(x.dk));
  };
  const double w = 1 / (1 + std::exp(score(x.k_m) - score(x.k)));  // Eq. 2's weight of v_n
  Eigen::Vector2d exact, sum;
  for (int c = 0; c < 2; ++c)
    exact[c] = w * x.v[std::size_t(c)] + (1 - w) * x.v_m[std::size_t(c)], sum[c] = double(x.v[std::size_t(c)]) + x.v_m[std::size_t(c)];
  const double expected = exact.dot(sum) / (exact.norm() * sum.norm());
  const CrossLayerCosines got = x.against(x.k_m, x.v_m);
  EXPECT_NEAR(got.eq3, expected, 1e-7);
  EXPECT_NEAR(got.eq6, expected, 1e-7);
  EXPECT_LT(expected, 0.99) << "w = " << w;  // the example is not trivially exact
}

TEST(CrossLayerCosines, AZeroOutputIsAnErrorNotANumber) {
  RandomLayer x(4, 2, 2, 13);
  std::fill(x.v.begin(), x.v.end(), 0.0f);
  const std::vector<float> zero(x.v_m.size(), 0.0f);
  EXPECT_THROW(x.against(x.k, zero), qkvlab::NumericalError);
  EXPECT_NO_THROW(x.against(x.k, x.v_m));  // control
}

// In a model: layer 1 against itself is exact (cosine 1 to rounding), which also checks that the
// scores recomputed from q and k are the model's own; with zero query and key maps every layer
// attends uniformly and Eq. 2 = Eq. 3 exactly at every layer. Control: the model with scaled
// maps, whose layers 2 … L are not exact.
TEST(Analyze, CrossLayerIsExactWhereTheApproximationIsAndNotElsewhere) {
  const auto data = random_tokens(3, 12, 32);
  TinyModel zero(0), random(50);
  const Report uniform = analyze(*zero.model, Kind::cross_layer, data, {});
  const Report control = analyze(*random.model, Kind::cross_layer, data, {});
  ASSERT_EQ(uniform.cross_layer.size(), 3u);
  for (std::size_t l = 0; l < 3; ++l) {
    const CrossLayerCosine &u = uniform.cross_layer[l], &c = control.cross_layer[l];
    EXPECT_EQ(u.layer, int(l) + 1);
    EXPECT_NEAR(u.eq3.value, 1.0, 1e-9) << l;
    EXPECT_LT(u.eq6.value, 0.99) << l;
    if (l == 0) {
      EXPECT_NEAR(c.eq3.value, 1.0, 1e-9);
    } else {
      EXPECT_LT(c.eq3.value, 0.99) << l;
    }
  }
  EXPECT_EQ(uniform.tables.size(), 1u);
  EXPECT_EQ(uniform.definition["reference_layer"].number(), 1);
  EXPECT_EQ(uniform.to_value()["layers"].items()[1]["eq6_se"].number(), uniform.cross_layer[1].eq6.se);
}

// A uniform causal pattern's first-token importance ratio: T = 2 by hand (a_0 = 1 + 1/2, a_1 = 1/2:
// 3); T = 1 … 4 rises (the first token is seen by every query); T = 128 is the committed
// resformer-fig10's baseline to the last digit (the arithmetic moved here from reproduce/).
TEST(UniformCausal, FirstTokenImportanceRatio) {
  EXPECT_DOUBLE_EQ(uniform_causal_importance_ratio(2), 3.0);
  EXPECT_GT(uniform_causal_importance_ratio(4), uniform_causal_importance_ratio(3));
  EXPECT_EQ(uniform_causal_importance_ratio(128), 5.629659768453636);
  EXPECT_NE(uniform_causal_importance_ratio(127), 5.629659768453636);  // control: another length
}

// ---- Similarity, spectrum and the first-token norms reduced where the states live ---------------------
// analyze() takes them from the backend (lm/record.hpp's StateReduction: unit sums, Gram matrices,
// norms); here against the host path as it was before (kept as the reference: each sequence's
// activations copied to the host, the measures over Eigen rows), on tiny models of both families
// (llama with GQA), T below and above the values' width (both shapes of the Gram matrix). Budget: the
// two differ only in the order of double sums over at most T·d float-valued terms, so 1e-12 (absolute
// for similarities in [−1, 1], relative for spectra and ratios). Controls that must be caught, by more
// than 1e-3: the similarity over all pairs (the diagonal i = j included), the covariance missing the last row.

enum class Variant { exact, with_diagonal, without_last_row };

double reference_similarity(const RowMatrix& X, Variant v) {
  const double T = double(X.rows());
  Eigen::RowVectorXd sum = Eigen::RowVectorXd::Zero(X.cols());
  double nonzero = 0;
  for (Eigen::Index i = 0; i < X.rows(); ++i) {
    const double n = X.row(i).norm();
    if (n == 0) continue;
    sum += X.row(i) / n;
    nonzero += 1;
  }
  return v == Variant::with_diagonal ? sum.squaredNorm() / (T * T) : (sum.squaredNorm() - nonzero) / (T * (T - 1));
}

std::vector<double> reference_spectrum(RowMatrix X, Variant v) {
  const double T = double(X.rows());
  if (v == Variant::without_last_row) X.conservativeResize(X.rows() - 1, Eigen::NoChange);
  const Eigen::MatrixXd M = X.rows() < X.cols() ? Eigen::MatrixXd(X * X.transpose() / T) : Eigen::MatrixXd(X.transpose() * X / T);
  const Eigen::VectorXd ev = Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(M, Eigen::EigenvaluesOnly).eigenvalues();
  return {ev.data(), ev.data() + ev.size()};  // ascending
}

// Host copies of the sites a test names, per (site, layer), one matrix per sequence, heads combined.
struct HostStates final : lm::Recorder<float> {
  std::vector<lm::Site> sites;
  HeadCombination heads = HeadCombination::concat;
  std::map<std::pair<int, int>, std::vector<RowMatrix>> kept;
  bool wants(lm::Site s, int) const override { return std::find(sites.begin(), sites.end(), s) != sites.end(); }
  void record(const lm::Activation<float>& a) override {
    for (int b = 0; b < a.B; ++b)
      kept[{int(a.site), a.layer}].push_back(
          combine_heads(a.data + std::size_t(b) * a.T * a.heads * a.width, a.T, a.heads, a.width, heads));
  }
  const std::vector<RowMatrix>& at(lm::Site s, int layer) const { return kept.at({int(s), layer}); }
};

struct StateCase {
  std::string name;
  lm::Config config;
};

std::vector<StateCase> state_cases() {
  lm::Config gpt2 = lm::family_defaults(lm::Family::gpt2, 2, 16, 4, 32, 64),
             llama = lm::family_defaults(lm::Family::llama, 2, 16, 4, 32, 64);
  llama.kv_heads = 2;
  return {{"gpt2", gpt2}, {"llama_gqa", llama}};
}

double mean_of(const std::vector<RowMatrix>& xs, const std::function<double(const RowMatrix&)>& f) {
  double sum = 0;
  for (const RowMatrix& x : xs) sum += f(x) / double(xs.size());
  return sum;
}

double relative(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0, n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d += (a[i] - b[i]) * (a[i] - b[i]), n += a[i] * a[i];
  return std::sqrt(d / n);
}

TEST(StatesReduced, AgreeWithTheHostPathAndCatchTheControls) {
  for (const StateCase& c : state_cases()) {
    for (int T : {5, 20}) {  // values of width 16 (gpt2), 8 (llama): the T × T and the width × width Gram
      SCOPED_TRACE(c.name + " T=" + std::to_string(T));
      engine::CpuBackend<float> backend(2);
      lm::Model<float> model(c.config, backend);
      model.initialize(7);
      const auto data = random_tokens(3, T, c.config.vocab);
      Options o;
      o.batch = 3;  // one forward pass: the reference below sees the same batch
      o.of = Of::values, o.heads = HeadCombination::mean;
      const Report values = analyze(model, Kind::similarity, data, o), all = analyze(model, Kind::all, data, Options{});
      HostStates hidden, mean_values;
      hidden.sites = {lm::Site::resid_pre, lm::Site::resid_post, lm::Site::final, lm::Site::v};
      mean_values.sites = {lm::Site::v}, mean_values.heads = HeadCombination::mean;
      model.forward(data.ids.data(), nullptr, 3, T, lm::Pass::eval, 0, &hidden);
      model.forward(data.ids.data(), nullptr, 3, T, lm::Pass::eval, 0, &mean_values);
      const int L = c.config.layers;
      for (int l = 0; l <= L; ++l) {  // hf states: the embedding output, blocks 1 … L−1, the final norm
        const auto& x = l == 0 ? hidden.at(lm::Site::resid_pre, 0) : l < L ? hidden.at(lm::Site::resid_post, l - 1) : hidden.at(lm::Site::final, L);
        const double got = all.similarity[std::size_t(l)].summary.value;
        EXPECT_NEAR(got, mean_of(x, [](const RowMatrix& X) { return reference_similarity(X, Variant::exact); }), 1e-12) << "state " << l;
        EXPECT_GT(std::abs(got - mean_of(x, [](const RowMatrix& X) { return reference_similarity(X, Variant::with_diagonal); })), 1e-3)
            << "control: the diagonal included, state " << l;
      }
      for (int l = 0; l < L; ++l) {
        SCOPED_TRACE("layer " + std::to_string(l + 1));
        const auto& v = hidden.at(lm::Site::v, l);
        EXPECT_NEAR(values.similarity[std::size_t(l)].summary.value,
                    mean_of(mean_values.at(lm::Site::v, l), [](const RowMatrix& X) { return reference_similarity(X, Variant::exact); }), 1e-12);
        std::vector<double> exact, control;
        for (const RowMatrix& X : v) {
          const auto e = reference_spectrum(X, Variant::exact), m = reference_spectrum(X, Variant::without_last_row);
          exact.resize(e.size()), control.resize(e.size());
          for (std::size_t i = 0; i < e.size(); ++i) exact[i] += e[e.size() - 1 - i] / 3, control[i] += (i < m.size() ? m[m.size() - 1 - i] : 0) / 3;
        }
        const std::vector<double>& got = all.spectrum[std::size_t(l)].eigenvalues;
        ASSERT_EQ(got.size(), exact.size());
        EXPECT_LE(relative(exact, got), 1e-12);
        EXPECT_GT(relative(control, got), 1e-3) << "control: the covariance without its last row";
        const auto ratio = [](const RowMatrix& X) {
          std::vector<double> n;
          for (Eigen::Index i = 0; i < X.rows(); ++i) n.push_back(X.row(i).norm());
          return first_ratio(n);
        };
        const FirstTokenLayer& f = all.first_token[std::size_t(l)];
        EXPECT_NEAR(f.value_norm.ratio.value / mean_of(v, ratio), 1, 1e-12);
        EXPECT_NEAR(f.hidden_norm.ratio.value / mean_of(hidden.at(lm::Site::resid_post, l), ratio), 1, 1e-12);
      }
    }
  }
}

// A zero row (a token whose state is 0) counts as cosine 0 with every other row and stays in T(T − 1),
// as the host path had it. Control: leaving it out of T moves the number.
TEST(StatesReduced, AZeroRowCountsAsCosineZero) {
  Rng rng(8, "analysis_test/zero_row");
  RowMatrix X = rng.gaussian(6, 5);
  X.row(2).setZero();
  const double s = token_similarity(X);
  EXPECT_NEAR(s, reference_similarity(X, Variant::exact), 1e-15);
  RowMatrix without(5, 5);
  without << X.topRows(2), X.bottomRows(3);
  EXPECT_GT(std::abs(s - token_similarity(without)), 1e-3) << "control: the zero row dropped";
}

// --k: the k largest eigenvalues by Lanczos on the Gram matrix, the full spectrum's first k; the value
// of k is the number returned.
TEST(StatesReduced, TopKIsTheSpectrumsHead) {
  TinyModel m;
  const auto data = random_tokens(2, 24, 32);
  Options all, top;
  top.top_k = 3;
  const Report a = analyze(*m.model, Kind::spectrum, data, all), b = analyze(*m.model, Kind::spectrum, data, top);
  for (std::size_t l = 0; l < a.spectrum.size(); ++l) {
    ASSERT_EQ(b.spectrum[l].eigenvalues.size(), 3u);
    const std::vector<double> head(a.spectrum[l].eigenvalues.begin(), a.spectrum[l].eigenvalues.begin() + 3);
    EXPECT_LE(relative(head, b.spectrum[l].eigenvalues), 1e-10) << "layer " << l + 1;
    const std::vector<double> next(a.spectrum[l].eigenvalues.begin() + 1, a.spectrum[l].eigenvalues.begin() + 4);
    EXPECT_GT(relative(next, b.spectrum[l].eigenvalues), 1e-3) << "control: shifted by one rank";
  }
}

// ResFormer's cross-layer attention (resformer-cross): layers 2 … L attend over two key/value segments,
// their own and layer 1's, so their keys and values are not one layer's. The analyses that read them
// reduced where the model runs (similarity --of keys|values, spectrum) are refused as those of the
// patterns are (they read the two-segment rows as one layer's: the numbers moved with --batch, and a
// sequence's mixed in its neighbours' tokens). Controls: the same model's hidden states are measured,
// the same at batch 1 and 3; vanilla and cla-kv models' keys, values and spectra too.
TEST(Analyze, ResFormerCrossRefusesItsKeysAndValuesAsItsPatterns) {
  const auto data = random_tokens(5, 8, 32);
  Options keys, values, mean_values;
  keys.of = Of::keys, values.of = Of::values, mean_values.of = Of::values, mean_values.heads = HeadCombination::mean;
  const std::vector<std::pair<Kind, Options>> reads_kv = {
      {Kind::spectrum, {}}, {Kind::similarity, keys}, {Kind::similarity, values}, {Kind::similarity, mean_values}};
  // Every number of a report at batch 1 and at batch 3, as its JSON's numbers.
  const auto at_batches = [&](lm::Model<float>& model, Kind kind, Options o) {
    std::vector<std::vector<double>> out;
    for (int batch : {1, 3}) {
      o.batch = batch;
      const Report r = analyze(model, kind, data, o);
      std::vector<double> x;
      for (const LayerSummary& l : r.similarity) x.push_back(l.summary.value);
      for (const SpectrumLayer& l : r.spectrum) x.insert(x.end(), l.eigenvalues.begin(), l.eigenvalues.end());
      out.push_back(x);
    }
    EXPECT_FALSE(out[0].empty());
    EXPECT_LE(relative(out[0], out[1]), 1e-6) << to_string(kind) << ": batch 1 against 3";
  };
  for (lm::VariantKind variant : {lm::VariantKind::resformer_cross, lm::VariantKind::vanilla, lm::VariantKind::cla_kv}) {
    SCOPED_TRACE(lm::to_string(variant));
    lm::Config c = lm::family_defaults(lm::Family::gpt2, 3, 16, 4, 32, 64);
    c.variant.kind = variant;
    engine::CpuBackend<float> backend(1);
    lm::Model<float> model(c, backend);
    model.initialize(9);
    for (const auto& [kind, o] : reads_kv) {
      if (variant != lm::VariantKind::resformer_cross) {
        at_batches(model, kind, o);
        continue;
      }
      try {
        analyze(model, kind, data, o);
        ADD_FAILURE() << to_string(kind) << " of resformer-cross was measured";
      } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("layer 2 attends over 2 key/value segments"), std::string::npos) << e.what();
      }
    }
    at_batches(model, Kind::similarity, Options{});  // hidden states
  }
}

// --k above the spectrum's dimension, min(T, H_kv·d_h), is refused before the work: it gave that many
// eigenvalues under the definition "top k (Lanczos)". Controls: k at the dimension is measured and
// recorded, T below the values' width (16) and above it.
TEST(StatesReduced, TopKAboveTheDimensionIsRefused) {
  TinyModel m;
  for (const auto& [T, m_] : {std::pair{6, 6}, std::pair{20, 16}}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const auto data = random_tokens(2, T, 32);
    Options o;
    o.top_k = m_ + 1;
    for (Kind kind : {Kind::spectrum, Kind::all}) {
      try {
        analyze(*m.model, kind, data, o);
        ADD_FAILURE() << to_string(kind) << " with --k " << o.top_k << " was measured";
      } catch (const UsageError& e) {
        EXPECT_EQ(std::string(e.what()), "--k " + std::to_string(m_ + 1) + ": the spectrum has " + std::to_string(m_) +
                                             " eigenvalues (min(T, H_kv*d_h) = min(" + std::to_string(T) + ", 16))");
      }
    }
    o.top_k = m_;
    const Report r = analyze(*m.model, Kind::spectrum, data, o);
    EXPECT_EQ(r.spectrum.at(0).eigenvalues.size(), std::size_t(m_));
    EXPECT_EQ(r.definition["eigenvalues"].string(), "top " + std::to_string(m_) + " (Lanczos)");
  }
}

// The reductions on the CPU backend sum in an order fixed by the shape: the same bits at 1 and 3
// backend threads, for every analysis they feed (the heads averaged too). Control: one token moved.
TEST(StatesReduced, TheSameBitsAtOneAndThreeBackendThreads) {
  const auto data = random_tokens(5, 12, 32);
  auto moved = data;
  moved.ids[3] = (moved.ids[3] + 1) % 32;
  Options o;
  o.batch = 2, o.of = Of::values, o.heads = HeadCombination::mean;
  std::string json[2];
  for (int threads : {1, 3}) {
    engine::CpuBackend<float> backend(threads);
    lm::Model<float> model(state_cases()[1].config, backend);
    model.initialize(3);
    json[threads / 3] = analyze(model, Kind::all, data, o).to_value().json() + analyze(model, Kind::spectrum, data, o).to_value().json();
    if (threads == 3) {
      EXPECT_NE(json[1], analyze(model, Kind::all, moved, o).to_value().json() + analyze(model, Kind::spectrum, moved, o).to_value().json());
    }
  }
  EXPECT_EQ(json[0], json[1]);
}

// A NaN reaching a reduced state is reported (the first site and sequence whose reductions are not
// finite), never measured. Control: the same model without it measures.
TEST(StatesReduced, ANaNInAStateIsReportedNotMeasured) {
  TinyModel m;
  const auto data = random_tokens(2, 9, 32);
  EXPECT_EQ(analyze(*m.model, Kind::all, data, Options{}).nonfinite, "");
  std::vector<float> values = m.model->parameter_values();
  for (const auto& spec : m.model->parameters().layout.specs())
    if (spec.name.find("h.1.attn.v.") != std::string::npos) values[spec.offset] = NAN;
  m.model->set_parameters(values);
  EXPECT_EQ(analyze(*m.model, Kind::spectrum, data, Options{}).nonfinite, "layer 2's v holds nan (sequence 0)");
  EXPECT_EQ(analyze(*m.model, Kind::similarity, data, Options{}).nonfinite, "layer 2's resid_post holds nan (sequence 0)");
}

// A NaN that reaches only the final norm's output (the last layer's values: the hf states read layer L's
// output after the final norm) names that output, not a layer L + 1 (it said "layer 4's final" of a
// 3-layer model). Control: the spectrum, which reads layer 3's values, names them.
TEST(StatesReduced, ANaNFirstSeenAfterTheFinalNormIsNamedSo) {
  TinyModel m;
  const auto data = random_tokens(2, 9, 32);
  std::vector<float> values = m.model->parameter_values();
  for (const auto& spec : m.model->parameters().layout.specs())
    if (spec.name.find("h.2.attn.v.") != std::string::npos) values[spec.offset] = NAN;
  m.model->set_parameters(values);
  EXPECT_EQ(analyze(*m.model, Kind::similarity, data, Options{}).nonfinite,
            "the final norm's output holds nan (sequence 0)");
  EXPECT_EQ(analyze(*m.model, Kind::spectrum, data, Options{}).nonfinite, "layer 3's v holds nan (sequence 0)");
}

}  // namespace
}  // namespace qkvlab::analysis
