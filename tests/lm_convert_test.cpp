// lm/convert: vanilla → SkipV1 for uptraining. Each method's defining property on a random
// model: mean pooling of the value heads, the largest heads kept, SVD's Eckart–Young optimum
// (no other method's W_V W_O is closer), the bias folded exactly; top-vo's
// converted model computes the vanilla model's loss when the heads it drops were silent.
#include <gtest/gtest.h>

#include <Eigen/Dense>

#include <cmath>

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

Checkpoint vanilla(Family family = Family::gpt2, int kv_heads = 4) {
  Checkpoint ck;
  ck.config = family_defaults(family, 3, 16, 4, 32, 32);
  ck.config.kv_heads = kv_heads;
  ck.config.bias = true;
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

TEST(LmConvert, MeanVPoolsPairsOfValueHeadsAndKeepsTheRest) {
  const Checkpoint src = vanilla();
  const Checkpoint out = convert_to_skipv1(src, Conversion::mean_v);
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
