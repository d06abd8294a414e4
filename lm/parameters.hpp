// The tensors of a language model, named and shaped from its configuration
// and plan (lm/plan.hpp), and their initialization.
//
// Names (layers 0-based as in Hugging Face files), weights of linear maps
// stored (in, out) — the row-vector W of X W:
//   wte [V, d]   wpe [P, d] (gpt2)
//   h.i.ln_1.weight [d] (.bias: gpt2 with bias)       every ln_*: absent without norms
//   h.i.attn.q.weight [d, H·d_h]            absent in a Q-identity layer
//   h.i.attn.k.weight [d, K_i·d_h]          K_i = the plan's own key heads (absent when 0)
//   h.i.attn.v.weight [d, V_i·d_h]          V_i = the plan's own value heads (absent when 0)
//   MLA instead of k and v: h.i.attn.dkv.weight [d, V_i·d_c/H_kv], h.i.attn.uk.weight [d_c, H·d_h],
//       h.i.attn.uv.weight [d_c, H·d_h], h.i.attn.kr.weight [d, d_R], h.i.attn.qr.weight [d, H·d_R]
//   h.i.attn.o.weight [H·d_h, d]            (.bias on q, k, v, o when `bias`)
//   h.i.ln_2.weight [d] (.bias)
//   gpt2:  h.i.mlp.fc.weight [d, r], h.i.mlp.proj.weight [r, d] (.bias when `bias`)
//   llama: h.i.mlp.gate.weight [d, r], h.i.mlp.up.weight [d, r], h.i.mlp.down.weight [r, d]
//   DenseFormer: h.i.dwa [i + 2], the weights α_{i+1, j} of X_{i+1} = Σ_j α_{i+1,j} Y_j
//   ln_f.weight [d] (.bias)    lm_head.weight [V, d] when untied
// Weight decay applies to the 2-D tensors only.
//
// Initialization (GPT-2's): every matrix N(0, 0.02²), the residual output
// projections (attn.o, mlp.proj, mlp.down) N(0, (0.02/sqrt(2L))²); biases 0,
// gains 1, DenseFormer's α_{n,n} = 1 and the rest 0. Each tensor is drawn from
// its own stream Rng(seed, "lm/init/" + name), in double, then rounded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/parameters.hpp"
#include "lm/plan.hpp"

namespace qkvlab::lm {

engine::ParameterLayout parameter_layout(const Config& config, const std::vector<LayerPlan>& plan);

// The initial values of every tensor of the layout, in its order and offsets
// (host memory, layout.total() entries).
template <class S>
std::vector<S> initial_values(const Config& config, const engine::ParameterLayout& layout, std::uint64_t seed);

// The name of tensor `what` of layer `layer`, e.g. layer_tensor(3, "attn.q.weight").
std::string layer_tensor(int layer, const std::string& what);

}  // namespace qkvlab::lm
