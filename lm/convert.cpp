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

// What a method does; several names share one (lm/convert.hpp).
enum class Rule {
  strided_mean, adjacent_mean, adjacent_mean_o, top_heads, top_heads_o, top_columns, top_columns_keep_o, top_columns_o_as_was,
  svd, svd_o_as_was
};

Rule rule_of(Conversion method) {
  switch (method) {
    case Conversion::mean_v:
    case Conversion::released_avg: return Rule::strided_mean;
    case Conversion::mean_v_adjacent: return Rule::adjacent_mean;
    case Conversion::mean_vo: return Rule::adjacent_mean_o;
    case Conversion::top_v: return Rule::top_heads;
    case Conversion::top_vo: return Rule::top_heads_o;
    case Conversion::released_topk: return Rule::top_columns;
    case Conversion::released_topk1: return Rule::top_columns_keep_o;
    case Conversion::released_topk_as_run: return Rule::top_columns_o_as_was;
    case Conversion::released_svd_as_run: return Rule::svd_o_as_was;
    case Conversion::svd:
    case Conversion::released_svd: break;
  }
  return Rule::svd;
}

bool is_mean(Rule r) { return r == Rule::strided_mean || r == Rule::adjacent_mean || r == Rule::adjacent_mean_o; }
// Reads W_O's rows alongside W_V's columns, which needs as many value heads as query heads.
bool reads_o(Rule r) {
  return r == Rule::adjacent_mean_o || r == Rule::top_heads_o || r == Rule::top_columns || r == Rule::top_columns_keep_o ||
         r == Rule::top_columns_o_as_was || r == Rule::svd || r == Rule::svd_o_as_was;
}

// One layer's value and output projections; the biases as 1 × n rows (zero when the model has none).
struct Attention {
  Matrix Wv, bv, Wo, bo;
};

Matrix v_head(const Matrix& Wv, int h, int dh) { return Wv.middleCols(Eigen::Index(h) * dh, dh); }
Matrix o_head(const Matrix& Wo, int h, int dh) { return Wo.middleRows(Eigen::Index(h) * dh, dh); }

// The `keep` indices of largest score, largest first (ties: the lower index first).
std::vector<int> largest(const std::vector<double>& score, int keep) {
  std::vector<int> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[std::size_t(a)] > score[std::size_t(b)]; });
  order.resize(std::size_t(keep));
  return order;
}

// An all-zero value projection of `own` heads; W_O zero (zero_o) or kept.
Attention shrunk(const Attention& a, int own, int dh, bool zero_o) {
  const Eigen::Index n = Eigen::Index(own) * dh;
  return {Matrix::Zero(a.Wv.rows(), n), Matrix::Zero(1, n), zero_o ? Matrix(Matrix::Zero(a.Wo.rows(), a.Wo.cols())) : a.Wo, a.bo};
}

// Own head j = the mean of k source heads: j + i·H' (strided) or jk + i (adjacent), i < k.
Attention mean_pool(const Attention& a, int own, int dh, bool strided, bool pool_o) {
  const int k = int(a.Wv.cols()) / dh / own;
  Attention b = shrunk(a, own, dh, pool_o);
  for (int j = 0; j < own; ++j)
    for (int i = 0; i < k; ++i) {
      const int h = strided ? j + i * own : j * k + i;
      b.Wv.middleCols(Eigen::Index(j) * dh, dh) += v_head(a.Wv, h, dh) / k;
      b.bv.middleCols(Eigen::Index(j) * dh, dh) += a.bv.middleCols(Eigen::Index(h) * dh, dh) / k;
      if (pool_o) b.Wo.middleRows(Eigen::Index(j) * dh, dh) += o_head(a.Wo, h, dh) / k;
    }
  return b;
}

// The H' whole heads of largest ‖W_V,h‖_F (·‖W_O,h‖_F with_o), in index order.
Attention top_heads(const Attention& a, int own, int dh, bool with_o) {
  const int G = int(a.Wv.cols()) / dh;
  std::vector<double> score(static_cast<std::size_t>(G));
  for (int h = 0; h < G; ++h) score[std::size_t(h)] = v_head(a.Wv, h, dh).norm() * (with_o ? o_head(a.Wo, h, dh).norm() : 1.0);
  std::vector<int> keep = largest(score, own);
  std::sort(keep.begin(), keep.end());
  Attention b = shrunk(a, own, dh, with_o);
  for (int j = 0; j < own; ++j) {
    const int h = keep[std::size_t(j)];
    b.Wv.middleCols(Eigen::Index(j) * dh, dh) = v_head(a.Wv, h, dh);
    b.bv.middleCols(Eigen::Index(j) * dh, dh) = a.bv.middleCols(Eigen::Index(h) * dh, dh);
    if (with_o) b.Wo.middleRows(Eigen::Index(j) * dh, dh) = o_head(a.Wo, h, dh);
  }
  return b;
}

// The r single columns c of largest ‖W_V[:,c]‖·‖W_O[c,:]‖, largest first, with W_O's row c moved
// to the same place; W_O's other rows zero, or (keep_o) as they were.
Attention top_columns(const Attention& a, int own, int dh, bool keep_o) {
  std::vector<double> score(static_cast<std::size_t>(a.Wv.cols()));
  for (Eigen::Index c = 0; c < a.Wv.cols(); ++c) score[std::size_t(c)] = a.Wv.col(c).norm() * a.Wo.row(c).norm();
  const std::vector<int> keep = largest(score, own * dh);
  Attention b = shrunk(a, own, dh, !keep_o);
  for (std::size_t n = 0; n < keep.size(); ++n) {
    const Eigen::Index c = keep[n], to = Eigen::Index(n);
    b.Wv.col(to) = a.Wv.col(c), b.bv(0, to) = a.bv(0, c), b.Wo.row(to) = a.Wo.row(c);
  }
  return b;
}

