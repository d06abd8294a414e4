// ResFormer's efficient cross-layer attention (§3.2; docs/math/extensions.md): Eq. 3 ⇒
// Eq. 4 (resformer.eq4) and its n-layer form Eq. 5 (resformer.eq5), exact when every layer's keys
// are the current layer's. One head of width d (Eq. 1's √d), row vectors; Q, K, V drawn N(0, 1)
// (logits of order 1). What is measured is theory/attention_freedoms.hpp's cross_layer_deviation.
#include "theory/attention_freedoms.hpp"
#include "theory/claims.hpp"

#include <stdexcept>
#include <string>

namespace qkvlab::theory {
namespace {

// m layers' values with the current layer's keys K_n in every slot; the controls: Eq. 2 (layer
// i's own keys), and, under the causal mask, one causal mask over the m·n concatenated positions.
template <class S> Outcome cross_layer_outcome(const SweepPoint& c, Rng& rng, int layers) {
  const Mat<S> Q = draw<S>(rng, c.seq, c.d, 1.0), K_n = draw<S>(rng, c.seq, c.d, 1.0);
  std::vector<Mat<S>> values, own_keys;
  for (int i = 0; i < layers; ++i) values.push_back(draw<S>(rng, c.seq, c.d, 1.0));
  for (int i = 0; i + 1 < layers; ++i) own_keys.push_back(draw<S>(rng, c.seq, c.d, 1.0));
  own_keys.push_back(K_n);
  const std::vector<Mat<S>> shared_keys(std::size_t(layers), K_n);
  Outcome o;
  o.rel_err = cross_layer_deviation<S>(Q, K_n, shared_keys, values, c.mask).rel_err;
  o.controls.push_back(control_by_error("earlier layers' own keys K_m != K_n (Eq. 2)",
                                        cross_layer_deviation<S>(Q, K_n, own_keys, values, c.mask).rel_err));
  if (c.mask == Mask::causal) {
    using std::sqrt;
    Mat<S> logits(c.seq, Eigen::Index(layers) * c.seq), stacked(Eigen::Index(layers) * c.seq, c.d);
    for (int i = 0; i < layers; ++i) {
      logits.middleCols(Eigen::Index(i) * c.seq, c.seq) = Q * K_n.transpose() / S(sqrt(S(c.d)));
      stacked.middleRows(Eigen::Index(i) * c.seq, c.seq) = values[std::size_t(i)];
    }
    const Mat<S> one_sequence = softmax_rows<S>(logits, Mask::causal) * stacked;  // sees layer 1 only
    const Mat<S> masked_alike = cross_layer_attention<S>(Q, shared_keys, values, Mask::causal, S(sqrt(S(c.d))));
    o.controls.push_back(
        control_by_error("one causal mask over the concatenated positions", rel_err<S>(masked_alike, one_sequence)));
  }
  return o;
}

struct Eq4 {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) { return cross_layer_outcome<S>(c, rng, 2); }
};

struct Eq5 {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    if (c.layers < 2) throw std::invalid_argument("Eq. 5 combines n >= 2 layers, got L = " + std::to_string(c.layers));
    return cross_layer_outcome<S>(c, rng, c.layers);
  }
};

}  // namespace

void register_resformer_claims(std::vector<Claim>& claims) {
  claims.push_back({.id = "resformer.eq4",
                    .statement = "softmax(Q_n [K_n; K_n]^T/sqrt(d)) [V_n; V_m] = 1/2 A_n (V_n + V_m), both key "
                                 "copies masked alike (Eq. 3 => Eq. 4)",
                    .kind = Kind::identity,
                    .dims = Dims{.heads = false},
                    .budget = default_budget,
                    .run = dispatch<Eq4>()});
  claims.push_back({.id = "resformer.eq5",
                    .statement = "softmax(Q_n [K_n; ...; K_n]^T/sqrt(d)) [V_1; ...; V_n] = (1/n) A_n sum_i V_i over "
                                 "n layers (Eq. 5, exact with every key K_n)",
                    .kind = Kind::identity,
                    .dims = Dims{.heads = false, .layers = true, .min_layers = 2},
                    .budget = default_budget,
                    .defaults = DefaultSweep{.layers = {3, 6}},
                    .run = dispatch<Eq5>()});
}

}  // namespace qkvlab::theory
