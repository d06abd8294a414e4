// Row-vector convention; see linear_attention_models.hpp for the models' formulas.
#include "synthetic/icl/linear_attention_models.hpp"

#include "core/errors.hpp"
#include "engine/linear.hpp"
#include "engine/linear_attention.hpp"

#include <array>
#include <cmath>
#include <stdexcept>

namespace qkvlab::icl {

using engine::Backend;
using engine::Buffer;
using engine::View;

namespace {

// The names of the trained models (the language models' "vanilla" is "mha" here).
constexpr std::array<std::pair<VariantKind, const char*>, 4> kModelNames{{{VariantKind::vanilla, "mha"},
                                                                          {VariantKind::skipv1, "skipv1"},
                                                                          {VariantKind::resformer, "resformer"},
                                                                          {VariantKind::svformer, "svformer"}}};

}  // namespace

std::string variant_name(VariantKind v) {
  for (const auto& [kind, name] : kModelNames)
    if (kind == v) return name;
  return "?";
}

VariantKind parse_variant(const std::string& name) {
  for (const auto& [kind, known] : kModelNames)
    if (name == known) return kind;
  throw UsageError("unknown model '" + name + "' (expected mha, skipv1, resformer or svformer)");
}

std::string first_layer_name(FirstLayer f) {
  switch (f) {
    case FirstLayer::copying_fixed: return "assumption1_fixed";
    case FirstLayer::copying_learned: return "assumption1_learned";
    case FirstLayer::attention: return "learned_attention";
  }
  return "?";
}

void fill_token_batch(const std::vector<Prompt>& prompts, TokenBatch& t) {
  if (prompts.empty()) throw std::invalid_argument("make_token_batch: no prompts");
  t.d = int(prompts.front().X.rows()), t.n = int(prompts.front().X.cols());
  const Eigen::Index B = Eigen::Index(prompts.size()), T = t.tokens(), d = t.d;
  for (RowMatD* M : {&t.E, &t.x_pass, &t.x_pair, &t.y_pair}) M->resize(B * T, d);
  t.target.resize(B, d);
  for (Eigen::Index b = 0; b < B; ++b) {
    const Prompt& p = prompts[std::size_t(b)];
    for (Eigen::Index i = 0; i < t.n; ++i) {
      const Eigen::Index rx = b * T + 2 * i, ry = rx + 1;
      t.E.row(rx) = p.X.col(i).transpose(), t.E.row(ry) = p.Y.col(i).transpose();
      t.x_pass.row(rx) = p.X.col(i).transpose(), t.x_pass.row(ry).setZero();
      t.x_pair.row(rx).setZero(), t.x_pair.row(ry) = p.X.col(i).transpose();
      t.y_pair.row(rx).setZero(), t.y_pair.row(ry) = p.Y.col(i).transpose();
    }
    const Eigen::Index rq = b * T + T - 1;
    t.E.row(rq) = p.x_query.transpose(), t.x_pair.row(rq) = p.x_query.transpose();
    t.x_pass.row(rq).setZero(), t.y_pair.row(rq).setZero();
    t.target.row(b) = p.y_query.transpose();
  }
}

TokenBatch make_token_batch(const std::vector<Prompt>& prompts) {
  TokenBatch t;
  fill_token_batch(prompts, t);
  return t;
}

void fill_concat_batch(const std::vector<Prompt>& prompts, ConcatBatch& c) {
  if (prompts.empty()) throw std::invalid_argument("make_concat_batch: no prompts");
  c.d = int(prompts.front().X.rows()), c.n = int(prompts.front().X.cols());
  const Eigen::Index B = Eigen::Index(prompts.size()), T = c.tokens(), d = c.d;
  c.Z.resize(B * T, 2 * d), c.target.resize(B, d);
  for (Eigen::Index b = 0; b < B; ++b) {
    const Prompt& p = prompts[std::size_t(b)];
    c.Z.block(b * T, 0, c.n, d) = p.X.transpose();
    c.Z.block(b * T, d, c.n, d) = p.Y.transpose();
    c.Z.block(b * T + c.n, 0, 1, d) = p.x_query.transpose();
    c.Z.block(b * T + c.n, d, 1, d).setZero();
    c.target.row(b) = p.y_query.transpose();
  }
}

ConcatBatch make_concat_batch(const std::vector<Prompt>& prompts) {
  ConcatBatch c;
  fill_concat_batch(prompts, c);
  return c;
}

// ---------------------------------------------------------------- parameters on a backend

// Named, not anonymous: the models' Impl classes (declared in the header) derive from and hold
// these, and a class with external linkage may not use internal-linkage types (GCC's
// -Wsubobject-linkage says so whenever this file is not the main file, as in a unity build).
namespace model_parts {

// A host matrix into a backend buffer (row-major) at an offset, and back. A
// column-major MatD converts to a row-major temporary on the way.
void upload(Buffer<double>& to, const RowMatD& M, std::size_t offset = 0) {
  to.upload(M.data(), std::size_t(M.size()), offset);
}

MatD download(const Buffer<double>& from, Eigen::Index rows, Eigen::Index cols, std::size_t offset = 0) {
  RowMatD M(rows, cols);
  from.download(M.data(), std::size_t(M.size()), offset);
  return M;
}

// Named tensors with their initial values, in the order they were drawn.
struct InitialWeights {
  engine::ParameterLayout layout;
  std::vector<MatD> values;

