// The checkpoint forms of the claims: each measures, at the working precision S,
// an identity of a paper on a model's own weights (promoted from float) and the
// activations that reach the layer, with the controls of its random-weight form
// (theory/). Row-vector convention for attention, column vectors for the norms.
//
// Inputs of layer ℓ's attention: X̂ = N_1(resid_pre), the layer's own norm (ε,
// gain, bias) evaluated at S, augmented with a column of ones so that a bias is
// the last row of its weight ([W; b]). Per query head h (key/value head
// g = h / (H/H_kv) under GQA): Q_h = X̂ W̃_Q^h, K_g = X̂ W̃_K^g, V_g = X̂ W̃_V^g, RoPE on
// Q_h and K_g (Llama: angles t·ω_i computed at S from the model's frequencies), logits
// Q_h K_gᵀ/s with s = sqrt(d_h), causal softmax, head output A_h V_g W_O^h. An identity
// of attention weights is compared on the causal logits and on the outputs: the
// logits are what the outputs see of W_Q and W_K, and unlike the outputs they do
// not flatten when the scores are small (a model near its initialization), so the
// controls are measured there.
#pragma once

#include "core/rng.hpp"
#include "theory/claim.hpp"
#include "theory_lm/model_data.hpp"

namespace qkvlab::theory_lm {

struct CheckpointData {
  ModelWeights weights;
  Activations activations;
};

// qwe.lemma3.1 on head h's pair: (W_Q^h M, W_K^g M⁻ᵀ) leaves the logits and output
// unchanged (qk), or (W_V^g M, M⁻¹ W_O^h) the output (!qk). M ∈ GL(d_h) Gaussian; under
// RoPE, for the (W_Q, W_K) pair, M is drawn in the commutant of the rotations: a 2×2
// block a I + b J on each frequency pair (i, i + d_h/2). κ = cond₂(M).
// Controls: M on W_Q (W_V) only; a near-singular M detected; RoPE: a generic M.
template <class S> theory::Outcome head_reparametrization(const CheckpointData& data, int layer, int head, bool qk, Rng& rng);

// qwe.prop4.1 on head h: the logits depend on W_Q, W_K only through W_QK = W̃_Q^h W̃_K^gᵀ
// (RoPE: W̃_Q^h R_{t−s} W̃_K^gᵀ, one matrix per offset t − s) and the output on W_V, W_O
// only through W_VO = W̃_V^g W_O^h. κ = 1. Controls: W_K W_Qᵀ in place of W_Q W_Kᵀ;
// W_QK summed over the layer's heads (H > 1, no RoPE); RoPE: the rotation left out.
template <class S> theory::Outcome two_matrix_head(const CheckpointData& data, int layer, int head, Rng& rng);

// qwe.prop4.2 on a layer: SA(X̂; W_Q B, W_K B⁻ᵀ, W_V) = SA(X̂; W) with B block-diagonal
// over the key heads, one block M_g per key head shared by the query heads of its group
// (GQA), M_g in the rotations' commutant under RoPE. κ = cond₂(B). Controls: B on W_Q only;
// a full B (H = H_kv > 1); a different block for each query head of a group (GQA);
// generic blocks (RoPE).
template <class S> theory::Outcome block_diagonal_freedom(const CheckpointData& data, int layer, Rng& rng);
// qwe.freedom.vo on layer ℓ: its attention output unchanged by W_V^g ↦ W_V^g N_g, W_O^h ↦ N_g(h)⁻¹ W_O^h
// (core/head_freedoms.hpp's with_vo_freedom, core/grouped_attention.hpp's grouped_attention).
// Controls: a full N on W_V only; N_g⁻ᵀ in place of N_g⁻¹ on W_O. (A full N with N⁻¹ on W_O is no
// control here: where the heads attend alike, as nearly uniform models do, it keeps the output too.)
template <class S> theory::Outcome value_freedom(const CheckpointData& data, int layer, Rng& rng);
// resformer.eq4 on layer n ≥ 2 (0-based n ≥ 1), every head: Eq. 3 with K_1 = K_n, i.e.
// softmax(q_n [K_n; K_n]ᵀ/√d_h)[V_1; V_n], equals (1/2) A_n (V_1 + V_n), with layer 1's values V_1 and
// the layers' own queries, keys and values (theory/attention_freedoms.hpp's cross_layer_deviation).
// Control: A_n V_n (layer 1's values left out), the smallest rel_err over heads. (Layer 1's own keys
// in place of K_n, Eq. 2, is no control: where attention is nearly uniform Eq. 2 ≈ Eq. 4.)
template <class S> theory::Outcome value_residual_average(const CheckpointData& data, int n, Rng& rng);

// The norms, at the inputs that reach them: layer ℓ's ln_1 (attention) or ln_2 (MLP), or
// the final norm (layer = L), with the model's ε, and one more point: the random-weight form's
// probe at 1 − ‖A N(x)‖²/d = 1e-4 along A's top direction, which the controls of norm 1.5 must
// push out of the image. T a Gaussian change of basis of the residual stream.
enum class NormSite { attention, mlp, final };
// qwe.lemma8.2: N(f(x)) = A N(x) on the model's activations and ε (LayerNorm).
template <class S> theory::Outcome norm_semi_conjugacy(const CheckpointData& data, int layer, NormSite site, Rng& rng);
// qwe.thm8.3: with the model's gain G, W the weight that reads the norm's output (W_Q, W_K, W_V
// stacked; the MLP's first layer(s); the head U), and the reduced model's gain G̃ = exp(0.3 g),
// g ~ N(0, 1) (a G̃ = G would leave the control "W' without G̃⁻¹" nothing to break where G ≈ I).
template <class S> theory::Outcome norm_change_of_basis(const CheckpointData& data, int layer, NormSite site, Rng& rng);
// qwe.remark5 (RMSNorm half): R(f(x)) = A R(x), A = T/‖T‖₂, on the model's activations and ε.
template <class S> theory::Outcome rms_norm_semi_conjugacy(const CheckpointData& data, int layer, NormSite site, Rng& rng);

// Instantiated for every scalar of the ladder in checks.cpp.

}  // namespace qkvlab::theory_lm
