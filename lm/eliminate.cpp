#include "lm/eliminate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "core/errors.hpp"
#include "core/linalg.hpp"
#include "engine/cpu_backend.hpp"
#include "lm/describe.hpp"
#include "lm/parameters.hpp"
#include "lm/plan.hpp"
#include "lm/tensors.hpp"

namespace qkvlab::lm {

namespace {

std::string list_text(const std::vector<int>& layers) {
  std::string s;
  for (int l : layers) s += (s.empty() ? "" : ", ") + std::to_string(l);
  return s;
}

// Whether layer n's keys and queries are its own and read by no other layer (the Q-identity scale
// doubles the keys; resformer-q's mix would add queries of another basis).
bool keys_private(const std::vector<LayerPlan>& plan, int n) {
  const LayerPlan& p = plan[std::size_t(n)];
  if (!is_own(p.keys, n, p.own_key_heads) || !is_own(p.queries, n, int(p.queries.size()))) return false;
  for (std::size_t m = 0; m < plan.size(); ++m)
    for (const Mix* mix : {&plan[m].keys, &plan[m].queries})
      for (const auto& sources : *mix)
        for (const Source& s : sources)
          if (s.layer == n && int(m) != n) return false;
  return true;
}

void check_applicable(const Config& c, const std::vector<int>& layers) {
  if (layers.empty()) throw UsageError("no layer to eliminate");
  if (c.mla) throw UsageError("an MLA model: its queries have a rotary part of their own (W_QR), elimination does not apply");
  if (c.variant.kind == VariantKind::q_identity) throw UsageError("a q-identity model has no W_Q left to eliminate");
  if (!c.q_identity_layers.empty())
    throw UsageError("layers " + list_text(c.q_identity_layers) +
                     " already have W_Q = I: eliminate from the model they were eliminated from");
  if (c.heads * c.head_dim != c.d)
    throw UsageError("W_Q is " + std::to_string(c.d) + " x " + std::to_string(c.heads * c.head_dim) +
                     " (heads x head width != d): not a change of basis");
  const auto plan = make_plan(c);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const int l = layers[i];
    if (l < 1 || l > c.layers)
      throw UsageError("layer " + std::to_string(l) + " is not one of the model's layers 1 ... " + std::to_string(c.layers));
    if (std::count(layers.begin(), layers.end(), l) > 1) throw UsageError("layer " + std::to_string(l) + " is listed twice");
    if (!keys_private(plan, l - 1))
      throw UsageError("layer " + std::to_string(l) + " shares its key or query heads with another layer (variant " +
                       to_string(c.variant.kind) + "): what elimination changes in them would reach it");
  }
}

// h.<i>.<what> → (i, what); (−1, name) for the tensors outside the layers.
std::pair<int, std::string> split_name(const std::string& name) {
  if (name.rfind("h.", 0) != 0) return {-1, name};
  const std::size_t dot = name.find('.', 2);
  return {std::stoi(name.substr(2, dot - 2)), name.substr(dot + 1)};
}

// The re-expressed value of tensor `name`: T[i] is layer i's input basis, T[L] the final one.
Matrix transformed(const std::string& name, const Tensors& from, const Config& c,
                   const std::vector<const ChangeOfBasis<double>*>& T, const std::vector<bool>& eliminated) {
  const auto [i, what] = split_name(name);
  if (name == "wte" || name == "wpe") return from.get(name) * T.front()->T;
  if (name == "lm_head.weight") return from.get(c.tied ? std::string("wte") : name) * T.back()->T_inv.transpose();
  if (i < 0) return from.get(name);  // the final norm
  const ChangeOfBasis<double>& in = *T[std::size_t(i)];
  const double key_factor = eliminated[std::size_t(i)] ? 2.0 : 1.0;  // the Q-identity scale's ½
  for (const char* reader : {"attn.q", "attn.k", "attn.v", "mlp.fc", "mlp.gate", "mlp.up"}) {
    const double factor = std::string(reader) == "attn.k" ? key_factor : 1.0;
    if (what == std::string(reader) + ".weight") return factor * (in.T_inv * from.get(name));
    if (what == std::string(reader) + ".bias") return factor * from.get(name);
  }
  const bool attention = what.rfind("attn.o.", 0) == 0;
  if (attention || what.rfind("mlp.proj.", 0) == 0 || what.rfind("mlp.down.", 0) == 0) {
    const ChangeOfBasis<double>& out = attention ? in : *T[std::size_t(i) + 1];
    if (what.ends_with(".weight")) return from.get(name) * out.T;
    return (from.get(name).transpose() * out.T).transpose();
  }
  return from.get(name);  // norms, DenseFormer's weights
}

// Each eliminated layer's change of basis (its W_Q), and every layer's input basis T[i] (T[L]: the
// final one) and whether it is eliminated. T points into `bases`: held by a unique_ptr, never copied.
struct Bases {
  std::vector<ChangeOfBasis<double>> bases;
  std::vector<const ChangeOfBasis<double>*> T;
  std::vector<bool> eliminated;
};

// `sorted`: ascending, 1-based. The eliminated layers' records into `layers` when given.
std::unique_ptr<Bases> plan_bases(const Checkpoint& source, const std::vector<int>& sorted,
                                  std::vector<EliminatedLayer>* layers) {
  const Config& c = source.config;
  const auto layout = parameter_layout(c, make_plan(c));
  std::vector<float> values = source.values;
  const Tensors from{layout, values};
  auto b = std::make_unique<Bases>();
  for (int l : sorted) {
    const std::string q = layer_tensor(l - 1, "attn.q");
    b->bases.push_back(change_of_basis<double>(from.get(q + ".weight")));
    const double kappa = b->bases.back().kappa;
    if (b->bases.back().singular() || !(kappa <= max_basis_condition))
      throw UsageError("layer " + std::to_string(l) + ": W_Q is numerically singular in float (cond_2 " +
                       std::to_string(kappa) + " > " + std::to_string(max_basis_condition) + ")");
    if (layers) layers->push_back({l, kappa, from.has(q + ".bias") && from.get(q + ".bias").norm() > 0});
  }
  b->T.resize(std::size_t(c.layers) + 1);
  b->eliminated.assign(std::size_t(c.layers), false);
  for (int i = 0, k = 0; i <= c.layers; ++i) {
    while (k + 1 < int(sorted.size()) && sorted[std::size_t(k) + 1] - 1 <= i) ++k;
    b->T[std::size_t(i)] = &b->bases[std::size_t(k)];
    if (i < c.layers) b->eliminated[std::size_t(i)] = std::count(sorted.begin(), sorted.end(), i + 1) > 0;
  }
  return b;
}

// The eliminated model's configuration: the Q-identity layers, and the head untied (Remark 4).
Config eliminated_config(const Config& c, const std::vector<int>& sorted) {
  Config out = c;
  out.q_identity_layers = sorted;
  out.tied = false;
  return out;
}

// The eliminated model's values as V: float (rounded, the checkpoint) or double (unrounded).
template <class V>
std::vector<V> eliminated_values(const Checkpoint& source, const Config& out, const Bases& b) {
  const Config& c = source.config;
  const auto layout = parameter_layout(c, make_plan(c)), out_layout = parameter_layout(out, make_plan(out));
  std::vector<float> values = source.values;
  const Tensors from{layout, values};
  std::vector<V> result(out_layout.total(), V(0));
  TensorsOf<V> to{out_layout, result};
  for (const auto& spec : out_layout.specs()) to.put(spec.name, transformed(spec.name, from, c, b.T, b.eliminated));
  return result;
}

std::vector<int> ascending(std::vector<int> layers) {
  std::sort(layers.begin(), layers.end());
  return layers;
}

}  // namespace