  void add(const std::string& name, MatD value) {
    if (value.size() == 0) return;  // Assumption 1's A at a = 0, B at a = d
    layout.add(name, {value.rows(), value.cols()}, true);
    values.push_back(std::move(value));
  }
  engine::ParameterSet<double> on(Backend<double>& be) const {
    engine::ParameterSet<double> set(be, layout);
    for (std::size_t i = 0; i < values.size(); ++i) upload(set.values, values[i], layout.specs()[i].offset);
    return set;
  }
};

// What both models share: the backend, the parameters, and the projections
// through a named weight Θ (shape from the layout, engine/linear.hpp's formulas).
struct ModelCore {
  ModelCore(Backend<double>& be_, const InitialWeights& init) : be(be_), params(init.on(be_)) {}

  // Y = X Θ (Y += X Θ when accumulate) over N rows.
  void project(int N, View<const double> X, const std::string& theta, View<double> Y, bool accumulate = false) {
    const engine::ParameterSpec& s = params.layout.at(theta);
    engine::linear_forward<double>(be, N, int(s.shape[0]), int(s.shape[1]), X, params.value(theta), nullptr, Y,
                                   accumulate);
  }
  // dΘ += Xᵀ dY, and dX += dY Θᵀ (overwritten unless accumulate_dx) when dX is given.
  void project_backward(int N, View<const double> X, const std::string& theta, View<const double> dY, View<double> dX,
                        bool accumulate_dx = true) {
    const engine::ParameterSpec& s = params.layout.at(theta);
    engine::linear_backward<double>(be, N, int(s.shape[0]), int(s.shape[1]), X, params.value(theta), dY, dX,
                                    params.grad(theta), nullptr, accumulate_dx);
  }

