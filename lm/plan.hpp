// A variant as data: for each layer, which key and value heads of which
// layers its attention uses, and with what weights. The model (lm/model.hpp)
// reads only this description; it has no per-variant code.
//
// Heads here are key/value heads (H_kv of them; with MLA, the H_kv slots of
// width d_c/H_kv of the latent c). Mixing happens right after the value
// projection, before GQA shares a key/value head among its query heads (values
// carry no RoPE), as the ResFormer reference does; a layer's own projection
// produces its first `own_*_heads` heads, and the sources index those.
//   keys[g]    the key head g is Σ w·(own key head `head` of layer `layer`)
//   values[g]  the value head g attended by A_n is Σ w·(own value head of layer)
//   direct[g]  added, outside the attention, to the output of every query head
//              reading g (NeuTRENO's λ(V_1 − V_n); empty otherwise)
//   queries[h] the query head h is Σ w·(query head `head` of layer `layer`, as that layer's
//              W_Q and RoPE give it); H lists, the layer's own heads unless a variant mixes them
// An empty source list is a zero head (SkipV0's injected heads).
#pragma once

#include <string>
#include <vector>

#include "lm/config.hpp"

namespace qkvlab::lm {

struct Source {
  int layer;  // 0-based
  int head;   // index among that layer's own heads
  double weight;
  bool operator==(const Source&) const = default;
};
using Mix = std::vector<std::vector<Source>>;  // one list of sources per key/value head

struct LayerPlan {
  bool identity_query = false;  // Q-identity: q = the normalized input, no W_Q (Config::identity_query)
  int own_key_heads = 0;        // heads of W_K (0: every key head comes from another layer)
  int own_value_heads = 0;      // heads of W_V (MLA: latent slots of W_DKV)
  Mix keys, values, direct, queries;
  bool dense = false;           // DenseFormer: the block output is mixed with X_0 … X_n
};

std::vector<LayerPlan> make_plan(const Config& config);

// True when mix[g] is exactly {own head g of `layer`, weight 1} for every g
// (the layer's own heads used as they are: no mixing buffer needed).
bool is_own(const Mix& mix, int layer, int own_heads);

// True when every mix[g] is one source head of weight 1 (each head taken as it is from some
// layer, no arithmetic: SkipV1's own and layer-1 heads, SVFormer's layer-1 heads), so an
// attention can read each where it lives.
bool selects(const Mix& mix);

// One line per layer, e.g. "layer 3: keys own 0-3; values 0-1 own, 2-3 from layer 1".
std::string describe(const std::vector<LayerPlan>& plan);

}  // namespace qkvlab::lm