// W_V W_O replaced by its best rank-(H'·d_h) approximation; b_V W_O folded into b_O.
Attention low_rank(const Attention& a, int own, int dh) {
  const int r = own * dh;
  Eigen::JacobiSVD<Matrix> svd(a.Wv * a.Wo, Eigen::ComputeThinU | Eigen::ComputeThinV);
  const Eigen::VectorXd root = svd.singularValues().head(r).cwiseSqrt();
  Attention b = shrunk(a, own, dh, true);
  b.Wv = svd.matrixU().leftCols(r) * root.asDiagonal();
  b.Wo.topRows(r) = root.asDiagonal() * svd.matrixV().leftCols(r).transpose();
  b.bo = a.bo + a.bv * a.Wo;
  return b;
}

// The released script's output: the method's value projection, W_O as it was (its loop copies
// attn.c_proj.weight over the W_O the function wrote); the biases as the method makes them.
Attention o_as_was(Attention b, const Attention& a) {
  b.Wo = a.Wo;
  return b;
}

Attention convert(const Attention& a, Rule rule, int own, int dh) {
  switch (rule) {
    case Rule::strided_mean: return mean_pool(a, own, dh, true, false);
    case Rule::adjacent_mean: return mean_pool(a, own, dh, false, false);
    case Rule::adjacent_mean_o: return mean_pool(a, own, dh, false, true);
    case Rule::top_heads: return top_heads(a, own, dh, false);
    case Rule::top_heads_o: return top_heads(a, own, dh, true);
    case Rule::top_columns: return top_columns(a, own, dh, false);
    case Rule::top_columns_keep_o: return top_columns(a, own, dh, true);
    case Rule::top_columns_o_as_was: return o_as_was(top_columns(a, own, dh, false), a);
    case Rule::svd_o_as_was: return o_as_was(low_rank(a, own, dh), a);
    case Rule::svd: break;
  }
  return low_rank(a, own, dh);
}

void convert_layer(const Config& c, int n, Rule rule, int own, const Tensors& from, Tensors& to) {
  const std::string wv = layer_tensor(n, "attn.v.weight"), bv = layer_tensor(n, "attn.v.bias");
  const std::string wo = layer_tensor(n, "attn.o.weight"), bo = layer_tensor(n, "attn.o.bias");
  const bool bias = from.has(bv);
  Attention a{from.get(wv), Matrix::Zero(1, Eigen::Index(c.kv_heads) * c.head_dim), from.get(wo), Matrix::Zero(1, c.d)};
  if (bias) a.bv = from.get(bv).transpose(), a.bo = from.get(bo).transpose();
  const Attention b = convert(a, rule, own, c.head_dim);
  to.put(wv, b.Wv), to.put(wo, b.Wo);
  if (bias) to.put(bv, Matrix(b.bv.transpose())), to.put(bo, Matrix(b.bo.transpose()));
}

}  // namespace

const std::vector<std::string>& conversion_names() {
  static const std::vector<std::string> names = {"mean-v",          "mean-vo",      "top-v",         "top-vo",
                                                 "svd",             "mean-v-adjacent", "released-avg", "released-topk",
                                                 "released-topk1", "released-svd", "released-topk-as-run",
                                                 "released-svd-as-run"};
  return names;
}

Conversion parse_conversion(const std::string& name) {
  const auto& names = conversion_names();
  const auto it = std::find(names.begin(), names.end(), name);
  if (it != names.end()) return Conversion(it - names.begin());
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : "|") + n;
  throw UsageError("unknown conversion \"" + name + "\" (" + list + ")");
}

std::string to_string(Conversion method) { return conversion_names()[std::size_t(method)]; }

Checkpoint convert_to_skipv1(const Checkpoint& source, Conversion method, double skip_ratio) {
  const Config& c = source.config;
  const Rule rule = rule_of(method);
  if (c.variant.kind != VariantKind::vanilla) throw UsageError("only a vanilla model converts to SkipV1");
  if (c.mla) throw UsageError("an MLA model does not convert (its values are a latent)");
  if (reads_o(rule) && c.kv_heads != c.heads)
    throw UsageError(to_string(method) + " needs one key/value head per query head (this model has grouped-query attention)");
  Checkpoint out;
  out.config = c, out.tokenizer_json = source.tokenizer_json;  // the same vocabulary
  out.config.variant.kind = VariantKind::skipv1;
  out.config.variant.skip_ratio = skip_ratio, out.config.variant.source_layer = 1;
  out.config.variant.strategy = Strategy::second_half;
  validate(out.config);
  const int own = c.kv_heads - int(std::lround(skip_ratio * c.kv_heads));
  if (own < 1) throw UsageError("a skip ratio that leaves no own value head has nothing to convert into");
  if (is_mean(rule) && c.kv_heads % own != 0)
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
  for (int n = 1; n < c.layers; ++n) convert_layer(c, n, rule, own, from, to);
  out.metadata["converted_by"] = to_string(method);
  return out;
}

}  // namespace qkvlab::lm