  Backend<double>& be;
  engine::ParameterSet<double> params;
};

View<const double> in(const Buffer<double>& b, int ld, std::size_t offset = 0) { return {b.data() + offset, ld}; }
View<double> out(Buffer<double>& b, int ld, std::size_t offset = 0) { return {b.data() + offset, ld}; }
constexpr View<double> nowhere{nullptr, 0};

void zero(Backend<double>& be, Buffer<double>& b) { be.fill(b.size(), 0.0, b.data()); }

}  // namespace model_parts
using namespace model_parts;

MatD weight(const engine::ParameterSet<double>& params, const std::string& name) {
  const engine::ParameterSpec& spec = params.layout.at(name);
  return download(params.values, spec.shape[0], spec.shape[1], spec.offset);
}

void set_weight(engine::ParameterSet<double>& params, const std::string& name, const MatD& theta) {
  const engine::ParameterSpec& spec = params.layout.at(name);
  if (theta.rows() != spec.shape[0] || theta.cols() != spec.shape[1])
    throw std::invalid_argument("set_weight: " + name + " has another shape");
  upload(params.values, theta, spec.offset);
}

double squared_error_loss(Backend<double>& be, int B, int d, const double* prediction, const double* target,
                          double* diff) {
  be.axpby(B, d, 1.0, prediction, d, 0.0, diff, d);
  be.axpby(B, d, -1.0, target, d, 1.0, diff, d);
  return be.dot(std::size_t(B) * d, diff, diff) / B;
}

// ---------------------------------------------------------------- two-layer model

void validate(const TwoLayerConfig& c) {
  validate(Task{c.d, c.n, 0.0, {}});
  const bool copying = c.first != FirstLayer::attention;
  if (copying && (c.a < 0 || c.a > c.d))
    throw UsageError("a must be in [0, d] = [0, " + std::to_string(c.d) + "] (got " + std::to_string(c.a) + ")");
}

namespace model_parts {

// Head `head` (1-based) of layer 2 reads layer 1's values (E) or its own (F), as the variant's plan says.
bool has_E_values(VariantKind v, int head) { return qkv::reads_layer(layer_two_values(v), head - 1, 0); }
bool F_values_in_head(VariantKind v, int head) { return qkv::reads_layer(layer_two_values(v), head - 1, 1); }

std::string head(int l, int h, const char* what) {
  std::string name = "l";
  name += std::to_string(l);
  name += ".h";
  name += std::to_string(h);
  name += ".";
  name += what;
  return name;
}

InitialWeights two_layer_weights(const TwoLayerConfig& config, Rng& rng) {
  validate(config);
  InitialWeights w;
  const int d = config.d;
  const double s = 1 / std::sqrt(double(d)), value_scale = s / (2 * config.n);
  if (config.first == FirstLayer::attention)
    for (int h = 1; h <= 2; ++h) {
      w.add(head(1, h, "WQ"), rng.gaussian(d, d, s));
      w.add(head(1, h, "WK"), rng.gaussian(d, d, s));
      w.add(head(1, h, "WV"), rng.gaussian(d, d, value_scale));
    }
  if (config.first == FirstLayer::copying_learned) {
    const MatD I = MatD::Identity(d, d);
    w.add("A", I.leftCols(config.a));       // Θ_A = Aᵀ, A = [I_a 0]
    w.add("B", I.rightCols(d - config.a));  // Θ_B = Bᵀ, B = [0 I_{d−a}]
  }
  for (int h = 1; h <= 2; ++h) {
    w.add(head(2, h, "WQ"), rng.gaussian(d, d, s));
    w.add(head(2, h, "WK"), rng.gaussian(d, d, s));
    if (F_values_in_head(config.variant, h)) w.add(head(2, h, "WV_F"), rng.gaussian(d, d, value_scale));
    if (has_E_values(config.variant, h)) w.add(head(2, h, "WV_E"), rng.gaussian(d, d, value_scale));
  }
  w.add("H", rng.gaussian(d, d, s));
  return w;
}

// The activations of one batch of B prompts (N = B T rows), kept for the backward pass.
struct TokenActivations {
  TokenActivations(Backend<double>& be, int B_, int T, int d)
      : B(B_), N(B_ * T), E(be, rows(d)), x_pass(be, rows(d)), x_pair(be, rows(d)), y_pair(be, rows(d)),
        F(be, rows(d)), target(be, std::size_t(B) * d), O(be, std::size_t(B) * d), pred(be, std::size_t(B) * d),
        diff(be, std::size_t(B) * d), dO(be, std::size_t(B) * d), dF(be, rows(d)), dQ(be, rows(d)), dK(be, rows(d)),
        dV(be, rows(d)), dG(be, std::size_t(B) * d * d) {
    for (int h = 0; h < 2; ++h) {
      Q1[h] = Buffer<double>(be, rows(d)), K1[h] = Buffer<double>(be, rows(d)), V1[h] = Buffer<double>(be, rows(d));
      Q2[h] = Buffer<double>(be, std::size_t(B) * d), K2[h] = Buffer<double>(be, rows(d));
      V2[h] = Buffer<double>(be, rows(d));
      G1[h] = Buffer<double>(be, std::size_t(B) * d * d), G2[h] = Buffer<double>(be, std::size_t(B) * d * d);
    }
  }
  std::size_t rows(int width) const { return std::size_t(N) * width; }

