// The configuration of a decoder-only language model: its family (GPT-2 or
// Llama), sizes, and architecture variant. Row-vector convention throughout
// (X ∈ R^{T×d}, projections X W).
//
// Families (pre-norm blocks R ← R + Attn(N1(R)), R ← R + MLP(N2(R)); after the
// last block a final norm, logits = N_f(R) U, U = Eᵀ when tied):
//   gpt2   learned positions (or RoPE: the GPT-2 of SkipV1Former's released code,
//          dense_skip), LayerNorm (gain, and bias when `bias`), MLP d → r → d
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
#include <optional>
#include <string>
#include <vector>

#include "core/qkv_plan.hpp"
#include "engine/kernel_types.hpp"
#include "engine/rope_frequencies.hpp"

namespace qkvlab::lm {

using engine::GeluForm;

enum class Family { gpt2, llama };

// How positions enter: a learned table wpe added to the token embedding, or RoPE
// on queries and keys (Hugging Face's rotate_half pairs (i, i + d_h/2)). Llama
// has RoPE; gpt2 has learned positions unless given RoPE (--positions rope).
enum class PositionEncoding { learned, rope };

// The variants, SkipV1's injection strategies and their parameters are the one
// vocabulary of core/qkv_plan.hpp.
using qkv::Strategy;
using qkv::Variant;
using qkv::VariantKind;

struct Config {
  Family family = Family::gpt2;
  int layers = 6, d = 128, heads = 4, kv_heads = 4;
  int head_dim = 32;       // d_h; heads·d_h need not equal d (it must for Q-identity)
  int ffn = 512;           // MLP hidden width r
  int vocab = 4096, positions = 1024;
  PositionEncoding position_encoding = PositionEncoding::learned;  // the family's unless given
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
  bool rope() const { return position_encoding == PositionEncoding::rope; }
  engine::RopeFrequencies rope_frequencies() const {
    return {rope_theta, rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_context};
  }
};

// The family's defaults for the given sizes (head_dim = d/heads, ffn = 4d for
// gpt2 and the multiple of 32 nearest above 8d/3 for llama, tied for gpt2,
// learned positions for gpt2 and RoPE for llama).
Config family_defaults(Family family, int layers, int d, int heads, int vocab, int positions);

// The variants whose layers n > k mix a source layer k with weights α, β
// (resformer, resformer-neutreno, resformer-k, resformer-q).
bool resformer_family(VariantKind kind);
bool skipv1_family(VariantKind kind);  // skipv1, skipkv1, skipv1-yoco

// Which parts of a configuration its architecture reads: the skip ratio and the strategy (the skipv1
// family), the source layer (the skipv1 and resformer families, resformer-cross), RoPE's base (RoPE
// positions, or MLA's rotary key d_R > 0), the GELU form (gpt2), MLA's widths (with MLA).
bool reads_source_layer(VariantKind kind);
bool reads_rope_theta(const Config& config);
// The configuration with every field its architecture does not read at its default: two configurations
// that differ only there are one model (a run started with --skip-ratio on vanilla, before such
// flags were refused, resumes without it).
Config canonical(Config config);
// The fields `config`'s architecture does not read (those canonical() resets), by their flag, each with
// the rest of the one-line refusal a command gives when that flag is passed.
struct UnreadField {
  std::string flag, refusal;
};
std::vector<UnreadField> unread_fields(const Config& config);

// The weights given to a variant (the command line's --lambda, --alpha, --beta; each optional), set on
// `variant` by its rules: λ is NeuTRENO's own for neutreno and resformer-neutreno; for resformer,
// resformer-k, -q and -previous it is ResFormer's λ form V_n + λ V_k, α = 1 and β = λ (λ given with α
// or β is a UsageError, unless λ is NeuTRENO's); α and β, when given, are set last. A variant just
// chosen (`chosen`: not one kept from a preset or a checkpoint) that is resformer-neutreno takes
// the released combination's λ = 0.2 unless λ is given.
struct VariantWeights {
  std::optional<double> lambda, alpha, beta;
};
void set_variant_weights(Variant& variant, const VariantWeights& weights, bool chosen);

// Throws UsageError (core/errors.hpp) naming the first inconsistency: a size
// below 1, heads not a multiple of kv_heads, a ratio that does not give whole
// heads, a source layer beyond L, Q-identity with heads·d_h ≠ d, MLA sizes,
// Q-identity layers out of 1 … L, not ascending, with MLA or the q-identity variant,
// a llama model with learned positions.
void validate(const Config& config);

// Names used on the command line, in checkpoints and in JSON.
std::string to_string(Family);
std::string to_string(VariantKind);
std::string to_string(Strategy);
std::string to_string(PositionEncoding);
Family parse_family(const std::string&);
VariantKind parse_variant(const std::string&);
Strategy parse_strategy(const std::string&);
PositionEncoding parse_position_encoding(const std::string&);
// "layernorm" (gpt2), "rmsnorm" (llama) or "none"; parse_norm refuses the other family's norm.
std::string norm_name(const Config& config);
bool parse_norm(Family family, const std::string& name);  // true: the family's norm; false: none

// Every field as text (17 significant digits for reals): a checkpoint's
// __metadata__ and config.json; from_metadata reads it back (UsageError naming
// a missing or malformed key). "norm" is written only when it is "none" and
// "q_identity_layers" ("2,5") only when there are some, and "position_encoding"
// only when it is not the family's (a gpt2 model with RoPE), so other checkpoints
// keep their metadata; a checkpoint without them has the family's norm, none and
// the family's positions.
std::map<std::string, std::string> to_metadata(const Config& config);
Config from_metadata(const std::map<std::string, std::string>& metadata);

}  // namespace qkvlab::lm