Elimination eliminate_queries(const Checkpoint& source, const std::vector<int>& layers) {
  check_applicable(source.config, layers);
  const std::vector<int> sorted = ascending(layers);
  Elimination r;
  const auto bases = plan_bases(source, sorted, &r.layers);
  Checkpoint& out = r.checkpoint;
  out.config = eliminated_config(source.config, sorted), out.metadata = source.metadata;
  // run_id marks a training run's own model (require_model_destination); this one records its source's.
  if (auto id = out.metadata.extract("run_id")) out.metadata["eliminated_from.run_id"] = id.mapped();
  // The largest cond_2 of the eliminated W_Q's: the float rounding of the change of basis grows with it,
  // and `verify --against` sizes its default tolerance by it (a source's own record is replaced: a
  // model with Q-identity layers is not eliminated again).
  double kappa = 1;
  for (const EliminatedLayer& l : r.layers) kappa = std::max(kappa, l.kappa);
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", kappa);
  out.metadata[kEliminatedKappa] = text;
  out.tokenizer_json = source.tokenizer_json;
  r.untied = source.config.tied;
  out.values = eliminated_values<float>(source, out.config, *bases);
  return r;
}

Checkpoint explicit_queries(const Checkpoint& ck) {
  if (ck.config.q_identity_layers.empty()) return ck;
  Checkpoint out = ck;
  out.config.q_identity_layers.clear();
  const Config& c = ck.config;
  const auto layout = parameter_layout(c, make_plan(c));
  const auto out_layout = parameter_layout(out.config, make_plan(out.config));
  std::vector<float> values = ck.values;
  const Tensors from{layout, values};
  out.values.assign(out_layout.total(), 0.0f);
  Tensors to{out_layout, out.values};
  for (const auto& spec : out_layout.specs()) {
    const auto [i, what] = split_name(spec.name);
    const bool identity = i >= 0 && c.identity_query(i);
    if (identity && what == "attn.q.weight")
      to.put(spec.name, Matrix::Identity(c.d, c.d));
    else if (identity && what == "attn.q.bias")
      to.put(spec.name, Matrix::Zero(c.d, 1));
    else
      to.put(spec.name, (identity && what.rfind("attn.k.", 0) == 0 ? 0.5 : 1.0) * from.get(spec.name));
  }
  return out;
}