  int B, N;
  Buffer<double> E, x_pass, x_pair, y_pair, F, target, O, pred, diff, dO, dF, dQ, dK, dV, dG;
  std::array<Buffer<double>, 2> Q1, K1, V1, G1, Q2, K2, V2, G2;  // per head; Q2 holds only query rows
};

}  // namespace model_parts

struct TwoLayerModel::Impl : ModelCore {
  Impl(Backend<double>& be_, const TwoLayerConfig& c_, Rng& rng) : ModelCore(be_, two_layer_weights(c_, rng)), c(c_) {}

  int T() const { return 2 * c.n + 1; }
  engine::LinearAttentionShape shape(bool all_queries) const {
    return {a->B, T(), 2 * c.n, all_queries ? T() : 1, c.d, c.d};
  }
  // The query rows of F (one per prompt).
  View<const double> F_last() const { return in(a->F, T() * c.d, std::size_t(T() - 1) * c.d); }

  void prepare(const TokenBatch& batch) {
    if (batch.d != c.d || batch.n != c.n) throw std::invalid_argument("TwoLayerModel: batch has another d or n");
    const int B = int(batch.prompts());
    if (!a || a->B != B) a = std::make_unique<TokenActivations>(be, B, T(), c.d);
    upload(a->E, batch.E), upload(a->target, batch.target);
    if (c.first != FirstLayer::attention) upload(a->x_pass, batch.x_pass), upload(a->x_pair, batch.x_pair), upload(a->y_pair, batch.y_pair);
  }

  void first_layer_forward() {
    TokenActivations& x = *a;
    const int N = x.N, d = c.d, k = c.a;
    if (c.first == FirstLayer::attention) {
      for (int h = 0; h < 2; ++h) {
        project(N, in(x.E, d), head(1, h + 1, "WQ"), out(x.Q1[h], d));
        project(N, in(x.E, d), head(1, h + 1, "WK"), out(x.K1[h], d));
        project(N, in(x.E, d), head(1, h + 1, "WV"), out(x.V1[h], d));
        engine::linear_attention_forward(be, shape(true), 1.0, in(x.Q1[h], d), in(x.K1[h], d), in(x.V1[h], d),
                                         x.G1[h].data(), out(x.F, d), h > 0);
      }
      return;
    }
    // Row form of [A x; B y]ᵀ = xᵀ [Aᵀ 0] + yᵀ [0 Bᵀ], added to the x-token rows' x.
    be.axpby(N, d, 1.0, x.x_pass.data(), d, 0.0, x.F.data(), d);
    const bool learned = c.first == FirstLayer::copying_learned;
    if (k > 0 && learned) project(N, in(x.x_pair, d), "A", out(x.F, d), true);
    if (k > 0 && !learned) be.axpby(N, k, 1.0, x.x_pair.data(), d, 1.0, x.F.data(), d);
    if (k < d && learned) project(N, in(x.y_pair, d), "B", out(x.F, d, k), true);
    if (k < d && !learned) be.axpby(N, d - k, 1.0, x.y_pair.data() + k, d, 1.0, x.F.data() + k, d);
  }

