// lm/convert: vanilla → SkipV1 for uptraining. The authors' released conversions (dense_skip's
// checkpoint_converting_gpt2.py) against their definitions written out here, independently, on a
// small model: the same weights to float rounding, with controls (adjacent pairing is not the
// released average; whole-head top-k is not column top-k; topk keeps no W_O row topk1 keeps).
// qkvlab's other methods by their defining property: mean pooling of the value heads, the largest
// heads kept, SVD's Eckart–Young optimum (no other method's W_V W_O is closer), the bias folded
// exactly; top-vo's converted model computes the vanilla model's loss when the heads it drops were silent.
#include <gtest/gtest.h>

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "engine/cpu_backend.hpp"
#include "lm/convert.hpp"
#include "lm/model.hpp"
#include "lm/parameters.hpp"
#include "lm/plan.hpp"

namespace qkvlab::lm {
namespace {

using Matrix = Eigen::MatrixXd;

Checkpoint vanilla(Family family = Family::gpt2, int kv_heads = 4, bool bias = true) {
  Checkpoint ck;
  ck.config = family_defaults(family, 3, 16, 4, 32, 32);
  ck.config.kv_heads = kv_heads;
  ck.config.bias = bias;
  ck.values = initial_values<float>(ck.config, parameter_layout(ck.config, make_plan(ck.config)), 7);
  Rng rng(8, "lm_convert_test");  // larger, distinct weights so every method differs
  for (float& v : ck.values) v += float(0.3 * rng.normal());
  return ck;
}

Matrix tensor(const Checkpoint& ck, const std::string& name) {
  const auto layout = parameter_layout(ck.config, make_plan(ck.config));
  const auto& s = layout.at(name);
  const Eigen::Index r = s.shape[0], c = s.shape.size() > 1 ? s.shape[1] : 1;
  Matrix m(r, c);
  for (Eigen::Index i = 0; i < r; ++i)
    for (Eigen::Index j = 0; j < c; ++j) m(i, j) = ck.values[s.offset + std::size_t(i * c + j)];
  return m;
}

double loss_of(const Checkpoint& ck) {
  engine::CpuBackend<float> be(1);
  Model<float> m(ck.config, be);
  m.set_parameters(ck.values);
  std::vector<std::int32_t> ids(24), targets(24);
  for (int i = 0; i < 24; ++i) ids[std::size_t(i)] = (5 * i + 3) % 32, targets[std::size_t(i)] = (5 * i + 8) % 32;
  return m.forward(ids.data(), targets.data(), 2, 12, Pass::eval).mean();
}

TEST(LmConvert, MeanVAdjacentPoolsAdjacentValueHeadsAndKeepsTheRest) {
  const Checkpoint src = vanilla();
  const Checkpoint out = convert_to_skipv1(src, Conversion::mean_v_adjacent);
  EXPECT_EQ(out.config.variant.kind, VariantKind::skipv1);
  const int dh = src.config.head_dim;
  for (int n = 1; n < 3; ++n) {
    const Matrix Wv = tensor(src, layer_tensor(n, "attn.v.weight")), Wv2 = tensor(out, layer_tensor(n, "attn.v.weight"));
    ASSERT_EQ(Wv2.cols(), 2 * dh);
    for (int j = 0; j < 2; ++j)
      EXPECT_LT((Wv2.middleCols(j * dh, dh) - (Wv.middleCols(2 * j * dh, dh) + Wv.middleCols((2 * j + 1) * dh, dh)) / 2)
                    .norm(), 1e-6);
    EXPECT_EQ(tensor(out, layer_tensor(n, "attn.o.weight")), tensor(src, layer_tensor(n, "attn.o.weight")));
  }
  EXPECT_EQ(tensor(out, layer_tensor(0, "attn.v.weight")), tensor(src, layer_tensor(0, "attn.v.weight")));
  EXPECT_EQ(tensor(out, "wte"), tensor(src, "wte"));
}

TEST(LmConvert, TopVKeepsTheLargestHeadsInOrder) {
  Checkpoint src = vanilla();
  const auto layout = parameter_layout(src.config, make_plan(src.config));
  const auto& s = layout.at(layer_tensor(1, "attn.v.weight"));  // (16, 4·4): scale heads 1 and 3 up
  for (std::size_t r = 0; r < 16; ++r)
    for (std::size_t c = 0; c < 16; ++c)
      if (c / 4 == 1 || c / 4 == 3) src.values[s.offset + r * 16 + c] *= 10;
  const Matrix Wv = tensor(src, layer_tensor(1, "attn.v.weight"));
  const Matrix Wv2 = tensor(convert_to_skipv1(src, Conversion::top_v), layer_tensor(1, "attn.v.weight"));
  EXPECT_EQ(Wv2.middleCols(0, 4), Wv.middleCols(4, 4).cast<float>().cast<double>());
  EXPECT_EQ(Wv2.middleCols(4, 4), Wv.middleCols(12, 4).cast<float>().cast<double>());
}

// ‖W_V W_O − W_V' W_O'‖_F: SVD's is Eckart–Young's Σ_{i>r} σ_i² and no larger than any other method's.
TEST(LmConvert, SvdIsTheBestRankApproximationAndFoldsTheValueBias) {
  const Checkpoint src = vanilla();
  const std::string wv = layer_tensor(2, "attn.v.weight"), wo = layer_tensor(2, "attn.o.weight");
  const Matrix M = tensor(src, wv) * tensor(src, wo);
  const auto error = [&](Conversion method) {
    const Checkpoint c = convert_to_skipv1(src, method);
    const Matrix Wo = tensor(c, wo);
    return (M - tensor(c, wv) * Wo.topRows(8)).norm();
  };
  Eigen::JacobiSVD<Matrix> svd(M);
  const double optimum = std::sqrt(svd.singularValues().tail(16 - 8).squaredNorm());
  EXPECT_NEAR(error(Conversion::svd), optimum, 1e-5 * M.norm());
  for (Conversion other : {Conversion::mean_vo, Conversion::top_vo}) EXPECT_GT(error(other), optimum * (1 + 1e-3));
  const Checkpoint c = convert_to_skipv1(src, Conversion::svd);
  const Matrix folded = tensor(src, layer_tensor(2, "attn.o.bias")).transpose() +
                        tensor(src, layer_tensor(2, "attn.v.bias")).transpose() * tensor(src, wo);
  EXPECT_LT((tensor(c, layer_tensor(2, "attn.o.bias")).transpose() - folded).norm(), 1e-5 * folded.norm());
  EXPECT_EQ(tensor(c, layer_tensor(2, "attn.v.bias")).norm(), 0.0);
}

// A model whose heads 2 and 3 contribute nothing past layer 1 (their rows of W_O are zero) is
// unchanged by top-vo, which keeps heads 0 and 1 and zeroes the rows of the heads that now carry
// V_1: the same loss to float rounding. Control: mean-v, on the same model, changes it.
TEST(LmConvert, TopVoKeepsAModelWhoseDroppedHeadsWereSilent) {
  for (Family family : {Family::gpt2, Family::llama}) {
    Checkpoint src = vanilla(family);
    const auto layout = parameter_layout(src.config, make_plan(src.config));
    for (int n = 1; n < 3; ++n) {
      const auto& o = layout.at(layer_tensor(n, "attn.o.weight"));  // (H·dh = 16, d = 16)
      std::fill(src.values.begin() + std::ptrdiff_t(o.offset + 8 * 16), src.values.begin() + std::ptrdiff_t(o.offset + 16 * 16), 0.0f);
    }
    const double before = loss_of(src);
    EXPECT_NEAR(loss_of(convert_to_skipv1(src, Conversion::top_vo)), before, 1e-5 * before) << to_string(family);
    EXPECT_GT(std::abs(loss_of(convert_to_skipv1(src, Conversion::mean_v)) - before), 1e-3) << to_string(family);
  }
}

// ---- The released converter (Zhoutong-Wu/dense_skip, checkpoint_converting_gpt2.py), written out
// from its text on the test model's layers 2 and 3: W_V d × D, W_O D × d (as here), H' = 2 of 4
// heads of d_h = 4, r = H'·d_h = D/2 = 8. Its models have no biases; ours carry b_V with W_V's columns.

constexpr int kOwn = 2, kDh = 4, kRank = kOwn * kDh;

// A converted float tensor is the double result rounded once: within float's unit roundoff 2^-24.
constexpr double kFloatRounding = 1e-7;

double relative(const Matrix& a, const Matrix& b) { return (a - b).norm() / b.norm(); }

// convert_gpt2_checkpoint_to_skipv1_avg: W_V viewed as d × H × d_h, (heads [0, H') + heads [H', H)) / 2.
Matrix released_avg(const Matrix& Wv) {
  Matrix out(Wv.rows(), kRank);
  for (Eigen::Index row = 0; row < Wv.rows(); ++row)
    for (int j = 0; j < kOwn; ++j)
      for (int c = 0; c < kDh; ++c) out(row, j * kDh + c) = (Wv(row, j * kDh + c) + Wv(row, (kOwn + j) * kDh + c)) / 2;
  return out;
}

struct Factors {
  Matrix Wv, Wo;
  std::vector<int> columns;  // top-k: the source column of each new one
};

// ..._topk and ..._topk1: contribution_scores = ‖W_V[:,c]‖·‖W_O[c,:]‖, torch.topk's r indices (largest
// first), W_V's columns gathered in that order; W_O = zeros (topk) or a clone (topk1) whose rows
// 0 … r−1 are overwritten by the selected rows.
Factors released_topk(const Matrix& Wv, const Matrix& Wo, bool clone_o) {
  std::vector<std::pair<double, int>> by_score;
  for (Eigen::Index c = 0; c < Wv.cols(); ++c) by_score.push_back({-Wv.col(c).norm() * Wo.row(c).norm(), int(c)});
  std::sort(by_score.begin(), by_score.end());
  Factors f{Matrix(Wv.rows(), kRank), clone_o ? Wo : Matrix(Matrix::Zero(Wo.rows(), Wo.cols())), {}};
  for (int n = 0; n < kRank; ++n) {
    const int c = by_score[std::size_t(n)].second;
    f.Wv.col(n) = Wv.col(c), f.Wo.row(n) = Wo.row(c), f.columns.push_back(c);
  }
  return f;
}

// ..._svd: M = W_V W_O ≈ U_r S_r V_rᵀ; W_V' = U_r √S_r, W_O' = (V_r √S_r)ᵀ in W_O's rows 0 … r−1, the rest
// zero. Here from the eigenvectors of MᵀM (V_r; U_r √S_r = M V_r S_r^-½), an SVD computed another way
// than lm/convert's; exact where the released torch.svd_lowrank is randomized. Signs: each pair of
// factors only up to a common sign, so each is aligned to `like`'s.
Factors released_svd(const Matrix& Wv, const Matrix& Wo, const Factors& like) {
  const Matrix M = Wv * Wo;
  Eigen::SelfAdjointEigenSolver<Matrix> eig(M.transpose() * M);
  Factors f{Matrix(Wv.rows(), kRank), Matrix::Zero(Wo.rows(), Wo.cols()), {}};
  for (int i = 0; i < kRank; ++i) {
    const Eigen::VectorXd v = eig.eigenvectors().col(M.cols() - 1 - i);  // eigenvalues ascending
    const double s = std::sqrt(eig.eigenvalues()(M.cols() - 1 - i)), sign = like.Wo.row(i).dot(v) < 0 ? -1.0 : 1.0;
    f.Wv.col(i) = sign * M * v / std::sqrt(s), f.Wo.row(i) = sign * std::sqrt(s) * v.transpose();
  }
  return f;
}

// Everything outside layers ≥ 2's W_V, b_V, W_O, b_O is the source's.
void expect_rest_kept(const Checkpoint& src, const Checkpoint& out) {
  for (const std::string& name : {std::string("wte"), layer_tensor(0, "attn.v.weight"), layer_tensor(0, "attn.o.weight"),
                                 layer_tensor(1, "attn.q.weight"), layer_tensor(2, "attn.k.weight")})
    EXPECT_EQ(tensor(out, name), tensor(src, name)) << name;
}

TEST(LmConvert, ReleasedAvgIsTheReleasedAverageAndMeanVIsIt) {
  const Checkpoint src = vanilla();
  const Checkpoint avg = convert_to_skipv1(src, Conversion::released_avg);
  const Checkpoint adjacent = convert_to_skipv1(src, Conversion::mean_v_adjacent);
  for (int n = 1; n < 3; ++n) {
    const std::string wv = layer_tensor(n, "attn.v.weight"), bv = layer_tensor(n, "attn.v.bias");
    const Matrix expected = released_avg(tensor(src, wv));
    EXPECT_LT(relative(tensor(avg, wv), expected), kFloatRounding);
    EXPECT_LT(relative(tensor(avg, bv).transpose(), released_avg(tensor(src, bv).transpose())), kFloatRounding);
    EXPECT_EQ(tensor(avg, layer_tensor(n, "attn.o.weight")), tensor(src, layer_tensor(n, "attn.o.weight")));
    EXPECT_GT(relative(tensor(adjacent, wv), expected), 0.1);  // control: heads 2j, 2j+1 are other pairs
  }
  expect_rest_kept(src, avg);
  EXPECT_EQ(convert_to_skipv1(src, Conversion::mean_v).values, avg.values);
}

TEST(LmConvert, ReleasedTopkSelectsValueColumnsByTheirNormProductWithWO) {
  const Checkpoint src = vanilla();
  const Checkpoint topk = convert_to_skipv1(src, Conversion::released_topk);
  const Checkpoint topk1 = convert_to_skipv1(src, Conversion::released_topk1);
  const Checkpoint heads = convert_to_skipv1(src, Conversion::top_vo);
  for (int n = 1; n < 3; ++n) {
    const std::string wv = layer_tensor(n, "attn.v.weight"), wo = layer_tensor(n, "attn.o.weight");
    const Matrix Wv = tensor(src, wv), Wo = tensor(src, wo);
    for (bool clone_o : {false, true}) {
      SCOPED_TRACE(clone_o ? "released-topk1" : "released-topk");
      const Checkpoint& out = clone_o ? topk1 : topk;
      const Factors expected = released_topk(Wv, Wo, clone_o);
      EXPECT_LT(relative(tensor(out, wv), expected.Wv), kFloatRounding);  // a selection: exact in fact
      EXPECT_LT(relative(tensor(out, wo), expected.Wo), kFloatRounding);
      // Control: the other of the two keeps (zeroes) the rows r … D−1 this one zeroes (keeps).
      EXPECT_GT(relative(tensor(clone_o ? topk : topk1, wo), expected.Wo), 0.1);
      expect_rest_kept(src, out);
    }
    // b_V's entries go with W_V's columns.
    const Matrix bv = tensor(src, layer_tensor(n, "attn.v.bias")).transpose();
    const std::vector<int> columns = released_topk(Wv, Wo, false).columns;
    for (int c = 0; c < kRank; ++c)
      EXPECT_EQ(tensor(topk, layer_tensor(n, "attn.v.bias"))(c, 0), bv(0, columns[std::size_t(c)]));
    // Control: whole heads (top-vo) are not the top columns.
    EXPECT_GT(relative(tensor(heads, wv), released_topk(Wv, Wo, false).Wv), 0.1);
  }
}

TEST(LmConvert, ReleasedSvdIsTheReleasedFactorizationOfTheRankHalfApproximation) {
  const Checkpoint src = vanilla();
  const Checkpoint svd = convert_to_skipv1(src, Conversion::released_svd);
  for (int n = 1; n < 3; ++n) {
    const std::string wv = layer_tensor(n, "attn.v.weight"), wo = layer_tensor(n, "attn.o.weight");
    const Factors out{tensor(svd, wv), tensor(svd, wo), {}};
    const Factors expected = released_svd(tensor(src, wv), tensor(src, wo), out);
    EXPECT_LT(relative(out.Wv, expected.Wv), kFloatRounding);  // the two SVDs agree far below float's rounding
    EXPECT_LT(relative(out.Wo, expected.Wo), kFloatRounding);
    EXPECT_EQ(out.Wo.bottomRows(16 - kRank).norm(), 0.0);
    // Control: the factors of the rank-H'·d_h approximation, not of a rank one lower.
    Factors lower = expected;
    lower.Wv.col(kRank - 1).setZero(), lower.Wo.row(kRank - 1).setZero();
    EXPECT_GT(relative(out.Wv, lower.Wv), 1e-3);
  }
  expect_rest_kept(src, svd);
  EXPECT_EQ(convert_to_skipv1(src, Conversion::svd).values, svd.values);
}

// What the released script saves: its loop copies each layer's attn.c_proj.weight, met after
// attn.c_attn.weight, over the W_O the function wrote, so W_V′ is the method's and W_O stays as it was
// (topk and topk1 then save the same model). Without biases, as the released models; with them, as the
// functions as written treat them.
TEST(LmConvert, TheReleasedScriptAsRunKeepsWO) {
  for (const bool bias : {false, true}) {
  SCOPED_TRACE(bias ? "biases" : "no biases");
  const Checkpoint src = vanilla(Family::gpt2, 4, bias);
  const Checkpoint topk = convert_to_skipv1(src, Conversion::released_topk_as_run);
  const Checkpoint svd = convert_to_skipv1(src, Conversion::released_svd_as_run);
  const Checkpoint topk_function = convert_to_skipv1(src, Conversion::released_topk);
  const Checkpoint svd_function = convert_to_skipv1(src, Conversion::released_svd);
  for (int n = 1; n < 3; ++n) {
    const std::string wv = layer_tensor(n, "attn.v.weight"), wo = layer_tensor(n, "attn.o.weight");
    for (const auto& [as_run, function] : {std::pair{&topk, &topk_function}, std::pair{&svd, &svd_function}}) {
      EXPECT_EQ(tensor(*as_run, wv), tensor(*function, wv));  // the method's own value projection
      EXPECT_EQ(tensor(*as_run, wo), tensor(src, wo));        // W_O as it was
      EXPECT_GT(relative(tensor(*function, wo), tensor(src, wo)), 0.1);  // control: the function changes it
      if (bias)  // the biases as the method makes them
        for (const char* b : {"attn.v.bias", "attn.o.bias"})
          EXPECT_EQ(tensor(*as_run, layer_tensor(n, b)), tensor(*function, layer_tensor(n, b))) << b;
    }
  }
  expect_rest_kept(src, topk);
  expect_rest_kept(src, svd);
  }
}

TEST(LmConvert, RefusesWhatItCannotConvert) {
  Checkpoint resformer = vanilla();
  resformer.config.variant.kind = VariantKind::resformer;
  EXPECT_THROW(convert_to_skipv1(resformer, Conversion::mean_v), UsageError);
  const Checkpoint gqa = vanilla(Family::llama, 2);
  EXPECT_THROW(convert_to_skipv1(gqa, Conversion::mean_vo), UsageError);
  EXPECT_NO_THROW(convert_to_skipv1(gqa, Conversion::mean_v));
  EXPECT_THROW(parse_conversion("mean"), UsageError);
}

}  // namespace
}  // namespace qkvlab::lm
