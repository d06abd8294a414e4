#include "fdim/count.hpp"

#include <initializer_list>
#include <utility>

namespace qkvlab::fdim {

long long predicted_deficiency(const Count& n) {
  long long s = 0;
  for (const Term& t : n.predicted) s += t.dimension;
  return s;
}

namespace {

using results::Value;

Value object(std::initializer_list<std::pair<const char*, Value>> fields) {
  Value v = Value::object();
  for (const auto& [k, x] : fields) v.set(k, x);
  return v;
}

// The network as counted: every field always present (their names are the report's contract), null
// where the part it sizes or shapes is absent (the heads without attention, --ffn without an MLP in
// a block, --vocab, --din and --dout without their ends, --skip-rank unless low-rank, --norm-eps
// unless LayerNorm or RMSNorm, the blocks' mixer and skips at --layers 0).
Value config_value(const Network& c) {
  const auto when = [](bool applies, Value v) { return applies ? v : Value(); };
  const bool blocks = c.layers > 0, attention = blocks && c.attention();
  const bool eps = c.norm == Norm::layernorm || c.norm == Norm::rmsnorm;
  return object({{"layers", c.layers}, {"d", c.d}, {"heads", when(attention, c.heads)},
                 {"head_dim", when(attention, c.head_dim)}, {"seq", c.seq}, {"inputs", c.inputs},
                 {"mixer", when(blocks, mixer_name(c.mixer))}, {"skips", when(blocks, skips_name(c.skips))},
                 {"skip_kind", when(blocks, skip_kind_name(c.skip_kind))},
                 {"skip_rank", when(blocks && c.skip_kind == SkipKind::lowrank, c.skip_rank)},
                 {"norm", norm_name(c.norm)}, {"mlp", mlp_name(c.mlp)},
                 {"ffn", when(blocks && c.mlp != Mlp::none, c.ffn)}, {"embed", embed_name(c.embed)},
                 {"vocab", when(c.embed == Embed::tokens, c.vocab)}, {"din", when(c.embed == Embed::linear, c.din)},
                 {"pos_emb", c.pos_emb}, {"readout", readout_name(c.readout)},
                 {"dout", when(c.readout == Readout::linear, c.dout)}, {"bias", c.bias}, {"norm_gain", c.norm_gain},
                 {"norm_bias", c.norm_bias}, {"causal", c.causal},
                 {"query", c.identity_layers.empty() ? "free" : "identity"},
                 {"query_layers", Value::array_of(c.identity_layers)}, {"norm_eps", when(eps, c.norm_eps)},
                 {"seed", std::uint64_t(c.seed)}});
}

Value bound_value(const Bound& b) {
  Value v = object({{"value", std::int64_t(b.value)}, {"holds", b.holds}, {"method", b.method}});
  if (!b.reason.empty()) v.set("reason", b.reason);
  return v;
}

}  // namespace

Value count_value(const Count& n) {
  const long long deficiency = n.parameters - n.rank.rank, predicted = predicted_deficiency(n);
  Value formula = Value::array();
  for (const Term& t : n.predicted)
    formula.push(object({{"term", t.name}, {"dimension", std::int64_t(t.dimension)}, {"constructed", t.constructed}}));
  Value sat = Value::array();
  for (const auto& [k, r] : n.saturation) sat.push(object({{"inputs", k}, {"rank", r}}));
  Value v = object({{"parameters", std::int64_t(n.parameters)}, {"outputs", std::int64_t(n.outputs)},
                    {"rank", n.rank.rank}, {"deficiency", std::int64_t(deficiency)},
                    {"predicted_deficiency", std::int64_t(predicted)}, {"predicted_formula", formula},
                    {"difference", std::int64_t(deficiency - predicted)}});
  if (n.free_rank)
    v.set("lost_vs_free", object({{"value", std::int64_t(*n.free_rank - n.rank.rank)},
                                  {"free_rank", std::int64_t(*n.free_rank)}, {"free_certified", n.free_certified}}));
  v.set("certified", n.certified);
  v.set("lower_bound", bound_value(n.lower));
  v.set("upper_bound", bound_value(n.upper));
  v.set("gauges_verified", std::int64_t(n.gauges_verified));
  v.set("gauge_residual", n.gauge_residual);
  v.set("gap", object({{"s_r_over_s_r1", n.rank.gap}, {"s_r_over_s_1", n.rank.relative},
                       {"s_r_over_tolerance", n.rank.over_tolerance},
                       {"tolerance", n.rank.tolerance},
                       {"singular_values_around_cut", Value::array_of(n.rank.around_cut)}}));
  v.set("saturation", sat);
  v.set("saturated", n.saturated);
  v.set("config", config_value(n.config));
  v.set("seconds", object({{"jacobian", n.seconds.jacobian}, {"ranks", n.seconds.ranks},
                           {"lower_bound", n.seconds.lower}, {"upper_bound", n.seconds.upper}}));
  return v;
}

}  // namespace qkvlab::fdim
