// The Hugging Face layouts of docs/math/lm.md ("Hugging Face checkpoints"), as one table
// read in both directions: loading (lm/model_files.hpp) gathers the toolkit's
// tensors out of it, `lm export --hf` scatters them into it.
//
//   gpt2  (GPT2LMHeadModel; names under "transformer.", which loading also accepts without)
//     wte.weight [V,d] ← wte                    wpe.weight [P,d] ← wpe
//     h.i.ln_1.{weight,bias} ← h.i.ln_1.*       h.i.ln_2.{weight,bias} ← h.i.ln_2.*
//     h.i.attn.c_attn.weight [d,3d] ← [h.i.attn.q.weight | k.weight | v.weight]  (Conv1D: stored
//         input-by-output, already the row-vector W; q, k, v are column blocks)
//     h.i.attn.c_attn.bias [3d] ← [q.bias | k.bias | v.bias]
//     h.i.attn.c_proj.{weight [d,d], bias} ← h.i.attn.o.*
//     h.i.mlp.c_fc.{weight [d,r], bias} ← h.i.mlp.fc.*   h.i.mlp.c_proj.{weight [r,d], bias} ← h.i.mlp.proj.*
//     ln_f.{weight,bias} ← ln_f.*               lm_head.weight [V,d] (top level, untied only) ← lm_head.weight
//     h.i.attn.bias, h.i.attn.masked_bias: causal-mask buffers, no parameters (skipped on load)
//   llama (LlamaForCausalLM, also model_type mistral; names under "model.", also accepted without)
//     embed_tokens.weight [V,d] ← wte           norm.weight ← ln_f.weight
//     layers.i.input_layernorm.weight ← h.i.ln_1.weight
//     layers.i.post_attention_layernorm.weight ← h.i.ln_2.weight
//     layers.i.self_attn.{q,k,v,o}_proj.weight [out,in] ← h.i.attn.{q,k,v,o}.weightᵀ  (nn.Linear)
//     layers.i.mlp.{gate,up,down}_proj.weight [out,in] ← h.i.mlp.{gate,up,down}.weightᵀ
//     (.bias of each projection when attention_bias = mlp_bias = true)
//     lm_head.weight [V,d] (untied only)
//     layers.i.self_attn.rotary_emb.inv_freq: an old RoPE buffer; checked against rope_theta, skipped
// HF's q and k rows are already in rotate_half order, the toolkit's RoPE.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "lm/checkpoint.hpp"
#include "lm/config.hpp"

namespace qkvlab::lm {

struct HfTensor {
  std::string name;                 // without the family's prefix ("h.0.attn.c_attn.weight", "lm_head.weight")
  std::vector<std::int64_t> shape;  // as stored in the file
  bool transposed = false;          // stored [out, in]: the toolkit's tensor is its transpose
  std::vector<std::string> parts;   // the toolkit's tensors, concatenated along the stored last axis
};

// The family's prefix: "transformer." (gpt2) or "model." (llama); lm_head.weight has none.
std::string hf_prefix(Family family);

// The HF tensors of a configuration. Throws UsageError (one line) when the
// layout has no place for it: any variant but vanilla, MLA, no norms (--norm none),
// Q-identity layers (lm/eliminate.hpp's explicit_queries makes them W_Q = I), and for gpt2
// grouped-query attention or heads·d_h ≠ d.
std::vector<HfTensor> hf_tensors(const Config& config);

// config.json of the HF layout (model_type, architectures, sizes, torch_dtype "float32").
std::string hf_config_json(const Config& config);

// `lm export --hf`: config.json and model.safetensors (F32, names with the
// prefix, __metadata__ {"format": "pt"} as transformers requires) in `dir`,
// and the checkpoint's tokenizer.json when it has one (lm/tokenizer.hpp),
// each written atomically. A gpt2 model without biases gets zero biases (HF's
// GPT-2 always has them; the function is the same). Throws UsageError as
// hf_tensors does, and, before anything is written, when `dir` holds files the
// export would not replace and a reader would take for this model's: a
// model.safetensors.index.json (its shards), or a tokenizer (tokenizer.json when
// the checkpoint has none; vocab.json, merges.txt, tokenizer.model,
// tokenizer_config.json, special_tokens_map.json always), a checkpoint's manifest.json or
// optimizer state, or a model.safetensors or config.json that no earlier export wrote (a
// downloaded model: the export's weights carry "exported_by": "qkvlab lm export" in their
// metadata). config.json, the file a reader starts from, is removed first and written last, so an
// export cut short is never loaded as a model (new weights beside the old configuration).
void export_hf(const Checkpoint& checkpoint, const std::filesystem::path& dir);

}  // namespace qkvlab::lm
