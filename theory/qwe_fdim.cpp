// qwe.fdim.*: what W_Q = I costs, as functional dimension (docs/math/fdim.md; fdim/ counts).
//
// Each claim states the dimension of function space that W_Q = I loses against free queries in one
// setting of Query-weight elimination (linear embedding and readout, d = 4, H = 2, d_h = 2, L = 2,
// 3 positions). Its check counts the rank of the Jacobian of the identity-query network (fdim/, the
// float rank, saturated in the inputs) and compares the measured deficiency P − rank with the
// predicted one, P − (P_free − g_free − lost): the free network's rank by the theory's gauges
// (fdim/gauges.hpp: Lemma 3.1 per head, the streams' bases, the norms' groups) minus the stated
// loss. Counts are exact integers: the check passes when they are equal (budget 0, unit one
// dimension). A control is a configuration outside the claim's hypothesis, measured against the
// claim's own stated loss, which the same rule must reject.
#include "fdim/count.hpp"
#include "theory/claims.hpp"

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace qkvlab::theory {
namespace {

constexpr int width = 4, heads = 2, head_dim = 2, depth = 2, positions = 3;

// The claims' network: linear ends of width d, no biases, no norm, no MLP, free queries.
fdim::Network network(fdim::Skips skips, Rng& rng) {
  fdim::Network c;
  c.layers = depth;
  c.d = width;
  c.heads = heads;
  c.head_dim = head_dim;
  c.seq = positions;
  c.skips = skips;
  c.embed = fdim::Embed::linear;
  c.din = width;
  c.readout = fdim::Readout::linear;
  c.dout = width;
  c.seed = rng.next_u64();
  return c;
}

std::vector<int> every_layer() {
  std::vector<int> all;
  for (int l = 1; l <= depth; ++l) all.push_back(l);
  return all;
}

// The identity-query network's measured deficiency and the one its stated loss predicts.
struct Measured {
  long long deficiency = 0, predicted = 0, lost = 0;
  std::string note;
};

Measured measure(fdim::Network c, std::vector<int> identity_layers, long long stated_loss) {
  c.inputs = fdim::saturating_inputs(c);  // of the free network, the larger
  c.identity_layers = std::move(identity_layers);
  const fdim::Count n = fdim::count(c, false);
  if (!n.saturated)
    throw std::runtime_error("the rank did not saturate in " + std::to_string(c.inputs) + " inputs");
  fdim::Network free = c;
  free.identity_layers.clear();
  const long long free_parameters = fdim::layout(free).size, free_gauges = fdim::predicted_deficiency(free);
  Measured m;
  m.deficiency = n.parameters - n.rank.rank;
  m.predicted = n.parameters - (free_parameters - free_gauges - stated_loss);
  m.lost = *n.free_rank - n.rank.rank;
  m.note = fmt("P = %g, rank %g (free: %g of %g, gauges %g), ", double(n.parameters), double(n.rank.rank),
               double(*n.free_rank), double(free_parameters), double(free_gauges)) +
           fmt("lost %g, gap s_r/s_r+1 = %.3g, %g inputs", double(m.lost), n.rank.gap, double(c.inputs));
  return m;
}

Outcome outcome(const Measured& m) {
  Outcome o;
  o.statistic = Statistic{double(m.deficiency), double(m.predicted), 1.0};
  o.rel_err = double(std::abs(m.deficiency - m.predicted));
  o.note = m.note;
  return o;
}

ControlOutcome control(std::string name, const Measured& m) {
  return control_by_rejection(std::move(name), double(m.deficiency), double(m.predicted), 1.0, 0.0);
}

long long residual_basis_loss() { return (depth - 1) * (width * width - heads * head_dim * head_dim); }

// Through LayerNorm: W_Q = I in one layer removes d² parameters but only H·d_h² (its W_K gauge) + d
// (LayerNorm's zero mean, seen by W_Q's columns) + dim O(d − 1) − H·dim O(d_h − 1) (the stream's O(d)
// fixing 1 shrinks to block-diagonal) gauges.
long long layernorm_one_layer_loss() {
  return width * width - heads * head_dim * head_dim - width - (width - 1) * (width - 2) / 2 +
         heads * (head_dim - 1) * (head_dim - 2) / 2;
}

Outcome no_skips(const SweepPoint&, Rng& rng) {
  Outcome o = outcome(measure(network(fdim::Skips::none, rng), every_layer(), 0));
  o.controls.push_back(control("both skips (outside the hypothesis): lost 0 predicted",
                               measure(network(fdim::Skips::both, rng), every_layer(), 0)));
  return o;
}

Outcome both_skips_one_layer(const SweepPoint&, Rng& rng) {
  Outcome o = outcome(measure(network(fdim::Skips::both, rng), {1}, 0));
  fdim::Network normed = network(fdim::Skips::both, rng);
  normed.norm = fdim::Norm::layernorm;
  o.controls.push_back(control("pre-LayerNorm (outside the hypothesis): lost 0 predicted", measure(normed, {1}, 0)));
  return o;
}

Outcome both_skips_every_layer(const SweepPoint&, Rng& rng) {
  Outcome o = outcome(measure(network(fdim::Skips::both, rng), every_layer(), residual_basis_loss()));
  o.controls.push_back(control("no skips (outside the hypothesis): the residual basis's loss predicted",
                               measure(network(fdim::Skips::none, rng), every_layer(), residual_basis_loss())));
  return o;
}

Outcome layernorm_one_layer(const SweepPoint&, Rng& rng) {
  fdim::Network c = network(fdim::Skips::both, rng);
  c.norm = fdim::Norm::layernorm;
  Outcome o = outcome(measure(c, {1}, layernorm_one_layer_loss()));
  o.controls.push_back(control("no LayerNorm (Theorem 4.1's setting): LayerNorm's loss predicted",
                               measure(network(fdim::Skips::both, rng), {1}, layernorm_one_layer_loss())));
  return o;
}

fdim::Network gelu(fdim::Network c) {
  c.mlp = fdim::Mlp::gelu;
  c.ffn = 6;
  return c;
}

Outcome attention_skip_mlp(const SweepPoint&, Rng& rng) {
  Outcome o = outcome(measure(gelu(network(fdim::Skips::attention, rng)), every_layer(), 0));
  o.controls.push_back(control("both skips (outside Theorem 4.2's hypothesis): lost 0 predicted",
                               measure(gelu(network(fdim::Skips::both, rng)), every_layer(), 0)));
  return o;
}

// The counts are exact integers at every precision's draw: run once, in double.
std::function<Outcome(const SweepPoint&, Precision, Rng&)> counted(Outcome (*check)(const SweepPoint&, Rng&)) {
  return [check](const SweepPoint& c, Precision, Rng& rng) { return check(c, rng); };
}

}  // namespace

void register_fdim_claims(std::vector<Claim>& claims) {
  constexpr Dims fixed{.heads = false, .layers = false, .seq = false, .mask = false, .width = false};
  const DefaultSweep at{.d = {width}};
  const std::string ends = " (linear embedding and readout, d = 4, H = 2, d_h = 2, L = 2; functional dimension)";
  claims.push_back({.id = "qwe.fdim.noskip",
                    .statement = "no skips: W_Q = I in every layer loses nothing" + ends,
                    .kind = Kind::count,
                    .dims = fixed,
                    .budget = 0,
                    .defaults = at,
                    .run = counted(no_skips)});
  claims.push_back({.id = "qwe.fdim.one",
                    .statement = "both skips, no norm: W_Q = I in one layer loses nothing (Theorem 4.1)" + ends,
                    .kind = Kind::count,
                    .dims = fixed,
                    .budget = 0,
                    .defaults = at,
                    .run = counted(both_skips_one_layer)});
  claims.push_back({.id = "qwe.fdim.every",
                    .statement = "both skips, no norm: W_Q = I in every layer loses (L-1)(d^2 - H d_h^2) = 8 "
                                 "(Remark 1)" + ends,
                    .kind = Kind::count,
                    .dims = fixed,
                    .budget = 0,
                    .defaults = at,
                    .run = counted(both_skips_every_layer)});
  claims.push_back({.id = "qwe.fdim.layernorm",
                    .statement = "both skips, pre-LayerNorm: W_Q = I in one layer loses d^2 - H d_h^2 - d - "
                                 "(d-1)(d-2)/2 + H(d_h-1)(d_h-2)/2 = 1" + ends,
                    .kind = Kind::count,
                    .dims = fixed,
                    .budget = 0,
                    .defaults = at,
                    .run = counted(layernorm_one_layer)});
  claims.push_back({.id = "qwe.fdim.mlp",
                    .statement = "attention skip only, GELU MLP (width 6): W_Q = I in every layer loses nothing "
                                 "(Theorem 4.2)" +
                                 ends,
                    .kind = Kind::count,
                    .dims = fixed,
                    .budget = 0,
                    .defaults = at,
                    .run = counted(attention_skip_mlp)});
}

}  // namespace qkvlab::theory
