// Exact parameter and KV-cache accounting of a configuration (docs/math/lm.md,
// "KV-cache and parameter counting"), from the description the
// model itself is built from — one mechanism, no per-variant formula:
//
// Parameters: every tensor of parameter_layout(config, make_plan(config)),
// grouped by component: embedding (tokens: wte; positions: wpe), per layer
// attention by projection (q, k, v, o; MLA: dkv, uk, uv, kr, qr; each with its
// bias), mlp by projection (fc, proj; gate, up, down), norms (gains and
// biases, the final norm included), dense_mix (DenseFormer's weights) and head
// (the untied lm_head). `embedding` is tokens + positions (the embedding
// parameters of Kaplan et al. and Chinchilla; a tied head is the token
// embedding, counted once); non_embedding = total − embedding, so an untied
// head counts as non-embedding (subtract `head` for the other convention).
//
// KV cache: what a decoder must keep per token, from make_plan: layer n
// caches its own key heads × d_h and its own value heads × d_h; with MLA its
// own latent slots × d_c/H_kv and the decoupled rotary key d_R. Heads a layer
// reads from another layer (SkipV1's injected heads, SVFormer's, YOCO's and
// CLA's shared ones, ResFormer's and NeuTRENO's V_1) are counted once, at the
// layer that owns them, and listed as reused. Bytes = count × the cache
// dtype's size (f32 4, bf16 and f16 2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lm/config.hpp"
#include "results/value.hpp"

namespace qkvlab::lm {

struct ComponentCount {
  std::string component;  // "embedding.tokens", "attention.q", "mlp.down", "norms", "dense_mix", "head", ...
  std::int64_t count = 0;
};

struct ParameterAccount {
  std::int64_t total = 0;
  std::int64_t embedding = 0;  // token embedding + learned positions
  std::int64_t non_embedding() const { return total - embedding; }
  std::vector<ComponentCount> components;           // the whole model, in layout order
  std::vector<std::vector<ComponentCount>> layers;  // each layer's own tensors
  std::int64_t component(const std::string& name) const;  // 0 when absent
};

ParameterAccount count_parameters(const Config& config);

struct Reuse {
  std::string what;        // "keys" or "values" (MLA: "latent")
  int layer = 0;           // 1-based: the layer that owns (and caches) them
  std::vector<int> heads;  // that layer's own heads (MLA: latent slots), 1-based as docs/lm.md numbers heads 1 … H_kv
};

struct LayerCache {
  int own_key_heads = 0, own_value_heads = 0;      // MLA: own_value_heads = own latent slots
  std::int64_t keys = 0, values = 0;               // per token: own heads × d_h
  std::int64_t latent = 0, rope_key = 0;           // MLA: own slots × d_c/H_kv, and d_R
  std::vector<Reuse> reused;
  std::int64_t elements() const { return keys + values + latent + rope_key; }
};

struct KvAccount {
  std::vector<LayerCache> layers;
  std::int64_t elements_per_token() const;
};

KvAccount count_kv(const Config& config);

// Bytes per cached element: "f32" 4, "bf16" 2, "f16" 2 (UsageError otherwise).
int cache_dtype_bytes(const std::string& dtype);

// The accounts as result values (results/value.hpp), the configuration first:
// {"model", "total", "embedding", "non_embedding", "components": {...},
//  "layers": [{"layers": "2-24", "count": 23, "per_layer": {...}}]} — runs of
// identical layers shown once — and {"model", "dtype", "bytes_per_value",
// "elements_per_token", "bytes_per_token", "vanilla_bytes_per_token", "saving",
// ["seq_len", "total_bytes"], "layers": [...]}.
results::Value parameters_value(const Config& config);
results::Value kv_value(const Config& config, const std::string& dtype, std::optional<std::int64_t> seq_len);

}  // namespace qkvlab::lm