Coverage coverage(const Config& source, const std::vector<EliminatedLayer>& eliminated) {
  std::vector<std::string> why;
  if (source.norm) why.push_back(norm_name(source) + " in front of the attention: a change of basis does not pass through it");
  if (eliminated.size() > 1) {
    std::vector<int> ls;
    for (const auto& e : eliminated) ls.push_back(e.layer);
    why.push_back("several layers under skips (" + list_text(ls) +
                  "): the skips carry one basis of the residual stream, which fixes one W_Q (Remark 1)");
  }
  for (const auto& e : eliminated)
    if (e.query_bias) why.push_back("layer " + std::to_string(e.layer) + "'s query bias is dropped (a Q-identity query has none)");
  if (why.empty())
    return {true, "Theorem 4.1 (qwe.thm4.1): no norm, one layer, one change of basis through every skip"};
  std::string reason = "no theorem covers it: " + why.front();
  for (std::size_t k = 1; k < why.size(); ++k) reason += "; " + why[k];
  return {false, reason};
}

namespace {

// Keeps the final state (N_f's output) of every real sequence, in order.
template <class S>
class FinalStates : public Recorder<S> {
 public:
  explicit FinalStates(std::int64_t sequences) : sequences_(sequences) {}
  bool wants(Site site, int) const override { return site == Site::final; }
  void record(const Activation<S>& a) override {
    const std::int64_t rows = std::min<std::int64_t>(a.B, sequences_ - seen_);  // the rest repeat sequence 0
    states.insert(states.end(), a.data, a.data + rows * a.T * a.width);
    seen_ += rows;
  }
  std::vector<S> states;

 private:
  std::int64_t sequences_, seen_ = 0;
};

struct ModelRun {
  double loss;
  std::vector<float> states;
  Matrix head;  // U (V × d)
};

ModelRun run_model(const Checkpoint& ck, const TokenSequences& data, engine::Backend<float>& backend, int batch) {
  Model<float> model(ck.config, backend);
  model.set_parameters(ck.values);
  FinalStates<float> rec(data.sequences);
  const double loss = evaluate(model, data, batch, {}, &rec).loss;
  std::vector<float> values = ck.values;
  const auto& layout = model.parameters().layout;
  const Tensors t{layout, values};
  return {loss, std::move(rec.states), t.get(ck.config.tied ? "wte" : "lm_head.weight")};
}

// ‖L_b − L_a‖_F / ‖L_a‖_F of the logits L = states · headᵀ, formed in double 512 rows at a time.
template <class S>
double logits_rel_err(const std::vector<S>& states_a, const Matrix& head_a, const std::vector<S>& states_b,
                      const Matrix& head_b) {
  const Eigen::Index d = head_a.cols(), n = Eigen::Index(states_a.size()) / d;
  using Rows = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  double diff = 0, norm = 0;
  for (Eigen::Index r0 = 0; r0 < n; r0 += 512) {
    const Eigen::Index rows = std::min<Eigen::Index>(512, n - r0);
    const Matrix la = Eigen::Map<const Rows>(states_a.data() + r0 * d, rows, d).template cast<double>() * head_a.transpose();
    const Matrix lb = Eigen::Map<const Rows>(states_b.data() + r0 * d, rows, d).template cast<double>() * head_b.transpose();
    diff += (lb - la).squaredNorm(), norm += la.squaredNorm();
  }
  return std::sqrt(diff / norm);
}

FunctionChange change_between(const ModelRun& a, const ModelRun& b) {
  return {logits_rel_err(a.states, a.head, b.states, b.head), a.loss, b.loss};
}

// The model of configuration c and values `values` (double, unrounded) in double on `data`: its final
// states and its head, the forward of Model<double> (`batch` sequences at a time, no loss).
std::pair<std::vector<double>, Matrix> run_in_double(const Config& c, std::vector<double> values,
                                                     const TokenSequences& data, int batch) {
  engine::CpuBackend<double> backend;
  Model<double> model(c, backend);
  model.set_parameters(values);
  FinalStates<double> rec(data.sequences);
  for (std::int64_t s0 = 0; s0 < data.sequences; s0 += batch) {
    const int B = int(std::min<std::int64_t>(batch, data.sequences - s0));
    model.forward(data.ids.data() + s0 * data.length, nullptr, B, data.length, Pass::eval, 0, &rec);
  }
  const auto layout = parameter_layout(c, make_plan(c));
  const TensorsOf<double> t{layout, values};
  return {std::move(rec.states), t.get(c.tied ? "wte" : "lm_head.weight")};
}

}  // namespace