  void second_layer_forward() {
    TokenActivations& x = *a;
    const int N = x.N, B = x.B, d = c.d;
    for (int h = 0; h < 2; ++h) {
      const bool from_F = F_values_in_head(c.variant, h + 1), from_E = has_E_values(c.variant, h + 1);
      project(B, F_last(), head(2, h + 1, "WQ"), out(x.Q2[h], d));
      project(N, in(x.F, d), head(2, h + 1, "WK"), out(x.K2[h], d));
      if (from_F) project(N, in(x.F, d), head(2, h + 1, "WV_F"), out(x.V2[h], d));
      if (from_E) project(N, in(x.E, d), head(2, h + 1, "WV_E"), out(x.V2[h], d), from_F);
      engine::linear_attention_forward(be, shape(false), 1.0, in(x.Q2[h], d), in(x.K2[h], d), in(x.V2[h], d),
                                       x.G2[h].data(), out(x.O, d), h > 0);
    }
    project(B, in(x.O, d), "H", out(x.pred, d));
  }

  double forward_loss(const TokenBatch& batch) {
    prepare(batch);
    first_layer_forward();
    second_layer_forward();
    return squared_error_loss(be, a->B, c.d, a->pred.data(), a->target.data(), a->diff.data());
  }

  // After forward_loss: dŷ = 2 (ŷ − y)/B back to every parameter.
  void backward() {
    TokenActivations& x = *a;
    const int N = x.N, B = x.B, d = c.d;
    be.axpby(B, d, 2.0 / B, x.diff.data(), d, 0.0, x.diff.data(), d);
    project_backward(B, in(x.O, d), "H", in(x.diff, d), out(x.dO, d), false);
    zero(be, x.dF);
    for (int h = 0; h < 2; ++h) {
      const bool from_F = F_values_in_head(c.variant, h + 1), from_E = has_E_values(c.variant, h + 1);
      be.fill(std::size_t(B) * d, 0.0, x.dQ.data());  // layer 2's queries: one row per prompt
      zero(be, x.dK), zero(be, x.dV);
      engine::linear_attention_backward(be, shape(false), 1.0, in(x.Q2[h], d), in(x.K2[h], d), in(x.V2[h], d),
                                        x.G2[h].data(), in(x.dO, d), out(x.dQ, d), out(x.dK, d), out(x.dV, d),
                                        x.dG.data());
      const View<double> dF_last = out(x.dF, T() * d, std::size_t(T() - 1) * d);
      project_backward(B, F_last(), head(2, h + 1, "WQ"), in(x.dQ, d), dF_last);
      project_backward(N, in(x.F, d), head(2, h + 1, "WK"), in(x.dK, d), out(x.dF, d));
      if (from_F) project_backward(N, in(x.F, d), head(2, h + 1, "WV_F"), in(x.dV, d), out(x.dF, d));
      if (from_E) project_backward(N, in(x.E, d), head(2, h + 1, "WV_E"), in(x.dV, d), nowhere);
    }
    first_layer_backward();
  }

  void first_layer_backward() {
    TokenActivations& x = *a;
    const int N = x.N, d = c.d, k = c.a;
    if (c.first == FirstLayer::copying_learned) {
      if (k > 0) project_backward(N, in(x.x_pair, d), "A", in(x.dF, d), nowhere);
      if (k < d) project_backward(N, in(x.y_pair, d), "B", in(x.dF, d, k), nowhere);
    }
    if (c.first != FirstLayer::attention) return;
    for (int h = 0; h < 2; ++h) {
      zero(be, x.dQ), zero(be, x.dK), zero(be, x.dV);
      engine::linear_attention_backward(be, shape(true), 1.0, in(x.Q1[h], d), in(x.K1[h], d), in(x.V1[h], d),
                                        x.G1[h].data(), in(x.dF, d), out(x.dQ, d), out(x.dK, d), out(x.dV, d),
                                        x.dG.data());
      for (const auto& [what, grad] : {std::pair{"WQ", &x.dQ}, {"WK", &x.dK}, {"WV", &x.dV}})
        project_backward(N, in(x.E, d), head(1, h + 1, what), in(*grad, d), nowhere);
    }
  }

