#include "lm/convert.hpp"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/errors.hpp"
#include "lm/parameters.hpp"
#include "lm/plan.hpp"
#include "lm/tensors.hpp"

namespace qkvlab::lm {

namespace {

constexpr const char* kNames[] = {"mean-v", "mean-vo", "top-v", "top-vo", "svd"};

// Column block h of W_V (d × G·dh) or row block h of W_O (H·dh × d); a bias as a 1 × n row.
Matrix v_head(const Matrix& Wv, int h, int dh) { return Wv.middleCols(Eigen::Index(h) * dh, dh); }
Matrix o_head(const Matrix& Wo, int h, int dh) { return Wo.middleRows(Eigen::Index(h) * dh, dh); }

// The H' heads of largest score, in index order.
std::vector<int> top_heads(const std::vector<double>& score, int keep) {
  std::vector<int> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[std::size_t(a)] > score[std::size_t(b)]; });
  order.resize(std::size_t(keep));
  std::sort(order.begin(), order.end());
  return order;
}

void convert_layer(const Config& c, int n, Conversion method, int own, Tensors& from, Tensors& to) {
  const int G = c.kv_heads, H = c.heads, dh = c.head_dim, k = G / std::max(own, 1);
  const std::string wv = layer_tensor(n, "attn.v.weight"), bv = layer_tensor(n, "attn.v.bias");
  const std::string wo = layer_tensor(n, "attn.o.weight"), bo = layer_tensor(n, "attn.o.bias");
  const Matrix Wv = from.get(wv), Wo = from.get(wo);
  const bool bias = from.has(bv);
  const Matrix bv_row = bias ? Matrix(from.get(bv).transpose()) : Matrix::Zero(1, Eigen::Index(G) * dh);
  Matrix Wv2 = Matrix::Zero(Wv.rows(), Eigen::Index(own) * dh), bv2 = Matrix::Zero(1, Eigen::Index(own) * dh), Wo2 = Wo;
  const bool touches_o = method == Conversion::mean_vo || method == Conversion::top_vo || method == Conversion::svd;
  if (touches_o) Wo2.setZero();
  if (method == Conversion::mean_v || method == Conversion::mean_vo) {
    for (int j = 0; j < own; ++j)
      for (int i = 0; i < k; ++i) {
        Wv2.middleCols(Eigen::Index(j) * dh, dh) += v_head(Wv, j * k + i, dh) / k;
        bv2.middleCols(Eigen::Index(j) * dh, dh) += bv_row.middleCols(Eigen::Index(j * k + i) * dh, dh) / k;
        if (touches_o) Wo2.middleRows(Eigen::Index(j) * dh, dh) += o_head(Wo, j * k + i, dh) / k;
      }
  } else if (method == Conversion::top_v || method == Conversion::top_vo) {
    std::vector<double> score(static_cast<std::size_t>(G));
    for (int h = 0; h < G; ++h)
      score[std::size_t(h)] = v_head(Wv, h, dh).norm() * (method == Conversion::top_vo ? o_head(Wo, h, dh).norm() : 1.0);
    const std::vector<int> keep = top_heads(score, own);
    for (int j = 0; j < own; ++j) {
      const int h = keep[std::size_t(j)];
      Wv2.middleCols(Eigen::Index(j) * dh, dh) = v_head(Wv, h, dh);
      bv2.middleCols(Eigen::Index(j) * dh, dh) = bv_row.middleCols(Eigen::Index(h) * dh, dh);
      if (touches_o) Wo2.middleRows(Eigen::Index(j) * dh, dh) = o_head(Wo, h, dh);
    }
  } else {  // svd of W_V W_O, rank own·dh
    const int r = own * dh;
    Eigen::JacobiSVD<Matrix> svd(Wv * Wo, Eigen::ComputeThinU | Eigen::ComputeThinV);
    const Eigen::VectorXd root = svd.singularValues().head(r).cwiseSqrt();
    Wv2 = svd.matrixU().leftCols(r) * root.asDiagonal();
    Wo2.topRows(r) = root.asDiagonal() * svd.matrixV().leftCols(r).transpose();
    if (bias) to.put(bo, Matrix((from.get(bo).transpose() + bv_row * Wo).transpose()));
  }
  (void)H;
  to.put(wv, Wv2);
  if (bias) to.put(bv, Matrix(bv2.transpose()));
  to.put(wo, Wo2);
}

}  // namespace

Conversion parse_conversion(const std::string& name) {
  for (int i = 0; i < 5; ++i)
    if (name == kNames[i]) return Conversion(i);
  throw UsageError("unknown conversion \"" + name + "\" (mean-v|mean-vo|top-v|top-vo|svd)");
}

std::string to_string(Conversion method) { return kNames[int(method)]; }

Checkpoint convert_to_skipv1(const Checkpoint& source, Conversion method, double skip_ratio) {
  const Config& c = source.config;
  if (c.variant.kind != VariantKind::vanilla) throw UsageError("only a vanilla model converts to SkipV1");
  if (c.mla) throw UsageError("an MLA model does not convert (its values are a latent)");
  const bool touches_o = method == Conversion::mean_vo || method == Conversion::top_vo || method == Conversion::svd;
  if (touches_o && c.kv_heads != c.heads)
    throw UsageError(to_string(method) + " needs one key/value head per query head (this model has grouped-query attention)");
  Checkpoint out;
  out.config = c, out.tokenizer_json = source.tokenizer_json;  // the same vocabulary
  out.config.variant.kind = VariantKind::skipv1;
  out.config.variant.skip_ratio = skip_ratio, out.config.variant.source_layer = 1;
  out.config.variant.strategy = Strategy::second_half;
  validate(out.config);
  const int own = c.kv_heads - int(std::lround(skip_ratio * c.kv_heads));
  if (own < 1) throw UsageError("a skip ratio that leaves no own value head has nothing to convert into");
  if ((method == Conversion::mean_v || method == Conversion::mean_vo) && c.kv_heads % own != 0)
    throw UsageError("mean pooling needs the " + std::to_string(own) + " own heads to divide the " +
                     std::to_string(c.kv_heads) + " value heads evenly");
  const engine::ParameterLayout from_layout = parameter_layout(c, make_plan(c));
  const engine::ParameterLayout to_layout = parameter_layout(out.config, make_plan(out.config));
  out.values.assign(to_layout.total(), 0.0f);
  std::vector<float> source_values = source.values;
  Tensors from{from_layout, source_values}, to{to_layout, out.values};
  for (const auto& spec : to_layout.specs()) {  // everything the two layouts share, as it is
    const auto* s = from_layout.find(spec.name);
    if (s && s->shape == spec.shape)
      std::copy_n(source.values.begin() + std::ptrdiff_t(s->offset), spec.size(), out.values.begin() + std::ptrdiff_t(spec.offset));
  }
  for (int n = 1; n < c.layers; ++n) convert_layer(c, n, method, own, from, to);
  out.metadata["converted_by"] = to_string(method);
  return out;
}

}  // namespace qkvlab::lm