FunctionChange compare_function(const Checkpoint& reference, const Checkpoint& candidate, const TokenSequences& data,
                                engine::Backend<float>& backend, int batch) {
  return change_between(run_model(reference, data, backend, batch), run_model(candidate, data, backend, batch));
}

double exact_budget(double kappa, double u) { return 1e3 * u * kappa; }

std::vector<double> eliminated_in_double(const Checkpoint& source, const std::vector<int>& layers) {
  check_applicable(source.config, layers);
  const std::vector<int> sorted = ascending(layers);
  return eliminated_values<double>(source, eliminated_config(source.config, sorted), *plan_bases(source, sorted, nullptr));
}

double logits_rel_err_in_double(const Checkpoint& source, const Config& config, const std::vector<double>& values,
                                const TokenSequences& data, int batch) {
  const auto [states_a, head_a] =
      run_in_double(source.config, std::vector<double>(source.values.begin(), source.values.end()), data, batch);
  const auto [states_b, head_b] = run_in_double(config, values, data, batch);
  return logits_rel_err(states_a, head_a, states_b, head_b);
}

bool EliminationReport::contradicted() const {
  for (const auto& v : layers)
    if (v.coverage.covered && !v.exact) return true;
  return false;
}

EliminationReport eliminate_and_measure(const Checkpoint& source, const std::vector<int>& layers,
                                        const TokenSequences& data, engine::Backend<float>& backend, int batch,
                                        const std::function<void(std::size_t, std::size_t)>& progress) {
  EliminationReport report;
  report.result = eliminate_queries(source, layers);
  const auto ran = [&] {
    if (progress) progress(report.layers.size() + 1, layers.size() + 1);
  };
  const ModelRun reference = run_model(source, data, backend, batch);
  ran();
  std::vector<int> prefix;
  for (const EliminatedLayer& e : report.result.layers) {
    prefix.push_back(e.layer);
    const Elimination partial = prefix.size() == layers.size() ? report.result : eliminate_queries(source, prefix);
    LayerVerdict v;
    v.layer = e, v.eliminated = prefix;
    v.coverage = coverage(source.config, partial.layers);
    v.change = change_between(reference, run_model(partial.checkpoint, data, backend, batch));
    v.budget = exact_budget(e.kappa, unit_roundoff<float>());
    if (v.coverage.covered) {  // the identity in double too, where float's budget cannot resolve a large κ
      v.budget_double = exact_budget(e.kappa, unit_roundoff<double>());
      v.logits_rel_err_double = logits_rel_err_in_double(source, partial.checkpoint.config,
                                                         eliminated_in_double(source, prefix), data, batch);
    }
    v.exact = v.coverage.covered && v.change.logits_rel_err <= v.budget && v.logits_rel_err_double <= v.budget_double;
    if (v.coverage.covered && !v.exact)
      v.coverage.reason += "; but the measured logits' relative error exceeds the budget: not borne out";
    report.layers.push_back(std::move(v));
    ran();
  }
  return report;
}

results::Value report_value(const EliminationReport& r) {
  using results::Value;
  Value v = Value::object();
  v.set("loss", r.layers.empty() ? 0.0 : r.layers.front().change.loss_reference);
  v.set("untied", r.result.untied);
  Value layers = Value::array();
  for (const LayerVerdict& l : r.layers) {
    Value item = Value::object();
    item.set("layer", l.layer.layer);
    item.set("eliminated", Value::array_of(l.eliminated));
    item.set("exact", l.exact);
    item.set("covered", l.coverage.covered);
    item.set("reason", l.coverage.reason);
    item.set("kappa", l.layer.kappa);
    item.set("logits_rel_err", l.change.logits_rel_err);
    item.set("budget", l.budget);
    item.set("logits_rel_err_double", l.coverage.covered ? results::Value(l.logits_rel_err_double) : results::Value());
    item.set("budget_double", l.coverage.covered ? results::Value(l.budget_double) : results::Value());
    item.set("loss_change", l.change.loss - l.change.loss_reference);
    item.set("loss", l.change.loss);
    item.set("query_bias", l.layer.query_bias);
    layers.push(std::move(item));
  }
  v.set("layers", std::move(layers));
  v.set("model", config_value(r.result.checkpoint.config));
  return v;
}

}  // namespace qkvlab::lm