  TwoLayerConfig c;
  std::unique_ptr<TokenActivations> a;  // for the last batch's size
  TokenBatch staging;                   // add_gradient(prompts)'s batch, refilled in place
};

TwoLayerModel::TwoLayerModel(Backend<double>& backend, const TwoLayerConfig& config, Rng& rng)
    : impl_(std::make_unique<Impl>(backend, config, rng)) {}
TwoLayerModel::TwoLayerModel(TwoLayerModel&&) noexcept = default;
TwoLayerModel::~TwoLayerModel() = default;

const TwoLayerConfig& TwoLayerModel::config() const { return impl_->c; }
Backend<double>& TwoLayerModel::backend() { return impl_->be; }
engine::ParameterSet<double>& TwoLayerModel::params() { return impl_->params; }
const engine::ParameterSet<double>& TwoLayerModel::params() const { return impl_->params; }

MatD TwoLayerModel::A() const {
  const TwoLayerConfig& c = impl_->c;
  if (c.first == FirstLayer::copying_learned && c.a > 0) return to_column_weight(weight(params(), "A"));
  return MatD::Identity(c.d, c.d).topRows(c.a);
}

MatD TwoLayerModel::B() const {
  const TwoLayerConfig& c = impl_->c;
  if (c.first == FirstLayer::copying_learned && c.a < c.d) return to_column_weight(weight(params(), "B"));
  return MatD::Identity(c.d, c.d).bottomRows(c.d - c.a);
}

MatD TwoLayerModel::first_layer(const TokenBatch& batch) {
  impl_->prepare(batch);
  impl_->first_layer_forward();
  return download(impl_->a->F, impl_->a->N, impl_->c.d);
}

MatD TwoLayerModel::predict(const TokenBatch& batch) {
  impl_->forward_loss(batch);
  return download(impl_->a->pred, impl_->a->B, impl_->c.d);
}

double TwoLayerModel::loss(const TokenBatch& batch) { return impl_->forward_loss(batch); }

double TwoLayerModel::add_gradient(const TokenBatch& batch) {
  const double value = impl_->forward_loss(batch);
  impl_->backward();
  return value;
}

double TwoLayerModel::add_gradient(const std::vector<Prompt>& prompts) {
  fill_token_batch(prompts, impl_->staging);
  return add_gradient(impl_->staging);
}

// ---------------------------------------------------------------- stack

void validate(const StackConfig& c) {
  validate(Task{c.d, c.n, 0.0, {}});
  if (c.layers < 1) throw UsageError("layers must be at least 1 (got " + std::to_string(c.layers) + ")");
  if (c.heads < 1) throw UsageError("heads must be at least 1 (got " + std::to_string(c.heads) + ")");
  if (c.variant != VariantKind::vanilla && c.variant != VariantKind::skipv1)
    throw UsageError("the stack is MHA or SkipV1 (got " + variant_name(c.variant) + ")");
  if (c.variant == VariantKind::skipv1 && c.heads < 2) throw UsageError("SkipV1 needs at least 2 heads per layer");
}

namespace model_parts {

InitialWeights stack_weights(const StackConfig& config, Rng& rng) {
  validate(config);
  InitialWeights w;
  const int width = 2 * config.d;
  const double s = 1 / std::sqrt(double(width) * config.heads * config.layers);
  for (int l = 1; l <= config.layers; ++l)
    for (int h = 1; h <= config.heads; ++h)
      for (const char* what : {"WQ", "WK", "WV"}) w.add(head(l, h, what), rng.gaussian(width, width, s));
  return w;
}

// Z_0 … Z_L and every head's Q, K, V, G of one batch of B prompts (N = B T rows of width w).
struct StackActivations {
  StackActivations(Backend<double>& be, int B_, int T, int w, int layers, int heads)
      : B(B_), N(B_ * T), target(be, std::size_t(B) * w / 2), pred(be, std::size_t(B) * w / 2),
        diff(be, std::size_t(B) * w / 2), states(be, std::size_t(B) * w), dZ(be, rows(w)), dZ_prev(be, rows(w)),
        dQ(be, rows(w)), dK(be, rows(w)), dV(be, rows(w)), dG(be, std::size_t(B) * w * w) {
    for (int l = 0; l <= layers; ++l) Z.emplace_back(be, rows(w));
    for (int i = 0; i < layers * heads; ++i) {
      Q.emplace_back(be, rows(w)), K.emplace_back(be, rows(w)), V.emplace_back(be, rows(w));
      G.emplace_back(be, std::size_t(B) * w * w);
    }
  }
  std::size_t rows(int width) const { return std::size_t(N) * width; }

