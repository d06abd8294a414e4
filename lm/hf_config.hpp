// The two JSON files of a Hugging Face checkpoint directory, read into the
// toolkit's terms (docs/math/lm.md, "Hugging Face checkpoints"):
//
// config.json → lm::Config (a vanilla model; HF's defaults where a key is
// absent or null, as transformers applies them):
//   gpt2    n_embd (768), n_layer (12), n_head (12), n_positions or n_ctx (1024),
//           vocab_size (50257), layer_norm_epsilon (1e-5), n_inner (4·n_embd),
//           activation_function ("gelu_new"; "gelu_new", "gelu_pytorch_tanh" and
//           "gelu_fast" are the tanh form, "gelu" the erf form), tie_word_embeddings
//           (true). Family gpt2 with biases, d_h = n_embd/n_head. Refused:
//           scale_attn_weights false, scale_attn_by_inverse_layer_idx true,
//           add_cross_attention true, any other activation.
//   llama,  hidden_size (4096), intermediate_size (11008; mistral 14336),
//   mistral num_hidden_layers (32), num_attention_heads (32), num_key_value_heads
//           (H; mistral 8), head_dim (d/H), rms_norm_eps (1e-6), rope_theta (1e4),
//           max_position_embeddings (2048; mistral 131072), vocab_size (32000),
//           tie_word_embeddings (false), attention_bias = mlp_bias (false).
//           Refused: a non-null rope_scaling (not implemented: it is never
//           ignored), hidden_act other than "silu", attention_bias ≠ mlp_bias,
//           partial_rotary_factor ≠ 1. Mistral's sliding_window W, when not null
//           and below max_position_embeddings, becomes the model's positions: for
//           T ≤ W sliding-window attention is full causal attention, so the model
//           is exact there, and it refuses longer sequences.
// Sizes are bounded as the command-line flags are (layers ≤ 1024, d ≤ 65536,
// heads ≤ 1024, head_dim ≤ 4096, intermediate ≤ 2^20, vocab ≤ 2^24, positions
// ≤ 2^20 for gpt2 and ≤ 2^24 for llama), so a hostile file cannot make the
// loader allocate more than a model of those sizes.
//
// model.safetensors.index.json → weight_map (tensor name → shard file name);
// a shard name must be a plain file name in the directory (no '/', no "..").
//
// Both throw UsageError "SOURCE: what" (one line) on anything else: invalid
// JSON, a missing or mistyped key, an unsupported model_type or option.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "lm/config.hpp"

namespace qkvlab::lm {

struct HfConfig {
  std::string model_type;  // "gpt2", "llama" or "mistral"
  Config config;
};

HfConfig parse_hf_config(std::string_view json, const std::string& source);

std::map<std::string, std::string> parse_safetensors_index(std::string_view json, const std::string& source);

}  // namespace qkvlab::lm
