// The configuration of a decoder-only language model: its family (GPT-2 or
// Llama), sizes, and architecture variant. Row-vector convention throughout
// (X ∈ R^{T×d}, projections X W).
//
// Families (pre-norm blocks R ← R + Attn(N1(R)), R ← R + MLP(N2(R)); after the
// last block a final norm, logits = N_f(R) U, U = Eᵀ when tied):
//   gpt2   learned positions, LayerNorm (gain, and bias when `bias`), MLP d → r → d
//          with GELU (tanh form, Hugging Face's gelu_new, or the exact erf form),
//          biases on every linear map when `bias`, tied head by default
//   llama  RoPE on queries and keys (Hugging Face's rotate_half), RMSNorm (gain),
//          SwiGLU MLP down(silu(gate x) ⊙ up x), no biases unless `bias`, untied head
//          by default, grouped-query attention (kv_heads ≤ heads)
// Without norms (`norm` false, --norm none: Query-weight elimination's
// LayerNorm-free setting) N1, N2 and N_f are the identity, in both families.
// Attention scores are scaled by 1/sqrt(d_h) (a Q-identity layer: 1/(2 sqrt(d_h)),
// and 1/sqrt(d_h + d_R) with MLA's decoupled rotary part).
//
// The variants (layer 1 is always standard; layers are numbered 1 … L here and
// in every message, 0 … L−1 in code) are data: lm/plan.hpp turns a Config into,
// per layer, which key and value heads of which layers it attends with, and with
// what weights; docs/lm.md states each variant.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/kernel_types.hpp"
#include "engine/rope_frequencies.hpp"

namespace qkvlab::lm {

using engine::GeluForm;

enum class Family { gpt2, llama };

enum class VariantKind {
  vanilla,      // U_n = A_n V_n
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
  double lambda = 0.4;             // NeuTRENO (resformer-neutreno: the released 0.2, set by the command line)
  double skip_ratio = 0.5;         // SkipV1 family: share ρ of the value heads taken from the source layer
  int source_layer = 1;            // SkipVk and ResFormer's V_k (1-based); 0 is SkipV0: the injected heads are zero
  Strategy strategy = Strategy::second_half;
};

struct Config {
  Family family = Family::gpt2;
  int layers = 6, d = 128, heads = 4, kv_heads = 4;
  int head_dim = 32;       // d_h; heads·d_h need not equal d (it must for Q-identity)
  int ffn = 512;           // MLP hidden width r
  int vocab = 4096, positions = 1024;
  bool tied = true;
  bool bias = true;        // gpt2: biases on linear maps and LayerNorm; llama: attention and MLP biases
  GeluForm gelu = GeluForm::tanh;
  double norm_eps = 1e-5;
  double rope_theta = 10000;
  // Llama 3.1's "llama3" RoPE scaling (engine/rope_frequencies.hpp); off while rope_original_context is 0.
  double rope_factor = 1, rope_low_freq_factor = 1, rope_high_freq_factor = 4, rope_original_context = 0;
  bool norm = true;        // false: no norm in front of attention and MLP, no final norm (--norm none)
  // 1-based, ascending: layers with the Q-identity parameterization in a model of
  // another variant (what `lm eliminate` writes); the q-identity variant is every layer.
  std::vector<int> q_identity_layers;
  bool mla = false;        // multi-head latent attention: cache c = x W_DKV (d_c) and a rotary key (d_R)
  int d_c = 0, d_r = 0;
  Variant variant;

  bool identity_query(int layer) const;  // 0-based: head h's query is the h-th slice of N1's output
  double attention_scale(int layer) const;  // 0-based
  bool rope() const { return family == Family::llama; }
  engine::RopeFrequencies rope_frequencies() const {
    return {rope_theta, rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_context};
  }
};

// The family's defaults for the given sizes (head_dim = d/heads, ffn = 4d for
// gpt2 and the multiple of 32 nearest above 8d/3 for llama, tied for gpt2).
Config family_defaults(Family family, int layers, int d, int heads, int vocab, int positions);

// The variants whose layers n > k mix a source layer k with weights α, β
// (resformer, resformer-neutreno, resformer-k, resformer-q).
bool resformer_family(VariantKind kind);

// Throws UsageError (core/errors.hpp) naming the first inconsistency: a size
// below 1, heads not a multiple of kv_heads, a ratio that does not give whole
// heads, a source layer beyond L, Q-identity with heads·d_h ≠ d, MLA sizes,
// Q-identity layers out of 1 … L, not ascending, with MLA or the q-identity variant.
void validate(const Config& config);

// Names used on the command line, in checkpoints and in JSON.
std::string to_string(Family);
std::string to_string(VariantKind);
std::string to_string(Strategy);
Family parse_family(const std::string&);
VariantKind parse_variant(const std::string&);
Strategy parse_strategy(const std::string&);
// "layernorm" (gpt2), "rmsnorm" (llama) or "none"; parse_norm refuses the other family's norm.
std::string norm_name(const Config& config);
bool parse_norm(Family family, const std::string& name);  // true: the family's norm; false: none

// Every field as text (17 significant digits for reals): a checkpoint's
// __metadata__ and config.json; from_metadata reads it back (UsageError naming
// a missing or malformed key). "norm" is written only when it is "none" and
// "q_identity_layers" ("2,5") only when there are some, so other checkpoints
// keep their metadata; a checkpoint without them has the family's norm and none.
std::map<std::string, std::string> to_metadata(const Config& config);
Config from_metadata(const std::map<std::string, std::string>& metadata);

}  // namespace qkvlab::lm