  int B, N;
  std::vector<Buffer<double>> Z, Q, K, V, G;  // Q … G: head h of layer l at (l − 1) heads + h − 1
  Buffer<double> target, pred, diff, states, dZ, dZ_prev, dQ, dK, dV, dG;
};

}  // namespace model_parts

struct LinearAttentionStack::Impl : ModelCore {
  Impl(Backend<double>& be_, const StackConfig& c_, Rng& rng)
      : ModelCore(be_, stack_weights(c_, rng)), c(c_), plan(qkv::make_plan({.kind = c.variant}, c.layers, c.heads, c.heads)) {}

  int T() const { return c.n + 1; }
  int w() const { return 2 * c.d; }
  engine::LinearAttentionShape shape() const { return {a->B, T(), c.n, T(), w(), w()}; }
  // Head h of layer l ≥ 2 (both 1-based) reads layer 1's values, i.e. Z_0's (layer 1 itself reads Z_0 anyway).
  bool from_first(int l, int h) const { return l >= 2 && qkv::reads_layer(plan[std::size_t(l - 1)].values, h - 1, 0); }
  std::size_t query_row() const { return std::size_t(T() - 1) * w(); }

  void prepare(const ConcatBatch& batch) {
    if (batch.d != c.d || batch.n != c.n) throw std::invalid_argument("LinearAttentionStack: batch has another d or n");
    const int B = int(batch.prompts());
    if (!a || a->B != B) a = std::make_unique<StackActivations>(be, B, T(), w(), c.layers, c.heads);
    upload(a->Z[0], batch.Z), upload(a->target, batch.target);
  }

  void forward(const ConcatBatch& batch) {
    prepare(batch);
    StackActivations& x = *a;
    const int N = x.N, w = this->w();
    for (int l = 1; l <= c.layers; ++l) {
      const Buffer<double>& Z = x.Z[std::size_t(l - 1)];
      be.axpby(N, w, 1.0, Z.data(), w, 0.0, x.Z[std::size_t(l)].data(), w);
      for (int h = 1; h <= c.heads; ++h) {
        const std::size_t i = std::size_t((l - 1) * c.heads + h - 1);
        project(N, in(Z, w), head(l, h, "WQ"), out(x.Q[i], w));
        project(N, in(Z, w), head(l, h, "WK"), out(x.K[i], w));
        project(N, in(from_first(l, h) ? x.Z[0] : Z, w), head(l, h, "WV"), out(x.V[i], w));
        engine::linear_attention_forward(be, shape(), 1.0 / c.n, in(x.Q[i], w), in(x.K[i], w), in(x.V[i], w),
                                         x.G[i].data(), out(x.Z[std::size_t(l)], w), true);
      }
    }
  }

  double forward_loss(const ConcatBatch& batch) {
    forward(batch);
    StackActivations& x = *a;
    be.axpby(x.B, c.d, 1.0, x.Z.back().data() + query_row() + c.d, T() * w(), 0.0, x.pred.data(), c.d);
    return squared_error_loss(be, x.B, c.d, x.pred.data(), x.target.data(), x.diff.data());
  }

