#include "lm/hf_config.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>

#include "core/errors.hpp"
#include "engine/json.hpp"

namespace qkvlab::lm {

namespace {

using engine::Json;

// One JSON object of a config file, read key by key; every failure names the
// source and the key.
class Reader {
 public:
  Reader(const Json& object, const std::string& source) : object_(object), source_(source) {}

  [[noreturn]] void fail(const std::string& what) const { throw UsageError(source_ + ": " + what); }

  // The value of `key`, or null when absent or JSON null.
  const Json* find(const std::string& key) const {
    for (std::size_t k = 0; k < object_.keys.size(); ++k)
      if (object_.keys[k] == key)
        return object_.items[k].kind == Json::Kind::literal && object_.items[k].text == "null" ? nullptr
                                                                                                : &object_.items[k];
    return nullptr;
  }
  bool has(const std::string& key) const { return find(key) != nullptr; }
  bool present(const std::string& key) const {  // even as null
    for (const std::string& k : object_.keys)
      if (k == key) return true;
    return false;
  }

  std::int64_t integer(const std::string& key, std::int64_t fallback, std::int64_t lo, std::int64_t hi) const {
    const Json* v = find(key);
    if (!v) return fallback;
    std::int64_t x = 0;
    const std::string& t = v->text;
    const auto [end, error] = std::from_chars(t.data(), t.data() + t.size(), x);
    if (v->kind != Json::Kind::number || error != std::errc() || end != t.data() + t.size())
      fail("\"" + key + "\" is not an integer");
    if (x < lo || x > hi)
      fail("\"" + key + "\" = " + t + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
  }

  double number(const std::string& key, double fallback) const {
    const Json* v = find(key);
    if (!v) return fallback;
    if (v->kind != Json::Kind::number) fail("\"" + key + "\" is not a number");
    const double x = std::strtod(v->text.c_str(), nullptr);  // the JSON grammar was checked by the parser
    if (!std::isfinite(x)) fail("\"" + key + "\" = " + v->text + " is not finite");
    return x;
  }

  bool boolean(const std::string& key, bool fallback) const {
    const Json* v = find(key);
    if (!v) return fallback;
    if (v->kind != Json::Kind::literal || (v->text != "true" && v->text != "false"))
      fail("\"" + key + "\" is not true or false");
    return v->text == "true";
  }

  std::string string(const std::string& key, const std::string& fallback) const {
    const Json* v = find(key);
    if (!v) return fallback;
    if (v->kind != Json::Kind::string) fail("\"" + key + "\" is not a string");
    return v->text;
  }

 private:
  const Json& object_;
  const std::string& source_;
};

Json parse_object(std::string_view text, const std::string& source) {
  Json json;
  try {
    json = engine::parse_json(text);
  } catch (const std::runtime_error& e) {
    throw UsageError(source + ": not valid JSON (" + e.what() + ")");
  }
  if (json.kind != Json::Kind::object) throw UsageError(source + ": not a JSON object");
  return json;
}

// rope_scaling: null, {"rope_type": "default"} or Llama 3.1's {"rope_type": "llama3", "factor",
// "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"} (transformers' defaults
// for none of them: each is required). Any other type is refused by name.
void read_rope_scaling(const Json& scaling, const Reader& parent, Config& c) {
  if (scaling.kind != Json::Kind::object) parent.fail("rope_scaling is neither null nor an object");
  const std::string source = "rope_scaling";
  const Reader r(scaling, source);
  const std::string type = r.has("rope_type") ? r.string("rope_type", "") : r.string("type", "?");
  if (type == "default") return;
  if (type != "llama3")
    parent.fail("rope_scaling (type \"" + type + "\") is not implemented; only null, \"default\" and \"llama3\" are");
  for (const char* key : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
    if (!r.has(key)) parent.fail(std::string("rope_scaling (llama3) has no \"") + key + "\"");
  c.rope_factor = r.number("factor", 1), c.rope_low_freq_factor = r.number("low_freq_factor", 1);
  c.rope_high_freq_factor = r.number("high_freq_factor", 4);
  c.rope_original_context = double(r.integer("original_max_position_embeddings", 0, 1, 1 << 24));
  if (!(c.rope_factor >= 1 && c.rope_low_freq_factor > 0 && c.rope_high_freq_factor > c.rope_low_freq_factor))
    parent.fail("rope_scaling (llama3) needs factor >= 1 and 0 < low_freq_factor < high_freq_factor");
}

constexpr std::int64_t kMaxLayers = 1024, kMaxWidth = 65536, kMaxHeads = 1024, kMaxHeadDim = 4096,
                       kMaxFfn = 1 << 20, kMaxVocab = 1 << 24;

Config gpt2_config(const Reader& r) {
  const int d = int(r.integer("n_embd", 768, 1, kMaxWidth));
  const int heads = int(r.integer("n_head", 12, 1, kMaxHeads));
  const int layers = int(r.integer("n_layer", 12, 1, kMaxLayers));
  const int vocab = int(r.integer("vocab_size", 50257, 1, kMaxVocab));
  const std::int64_t ctx = r.integer("n_ctx", 1024, 1, 1 << 20);
  const int positions = int(r.integer("n_positions", ctx, 1, 1 << 20));
  if (d % heads != 0)
    r.fail("n_embd " + std::to_string(d) + " is not a multiple of n_head " + std::to_string(heads));
  Config c = family_defaults(Family::gpt2, layers, d, heads, vocab, positions);
  c.ffn = int(r.integer("n_inner", std::int64_t(4) * d, 1, kMaxFfn));
  c.norm_eps = r.number("layer_norm_epsilon", 1e-5);
  c.tied = r.boolean("tie_word_embeddings", true);
  c.bias = true;
  const std::string act = r.string("activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast")
    c.gelu = GeluForm::tanh;
  else if (act == "gelu")
    c.gelu = GeluForm::erf;
  else
    r.fail("activation_function \"" + act + "\" is not supported (gelu_new, gelu_pytorch_tanh, gelu_fast, gelu)");
  if (!r.boolean("scale_attn_weights", true)) r.fail("scale_attn_weights false (unscaled attention) is not supported");
  if (r.boolean("scale_attn_by_inverse_layer_idx", false))
    r.fail("scale_attn_by_inverse_layer_idx true is not supported");
  if (r.boolean("add_cross_attention", false)) r.fail("add_cross_attention true (an encoder-decoder) is not supported");
  return c;
}

Config llama_config(const Reader& r, bool mistral) {
  const int d = int(r.integer("hidden_size", 4096, 1, kMaxWidth));
  const int heads = int(r.integer("num_attention_heads", 32, 1, kMaxHeads));
  const int layers = int(r.integer("num_hidden_layers", 32, 1, kMaxLayers));
  const int vocab = int(r.integer("vocab_size", 32000, 1, kMaxVocab));
  const int positions = int(r.integer("max_position_embeddings", mistral ? 131072 : 2048, 1, 1 << 24));
  Config c = family_defaults(Family::llama, layers, d, heads, vocab, positions);
  c.kv_heads = int(r.integer("num_key_value_heads", mistral ? 8 : heads, 1, kMaxHeads));
  if (!r.has("head_dim") && d % heads != 0)
    r.fail("hidden_size " + std::to_string(d) + " is not a multiple of num_attention_heads " + std::to_string(heads) +
           " and there is no head_dim");
  c.head_dim = int(r.integer("head_dim", d / heads, 1, kMaxHeadDim));
  c.ffn = int(r.integer("intermediate_size", mistral ? 14336 : 11008, 1, kMaxFfn));
  c.norm_eps = r.number("rms_norm_eps", 1e-6);
  c.rope_theta = r.number("rope_theta", 10000);
  c.tied = r.boolean("tie_word_embeddings", false);
  const bool attention_bias = r.boolean("attention_bias", false), mlp_bias = r.boolean("mlp_bias", false);
  if (attention_bias != mlp_bias)
    r.fail("attention_bias and mlp_bias differ: the toolkit's llama has biases on every linear map or none");
  c.bias = attention_bias;
  if (const Json* scaling = r.find("rope_scaling")) read_rope_scaling(*scaling, r, c);
  const std::string act = r.string("hidden_act", "silu");
  if (act != "silu") r.fail("hidden_act \"" + act + "\" is not supported (llama's MLP is SwiGLU: silu)");
  if (r.has("partial_rotary_factor") && r.number("partial_rotary_factor", 1) != 1)
    r.fail("partial_rotary_factor other than 1 is not supported");
  if (mistral) {  // an absent key takes MistralConfig's default (4096); null means no window
    std::optional<std::int64_t> window;
    if (!r.present("sliding_window"))
      window = 4096;
    else if (r.has("sliding_window"))
      window = r.integer("sliding_window", 0, 1, std::int64_t(1) << 31);
    if (window && *window < c.positions) c.positions = int(*window);
  }
  return c;
}

}  // namespace

HfConfig parse_hf_config(std::string_view text, const std::string& source) {
  const Json json = parse_object(text, source);
  const Reader r(json, source);
  HfConfig out;
  const Json* type = r.find("model_type");
  if (!type) r.fail("no \"model_type\" (gpt2, llama or mistral)");
  if (type->kind != Json::Kind::string) r.fail("\"model_type\" is not a string");
  out.model_type = type->text;
  if (out.model_type == "gpt2")
    out.config = gpt2_config(r);
  else if (out.model_type == "llama" || out.model_type == "mistral")
    out.config = llama_config(r, out.model_type == "mistral");
  else
    r.fail("unsupported model_type \"" + out.model_type + "\" (supported: gpt2, llama, mistral)");
  try {
    validate(out.config);
  } catch (const UsageError& e) {
    r.fail(e.what());
  }
  return out;
}

std::map<std::string, std::string> parse_safetensors_index(std::string_view text, const std::string& source) {
  const Json json = parse_object(text, source);
  const Reader r(json, source);
  const Json* map = r.find("weight_map");
  if (!map) r.fail("no \"weight_map\"");
  if (map->kind != Json::Kind::object) r.fail("\"weight_map\" is not an object");
  std::map<std::string, std::string> weight_map;
  for (std::size_t k = 0; k < map->keys.size(); ++k) {
    const std::string& name = map->keys[k];
    const Json& file = map->items[k];
    if (file.kind != Json::Kind::string) r.fail("weight_map[\"" + name + "\"] is not a string");
    const std::string& f = file.text;
    if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos || f.find('\\') != std::string::npos ||
        f.find('\0') != std::string::npos)
      r.fail("weight_map[\"" + name + "\"] = \"" + f + "\" is not a plain file name in the directory");
    weight_map.emplace(name, f);
  }
  if (weight_map.empty()) r.fail("\"weight_map\" lists no tensors");
  return weight_map;
}

}  // namespace qkvlab::lm
