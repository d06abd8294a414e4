// The one vocabulary of attention variants: how each layer's queries, keys and
// values are sourced. The language models (lm/), the in-context regression
// models (core/icl, synthetic/icl) and the claims (theory/) all name a variant
// by VariantKind and read what it means from make_plan; no other code decides
// per variant where a head's keys or values come from.
//
// A plan gives, for each layer, which key and value heads of which layers its
// attention uses, and with what weights. Heads here are key/value heads (H_kv
// of them; with MLA, the H_kv slots of width d_c/H_kv of the latent c). Mixing
// happens right after the value projection, before GQA shares a key/value head
// among its query heads (values carry no RoPE), as the ResFormer reference
// does; a layer's own projection produces its first `own_*_heads` heads, and
// the sources index those.
//   keys[g]    the key head g is Σ w·(own key head `head` of layer `layer`)
//   values[g]  the value head g attended by A_n is Σ w·(own value head of layer)
//   direct[g]  added, outside the attention, to the output of every query head
//              reading g (NeuTRENO's λ(V_1 − V_n); empty otherwise)
// An empty source list is a zero head (SkipV0's injected heads). Layers are
// numbered 1 … L in every message and 0 … L−1 in code.
#pragma once

#include <vector>

namespace qkvlab::qkv {

enum class VariantKind {
  vanilla,      // U_n = A_n V_n (the ICL models call it "mha")
  resformer,    // U_n = A_n (α V_n + β V_1)
  svformer,     // U_n = A_n V_1, no W_V in layers ≥ 2
  neutreno,     // U_n = A_n V_n + λ (V_1 − V_n)
  denseformer,  // after block n: X_n ← Σ_{i ≤ n} α_{n,i} X_i (learned)
  skipv1,       // the last ρ·H_kv value heads of layers > k come from layer k (k = 1: SkipV1; k = 0: SkipV0)
  yoco_v,       // layers L/2+1 … L reuse layer L/2's values
  cla_v,        // layer 2k reuses layer 2k−1's values
  skipkv1,      // SkipV1's injection applied to keys as well
  skipv1_yoco,  // layers ≤ L/2 as SkipV1; later layers use layer L/2's keys and SkipV1 values
  q_identity,   // W_Q = I: head h's query is the input's h-th slice; scale 1/(2 sqrt(d_h))
  // ResFormer's ablations (ResFormer paper, Figs. 1, 4, 7, 8, 9); k = source_layer (default 1):
  resformer_neutreno,  // V'_n = α V_n + β V_k, U_n = A_n V'_n + λ (V_k − V'_n) (the released combination)
  resformer_k,         // K_n ← α K_n + β K_k (the residual on the keys instead of the values)
  resformer_q,         // Q_n ← α Q_n + β Q_k (the residual on the queries instead of the values)
  resformer_previous,  // U_n = A_n (α V_n + β V_{n−1}) (the nearest preceding layer)
  resformer_all,       // U_n = (1/n) A_n Σ_{i ≤ n} V_i (every earlier layer, Eq. 5)
  resformer_identity,  // U_n = A_n V_n + 1/(n−1) Σ_{i < n} V_i (the identity mapping, Eq. 6)
  cla_k,               // layer 2k reuses layer 2k−1's keys
  cla_kv,              // layer 2k reuses layer 2k−1's keys and values (CLA)
  resformer_cross,     // U_n = softmax(Q_n [K_n; K_k]ᵀ/√d_h + causal mask of each) [V_n; V_k] (cross-layer attention, Eq. 2)
};

// How SkipV1 fills the injected value heads (SkipV1Former App. C.4); with ρ = ½ and
// H' = H_kv/2 own heads, position H' + j of layer n gets:
enum class Strategy {
  second_half,     // source head H' + j (the default)
  pooling,         // ½ (source head j + source head H' + j)
  dynamic,         // as second_half, except position H' + (n mod H') gets source head n mod H'
  odd_even,        // source head j in odd layers, H' + j in even layers
  plus_resformer,  // second_half, and source head j is also added to own head j (j < H')
};

struct Variant {
  VariantKind kind = VariantKind::vanilla;
  double alpha = 0.5, beta = 0.5;  // ResFormer weights (the λ form V_n + λV_1 is α = 1, β = λ)
  double lambda = 0.4;             // NeuTRENO (resformer-neutreno: the released 0.2, set where the variant is
                                   // chosen: lm/config.hpp set_variant_weights)
  double skip_ratio = 0.5;         // SkipV1 family: share ρ of the value heads taken from the source layer
  int source_layer = 1;            // SkipVk and ResFormer's V_k (1-based); 0 is SkipV0: the injected heads are zero
  Strategy strategy = Strategy::second_half;
};

// The three projections of attention (Query-weight elimination eliminates one).
enum class Projection { query, key, value };

struct Source {
  int layer;  // 0-based
  int head;   // index among that layer's own heads
  double weight;
  bool operator==(const Source&) const = default;
};
using Mix = std::vector<std::vector<Source>>;  // one list of sources per key/value head

// A layer's sources (heads are key/value heads, H_kv of them; with MLA, the H_kv slots of width
// d_c/H_kv of the latent c; queries have H heads). Mixing happens right after the projection,
// before GQA shares a key/value head among its query heads (values carry no RoPE), as the
// ResFormer reference does; a layer's own projection produces its first `own_*_heads` heads, and
// the sources index those.
//   keys[g]    the key head g is Σ w·(own key head `head` of layer `layer`)
//   values[g]  the value head g attended by A_n is Σ w·(own value head of layer)
//   direct[g]  added, outside the attention, to the output of every query head
//              reading g (NeuTRENO's λ(V_1 − V_n); empty otherwise)
//   queries[h] the query head h is Σ w·(query head `head` of layer `layer`, as that layer's
//              W_Q and RoPE give it); the layer's own heads unless a variant mixes them
// An empty source list is a zero head (SkipV0's injected heads).
// segments > 1 (cross-layer attention, ResFormer Eq. 2): keys and values hold segments·H_kv heads,
// segment s being heads s·H_kv … (s+1)·H_kv − 1, and the queries attend over every segment's keys
// at once, causal within each (engine/kernel_types.hpp's AttentionShape::segments); direct is H_kv.
struct LayerPlan {
  bool identity_query = false;  // Q-identity: q = the normalized input, no W_Q
  int own_key_heads = 0;        // heads of W_K (0: every key head comes from another layer)
  int own_value_heads = 0;      // heads of W_V (MLA: latent slots of W_DKV)
  int segments = 1;             // key/value segments attended jointly
  Mix keys, values, direct, queries;
  bool dense = false;           // DenseFormer: the block output is mixed with X_0 … X_n
};

// The plan of `variant` over `layers` layers of `heads` query heads and `kv_heads` key/value
// heads (layer 1 is always standard). The sizes must be valid for the variant, as lm::validate
// checks (whole heads for ρ, a source layer within L, …); identity_query is set for the
// q-identity variant only.
std::vector<LayerPlan> make_plan(const Variant& variant, int layers, int heads, int kv_heads);

// True when mix[g] is exactly {own head g of `layer`, weight 1} for every g
// (the layer's own heads used as they are: no mixing buffer needed).
bool is_own(const Mix& mix, int layer, int own_heads);

// True when every mix[g] is one source head of weight 1 (each head taken as it is from some
// layer, no arithmetic: SkipV1's own and layer-1 heads, SVFormer's layer-1 heads), so an
// attention can read each where it lives.
bool selects(const Mix& mix);

// True when some source of mix[g] is a head of layer `layer`.
bool reads_layer(const Mix& mix, int g, int layer);

}  // namespace qkvlab::qkv