  // After forward_loss: dŷ = 2 (ŷ − y)/B into the y-slot of the query rows of dZ_L, then layer by layer.
  void backward() {
    StackActivations& x = *a;
    const int N = x.N, w = this->w();
    zero(be, x.dZ);
    be.axpby(x.B, c.d, 2.0 / x.B, x.diff.data(), c.d, 0.0, x.dZ.data() + query_row() + c.d, T() * w);
    for (int l = c.layers; l >= 1; --l) {
      const Buffer<double>& Z = x.Z[std::size_t(l - 1)];
      const View<double> dZ_in = l > 1 ? out(x.dZ_prev, w) : nowhere;  // dZ_0: Z_0 is the data
      if (l > 1) be.axpby(N, w, 1.0, x.dZ.data(), w, 0.0, x.dZ_prev.data(), w);
      for (int h = 1; h <= c.heads; ++h) {
        const std::size_t i = std::size_t((l - 1) * c.heads + h - 1);
        zero(be, x.dQ), zero(be, x.dK), zero(be, x.dV);
        engine::linear_attention_backward(be, shape(), 1.0 / c.n, in(x.Q[i], w), in(x.K[i], w), in(x.V[i], w),
                                          x.G[i].data(), in(x.dZ, w), out(x.dQ, w), out(x.dK, w), out(x.dV, w),
                                          x.dG.data());
        project_backward(N, in(Z, w), head(l, h, "WQ"), in(x.dQ, w), dZ_in);
        project_backward(N, in(Z, w), head(l, h, "WK"), in(x.dK, w), dZ_in);
        const bool skip = from_first(l, h);
        project_backward(N, in(skip ? x.Z[0] : Z, w), head(l, h, "WV"), in(x.dV, w), skip ? nowhere : dZ_in);
      }
      std::swap(x.dZ, x.dZ_prev);
    }
  }

  StackConfig c;
  std::vector<qkv::LayerPlan> plan;     // where each layer's value heads come from
  std::unique_ptr<StackActivations> a;  // for the last batch's size
  ConcatBatch staging;                  // add_gradient(prompts)'s batch, refilled in place
};

LinearAttentionStack::LinearAttentionStack(Backend<double>& backend, const StackConfig& config, Rng& rng)
    : impl_(std::make_unique<Impl>(backend, config, rng)) {}
LinearAttentionStack::LinearAttentionStack(LinearAttentionStack&&) noexcept = default;
LinearAttentionStack::~LinearAttentionStack() = default;

const StackConfig& LinearAttentionStack::config() const { return impl_->c; }
Backend<double>& LinearAttentionStack::backend() { return impl_->be; }
engine::ParameterSet<double>& LinearAttentionStack::params() { return impl_->params; }
const engine::ParameterSet<double>& LinearAttentionStack::params() const { return impl_->params; }

std::vector<MatD> LinearAttentionStack::query_states(const ConcatBatch& batch) {
  Impl& m = *impl_;
  m.forward(batch);
  StackActivations& x = *m.a;
  std::vector<MatD> states;
  for (int l = 1; l <= m.c.layers; ++l) {
    m.be.axpby(x.B, m.w(), 1.0, x.Z[std::size_t(l)].data() + m.query_row(), m.T() * m.w(), 0.0, x.states.data(),
               m.w());
    states.push_back(download(x.states, x.B, m.w()));
  }
  return states;
}

MatD LinearAttentionStack::predict(const ConcatBatch& batch) {
  impl_->forward_loss(batch);
  return download(impl_->a->pred, impl_->a->B, impl_->c.d);
}

double LinearAttentionStack::loss(const ConcatBatch& batch) { return impl_->forward_loss(batch); }

double LinearAttentionStack::add_gradient(const ConcatBatch& batch) {
  const double value = impl_->forward_loss(batch);
  impl_->backward();
  return value;
}

double LinearAttentionStack::add_gradient(const std::vector<Prompt>& prompts) {
  fill_concat_batch(prompts, impl_->staging);
  return add_gradient(impl_->staging);
}

}  // namespace qkvlab::icl
