// The activation record: what a forward pass keeps, named as TransformerLens
// users know them. The caller says which sites of which layers it wants; the
// model hands each one over as soon as it is computed (layer by layer, so a
// long sequence's patterns never all sit in memory at once), as host memory
// valid only during the call.
//
//   site        layout of Activation::data (row-major)       what
//   resid_pre   (B, T, 1, d)                                 block input (layer 1: the embedding output)
//   q           (B, T, H, d_k)                               queries after RoPE (MLA: [q_C, q_R])
//   k           (B, T, H_kv, d_k)                            keys after RoPE, after the variant's reuse
//   v           (B, T, H_kv, d_v)                            values the heads attend to, after mixing
//   pattern     (B, H, T, T)                                 attention probabilities (rows sum to 1,
//                                                            zero above the diagonal)
//   z           (B, T, H, d_v)                               head outputs A_h v_h (+ NeuTRENO's term)
//   attn_out    (B, T, 1, d)                                 attention sublayer output
//   mlp_out     (B, T, 1, d)                                 MLP sublayer output
//   resid_post  (B, T, 1, d)                                 block output (after DenseFormer's mix)
//   final       (B, T, 1, d)                                 N_f(resid_post of layer L); layer = L
// Instead of `pattern`, a recorder may take each layer's patterns reduced inside the attention
// (PatternReduction below: what entropy and first-token importance need), a block of queries at a time,
// and instead of a token-major site its reductions computed where the model runs (StateReduction:
// what token similarity, the value spectrum and the first-token norms need), so that only O(d) per
// sequence (the Gram matrix: d × d) reaches the host.
// Layers are 0-based here (layer ℓ is the paper's ℓ + 1).
#pragma once

#include <string>

#include "engine/kernel_types.hpp"

namespace qkvlab::lm {

enum class Site { resid_pre, q, k, v, pattern, z, attn_out, mlp_out, resid_post, final };
inline constexpr int kSites = 10;

std::string to_string(Site site);
Site parse_site(const std::string& name);  // UsageError naming the known sites

template <class S>
struct Activation {
  Site site;
  int layer;
  const S* data;
  int B, T, heads, width;  // pattern: (B, heads = H, T, width = T)
};

// A layer's patterns reduced inside the attention instead of kept (engine/kernel_types.hpp's
// PatternSums, host memory valid during the call): columns, mass and entropy, each (B, H, T); entropy
// null unless the recorder asked for it (pattern_entropy).
struct PatternReduction {
  int layer;
  const double *columns, *mass, *entropy;
  int B, T, heads;
};

// Which reductions of a token-major site a recorder takes (engine/backend.hpp's state_rows, state_gram),
// each per sequence: the rows' norms (heads side by side), the unit rows' sum and the count of non-zero
// rows (heads combined by `combine`), the smaller Gram matrix (1/T) X Xᵀ or (1/T) Xᵀ X (heads side by side).
struct StateRequest {
  bool norms = false, unit = false, gram = false;
  engine::HeadCombination combine = engine::HeadCombination::concat;  // of the unit rows
  bool any() const { return norms || unit || gram; }
};
// A site's reductions (host memory valid during the call), null unless requested: norms (B, T), unit
// (B, columns), nonzero (B), gram (B, m, m) with m = min(T, heads·width).
struct StateReduction {
  Site site;
  int layer;
  const double *norms, *unit, *nonzero, *gram;
  int B, T, columns, m;
};

template <class S>
class Recorder {
 public:
  virtual ~Recorder() = default;
  virtual bool wants(Site site, int layer) const = 0;
  virtual void record(const Activation<S>& activation) = 0;
  // > 0: the recorder takes layer l's patterns as reductions (record_sums), computed that many
  // queries at a time so that no layer's whole pattern is formed; 0: as the `pattern` site, if it
  // wants it. A recorder may not want both.
  virtual int pattern_block(int /*layer*/) const { return 0; }
  virtual bool pattern_entropy(int /*layer*/) const { return false; }  // the rows' entropies too
  virtual void record_sums(const PatternReduction& /*sums*/) {}
  // Reductions of a token-major site (not `pattern`), besides or instead of its values (wants).
  virtual StateRequest state_request(Site /*site*/, int /*layer*/) const { return {}; }
  virtual void record_state(const StateReduction& /*reduction*/) {}
};

}  // namespace qkvlab::lm
