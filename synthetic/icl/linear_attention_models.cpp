// Row-vector convention; see linear_attention_models.hpp for the models' formulas.
#include "synthetic/icl/linear_attention_models.hpp"

#include "core/errors.hpp"
#include "engine/ops.hpp"
#include "synthetic/icl/batched_linear_attention.hpp"

#include <cmath>
#include <stdexcept>

namespace qkvlab::icl {

using engine::Tape;
using engine::Var;

std::string variant_name(Variant v) {
  switch (v) {
    case Variant::mha: return "mha";
    case Variant::skipv1: return "skipv1";
    case Variant::resformer: return "resformer";
    case Variant::svformer: return "svformer";
  }
  return "?";
}

Variant parse_variant(const std::string& name) {
  for (Variant v : {Variant::mha, Variant::skipv1, Variant::resformer, Variant::svformer})
    if (variant_name(v) == name) return v;
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

TokenBatch make_token_batch(const std::vector<Prompt>& prompts) {
  if (prompts.empty()) throw std::invalid_argument("make_token_batch: no prompts");
  TokenBatch t;
  t.d = int(prompts.front().X.rows()), t.n = int(prompts.front().X.cols());
  const Eigen::Index B = Eigen::Index(prompts.size()), T = t.tokens(), d = t.d;
  t.E = MatD::Zero(B * T, d), t.x_pass = MatD::Zero(B * T, d), t.x_pair = MatD::Zero(B * T, d);
  t.y_pair = MatD::Zero(B * T, d), t.target = MatD(B, d);
  for (Eigen::Index b = 0; b < B; ++b) {
    const Prompt& p = prompts[std::size_t(b)];
    for (Eigen::Index i = 0; i < t.n; ++i) {
      const Eigen::Index rx = b * T + 2 * i, ry = rx + 1;
      t.E.row(rx) = p.X.col(i).transpose(), t.E.row(ry) = p.Y.col(i).transpose();
      t.x_pass.row(rx) = p.X.col(i).transpose();
      t.x_pair.row(ry) = p.X.col(i).transpose(), t.y_pair.row(ry) = p.Y.col(i).transpose();
    }
    t.E.row(b * T + T - 1) = p.x_query.transpose(), t.x_pair.row(b * T + T - 1) = p.x_query.transpose();
    t.target.row(b) = p.y_query.transpose();
  }
  return t;
}

ConcatBatch make_concat_batch(const std::vector<Prompt>& prompts) {
  if (prompts.empty()) throw std::invalid_argument("make_concat_batch: no prompts");
  ConcatBatch c;
  c.d = int(prompts.front().X.rows()), c.n = int(prompts.front().X.cols());
  const Eigen::Index B = Eigen::Index(prompts.size()), T = c.tokens(), d = c.d;
  c.Z = MatD::Zero(B * T, 2 * d), c.target = MatD(B, d);
  for (Eigen::Index b = 0; b < B; ++b) {
    const Prompt& p = prompts[std::size_t(b)];
    c.Z.block(b * T, 0, c.n, d) = p.X.transpose();
    c.Z.block(b * T, d, c.n, d) = p.Y.transpose();
    c.Z.block(b * T + c.n, 0, 1, d) = p.x_query.transpose();
    c.target.row(b) = p.y_query.transpose();
  }
  return c;
}

engine::Parameter<double>& ParameterSet::add(const std::string& name, MatD value) {
  for (const auto& p : storage)
    if (p.name == name) throw std::invalid_argument("ParameterSet: duplicate name " + name);
  return storage.emplace_back(name, std::move(value));
}

engine::Parameter<double>& ParameterSet::at(const std::string& name) {
  for (auto& p : storage)
    if (p.name == name) return p;
  throw std::invalid_argument("ParameterSet: no parameter " + name);
}

const engine::Parameter<double>& ParameterSet::at(const std::string& name) const {
  for (const auto& p : storage)
    if (p.name == name) return p;
  throw std::invalid_argument("ParameterSet: no parameter " + name);
}

engine::Parameters<double> ParameterSet::list() {
  engine::Parameters<double> out;
  for (auto& p : storage) out.push_back(&p);
  return out;
}

Eigen::Index ParameterSet::count() const {
  Eigen::Index n = 0;
  for (const auto& p : storage) n += p.value.size();
  return n;
}

// ---------------------------------------------------------------- two-layer model

void validate(const TwoLayerConfig& c) {
  validate(Task{c.d, c.n, 0.0, {}});
  const bool copying = c.first != FirstLayer::attention;
  if (copying && (c.a < 0 || c.a > c.d))
    throw UsageError("a must be in [0, d] = [0, " + std::to_string(c.d) + "] (got " + std::to_string(c.a) + ")");
}

namespace {

bool has_F_values(Variant v) { return v != Variant::svformer; }
bool has_E_values(Variant v, int head) {
  return v == Variant::resformer || v == Variant::svformer || (v == Variant::skipv1 && head == 2);
}
bool F_values_in_head(Variant v, int head) { return has_F_values(v) && !(v == Variant::skipv1 && head == 2); }

std::string head(int l, int h, const char* what) {
  std::string name = "l";
  name += std::to_string(l);
  name += ".h";
  name += std::to_string(h);
  name += ".";
  name += what;
  return name;
}

}  // namespace

TwoLayerModel make_two_layer_model(const TwoLayerConfig& config, Rng& rng) {
  validate(config);
  TwoLayerModel m;
  m.config = config;
  const int d = config.d;
  const double s = 1 / std::sqrt(double(d)), value_scale = s / (2 * config.n);
  if (config.first == FirstLayer::attention)
    for (int h = 1; h <= 2; ++h) {
      m.params.add(head(1, h, "WQ"), rng.gaussian(d, d, s));
      m.params.add(head(1, h, "WK"), rng.gaussian(d, d, s));
      m.params.add(head(1, h, "WV"), rng.gaussian(d, d, value_scale));
    }
  if (config.first == FirstLayer::copying_learned) {
    const MatD I = MatD::Identity(d, d);
    m.params.add("A", I.leftCols(config.a));       // Θ_A = Aᵀ, A = [I_a 0]
    m.params.add("B", I.rightCols(d - config.a));  // Θ_B = Bᵀ, B = [0 I_{d−a}]
  }
  for (int h = 1; h <= 2; ++h) {
    m.params.add(head(2, h, "WQ"), rng.gaussian(d, d, s));
    m.params.add(head(2, h, "WK"), rng.gaussian(d, d, s));
    if (F_values_in_head(config.variant, h)) m.params.add(head(2, h, "WV_F"), rng.gaussian(d, d, value_scale));
    if (has_E_values(config.variant, h)) m.params.add(head(2, h, "WV_E"), rng.gaussian(d, d, value_scale));
  }
  m.params.add("H", rng.gaussian(d, d, s));
  return m;
}

MatD TwoLayerModel::A() const {
  if (config.first == FirstLayer::copying_learned)
    return to_column_weight(params.at("A").value);
  return MatD::Identity(config.d, config.d).topRows(config.a);
}

MatD TwoLayerModel::B() const {
  if (config.first == FirstLayer::copying_learned)
    return to_column_weight(params.at("B").value);
  return MatD::Identity(config.d, config.d).bottomRows(config.d - config.a);
}

Var<double> TwoLayerModel::first_layer(Tape<double>& tape, const TokenBatch& batch) {
  const int d = config.d, a = config.a;
  if (batch.d != d || batch.n != config.n) throw std::invalid_argument("TwoLayerModel: batch has another d or n");
  if (config.first == FirstLayer::attention) {
    const Var<double> E = tape.constant(batch.E);
    Var<double> F;
    for (int h = 1; h <= 2; ++h) {
      const Var<double> head_out = batched_linear_attention(
          E * tape.parameter(params.at(head(1, h, "WQ"))), E * tape.parameter(params.at(head(1, h, "WK"))),
          E * tape.parameter(params.at(head(1, h, "WV"))), batch.tokens(), 2 * config.n, Queries::all_queries);
      F = h == 1 ? head_out : F + head_out;
    }
    return F;
  }
  // Row form of [A x; B y]ᵀ = xᵀ [Aᵀ 0] + yᵀ [0 Bᵀ].
  if (config.first == FirstLayer::copying_fixed) {
    MatD F = batch.x_pass;
    F.leftCols(a) += batch.x_pair.leftCols(a);
    F.rightCols(d - a) += batch.y_pair.rightCols(d - a);
    return tape.constant(std::move(F));
  }
  const Var<double> zeros_a = tape.constant(MatD::Zero(d, a)), zeros_b = tape.constant(MatD::Zero(d, d - a));
  std::vector<Var<double>> A_hat_blocks, B_hat_blocks;
  if (a > 0) A_hat_blocks.push_back(tape.parameter(params.at("A")));
  if (a < d) A_hat_blocks.push_back(zeros_b);
  if (a > 0) B_hat_blocks.push_back(zeros_a);
  if (a < d) B_hat_blocks.push_back(tape.parameter(params.at("B")));
  return tape.constant(batch.x_pass) + tape.constant(batch.x_pair) * engine::concat_cols(A_hat_blocks) +
         tape.constant(batch.y_pair) * engine::concat_cols(B_hat_blocks);
}

Var<double> TwoLayerModel::predict(Tape<double>& tape, const TokenBatch& batch) {
  const Var<double> F = first_layer(tape, batch);
  const Var<double> E = tape.constant(batch.E);
  Var<double> out;
  for (int h = 1; h <= 2; ++h) {
    Var<double> V;
    if (F_values_in_head(config.variant, h)) V = F * tape.parameter(params.at(head(2, h, "WV_F")));
    if (has_E_values(config.variant, h)) {
      const Var<double> VE = E * tape.parameter(params.at(head(2, h, "WV_E")));
      V = F_values_in_head(config.variant, h) ? V + VE : VE;
    }
    const Var<double> head_out = batched_linear_attention(
        F * tape.parameter(params.at(head(2, h, "WQ"))), F * tape.parameter(params.at(head(2, h, "WK"))), V,
        batch.tokens(), 2 * config.n, Queries::last_query);
    out = h == 1 ? head_out : out + head_out;
  }
  return out * tape.parameter(params.at("H"));
}

// ---------------------------------------------------------------- stack

void validate(const StackConfig& c) {
  validate(Task{c.d, c.n, 0.0, {}});
  if (c.layers < 1) throw UsageError("layers must be at least 1 (got " + std::to_string(c.layers) + ")");
  if (c.heads < 1) throw UsageError("heads must be at least 1 (got " + std::to_string(c.heads) + ")");
  if (c.skipv1 && c.heads < 2) throw UsageError("SkipV1 needs at least 2 heads per layer");
}

LinearAttentionStack make_stack(const StackConfig& config, Rng& rng) {
  validate(config);
  LinearAttentionStack m;
  m.config = config;
  const int w = 2 * config.d;
  const double s = 1 / std::sqrt(double(w) * config.heads * config.layers);
  for (int l = 1; l <= config.layers; ++l)
    for (int h = 1; h <= config.heads; ++h)
      for (const char* what : {"WQ", "WK", "WV"}) m.params.add(head(l, h, what), rng.gaussian(w, w, s));
  return m;
}

std::vector<Var<double>> LinearAttentionStack::query_states(Tape<double>& tape, const ConcatBatch& batch) {
  if (batch.d != config.d || batch.n != config.n)
    throw std::invalid_argument("LinearAttentionStack: batch has another d or n");
  const Var<double> Z0 = tape.constant(batch.Z);
  Var<double> Z = Z0;
  std::vector<Var<double>> states;
  for (int l = 1; l <= config.layers; ++l) {
    Var<double> update;
    for (int h = 1; h <= config.heads; ++h) {
      const bool from_first = config.skipv1 && l >= 2 && h > config.heads / 2;
      const Var<double> V = (from_first ? Z0 : Z) * tape.parameter(params.at(head(l, h, "WV")));
      const Var<double> head_out = batched_linear_attention(
          Z * tape.parameter(params.at(head(l, h, "WQ"))), Z * tape.parameter(params.at(head(l, h, "WK"))), V,
          batch.tokens(), config.n, Queries::all_queries, 1.0 / config.n);
      update = h == 1 ? head_out : update + head_out;
    }
    Z = Z + update;
    states.push_back(last_token_rows(Z, batch.tokens()));
  }
  return states;
}

Var<double> LinearAttentionStack::predict(Tape<double>& tape, const ConcatBatch& batch) {
  return engine::slice_cols(query_states(tape, batch).back(), config.d, config.d);
}

Var<double> squared_error_loss(Var<double> prediction, const MatD& target) {
  const Var<double> T = prediction.tape().constant(target);
  return engine::scale(engine::mse_loss(prediction, T), double(target.cols()));
}

Var<double> TwoLayerModel::loss(Tape<double>& tape, const std::vector<Prompt>& prompts) {
  const TokenBatch batch = make_token_batch(prompts);
  return squared_error_loss(predict(tape, batch), batch.target);
}

Var<double> LinearAttentionStack::loss(Tape<double>& tape, const std::vector<Prompt>& prompts) {
  const ConcatBatch batch = make_concat_batch(prompts);
  return squared_error_loss(predict(tape, batch), batch.target);
}

}  // namespace qkvlab::icl
