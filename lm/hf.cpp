#include "lm/hf.hpp"

#include <bit>
#include <cstring>
#include <stdexcept>

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "engine/safetensors.hpp"
#include "lm/parameters.hpp"
#include "results/value.hpp"

namespace qkvlab::lm {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

constexpr const char* kExportedBy = "exported_by";
constexpr const char* kExporter = "qkvlab lm export";

// Whether dir's model.safetensors is one an earlier export wrote (its metadata says so).
bool is_earlier_export(const std::filesystem::path& dir) {
  const auto metadata = engine::safetensors_metadata(dir / "model.safetensors");
  return metadata && metadata->count(kExportedBy) && metadata->at(kExportedBy) == kExporter;
}

void require_expressible(const Config& c) {
  const std::string why = "the Hugging Face layout has no place for ";
  if (c.variant.kind != VariantKind::vanilla)
    throw UsageError(why + "variant " + to_string(c.variant.kind) + ": only vanilla models export");
  if (c.mla) throw UsageError(why + "multi-head latent attention (MLA): only vanilla models export");
  if (!c.norm) throw UsageError(why + "a model without norms (--norm none): both families' layouts have them");
  if (!c.q_identity_layers.empty())
    throw UsageError(why + "Q-identity layers: lm::explicit_queries writes their W_Q = I first");
  if (c.family == Family::gpt2 && c.rope())
    throw UsageError(why + "RoPE in a gpt2 model (--positions rope); a llama-family model has it");
  if (c.family == Family::gpt2 && c.kv_heads != c.heads)
    throw UsageError(why + "grouped-query attention in a gpt2 model (" + std::to_string(c.kv_heads) +
                     " key/value heads for " + std::to_string(c.heads) + " heads); a llama-family model has them");
  if (c.family == Family::gpt2 && c.heads * c.head_dim != c.d)
    throw UsageError(why + "a gpt2 model with heads x head width != d (" + std::to_string(c.heads) + " x " +
                     std::to_string(c.head_dim) + " != " + std::to_string(c.d) + ")");
}

// null, or Llama 3.1's "llama3" object (the form lm/hf_config.cpp reads).
results::Value rope_scaling(const Config& c) {
  if (c.rope_original_context <= 0) return {};
  results::Value s = results::Value::object();
  s.set("rope_type", "llama3"), s.set("factor", c.rope_factor), s.set("low_freq_factor", c.rope_low_freq_factor);
  s.set("high_freq_factor", c.rope_high_freq_factor);
  s.set("original_max_position_embeddings", std::int64_t(c.rope_original_context));
  return s;
}

}  // namespace

std::string hf_prefix(Family family) { return family == Family::gpt2 ? "transformer." : "model."; }

std::vector<HfTensor> hf_tensors(const Config& c) {
  require_expressible(c);
  const std::int64_t d = c.d, V = c.vocab, r = c.ffn, q = std::int64_t(c.heads) * c.head_dim,
                     kv = std::int64_t(c.kv_heads) * c.head_dim;
  std::vector<HfTensor> t;
  auto add = [&](std::string name, std::vector<std::int64_t> shape, std::vector<std::string> parts,
                 bool transposed = false) { t.push_back({std::move(name), std::move(shape), transposed, std::move(parts)}); };
  auto L = [](int i, const std::string& what) { return layer_tensor(i, what); };
  if (c.family == Family::gpt2) {
    // HF's GPT-2 always has biases; a bias-free model exports them as zeros (export_hf).
    add("wte.weight", {V, d}, {"wte"});
    add("wpe.weight", {c.positions, d}, {"wpe"});
    for (int i = 0; i < c.layers; ++i) {
      const std::string h = "h." + std::to_string(i) + ".";
      add(h + "ln_1.weight", {d}, {L(i, "ln_1.weight")});
      add(h + "ln_1.bias", {d}, {L(i, "ln_1.bias")});
      add(h + "attn.c_attn.weight", {d, 3 * d}, {L(i, "attn.q.weight"), L(i, "attn.k.weight"), L(i, "attn.v.weight")});
      add(h + "attn.c_attn.bias", {3 * d}, {L(i, "attn.q.bias"), L(i, "attn.k.bias"), L(i, "attn.v.bias")});
      add(h + "attn.c_proj.weight", {d, d}, {L(i, "attn.o.weight")});
      add(h + "attn.c_proj.bias", {d}, {L(i, "attn.o.bias")});
      add(h + "ln_2.weight", {d}, {L(i, "ln_2.weight")});
      add(h + "ln_2.bias", {d}, {L(i, "ln_2.bias")});
      add(h + "mlp.c_fc.weight", {d, r}, {L(i, "mlp.fc.weight")});
      add(h + "mlp.c_fc.bias", {r}, {L(i, "mlp.fc.bias")});
      add(h + "mlp.c_proj.weight", {r, d}, {L(i, "mlp.proj.weight")});
      add(h + "mlp.c_proj.bias", {d}, {L(i, "mlp.proj.bias")});
    }
    add("ln_f.weight", {d}, {"ln_f.weight"});
    add("ln_f.bias", {d}, {"ln_f.bias"});
  } else {
    add("embed_tokens.weight", {V, d}, {"wte"});
    for (int i = 0; i < c.layers; ++i) {
      const std::string h = "layers." + std::to_string(i) + ".";
      auto linear = [&](const std::string& hf, const std::string& ours, std::int64_t in, std::int64_t out) {
        add(h + hf + ".weight", {out, in}, {L(i, ours + ".weight")}, true);
        if (c.bias) add(h + hf + ".bias", {out}, {L(i, ours + ".bias")});
      };
      add(h + "input_layernorm.weight", {d}, {L(i, "ln_1.weight")});
      linear("self_attn.q_proj", "attn.q", d, q);
      linear("self_attn.k_proj", "attn.k", d, kv);
      linear("self_attn.v_proj", "attn.v", d, kv);
      linear("self_attn.o_proj", "attn.o", q, d);
      add(h + "post_attention_layernorm.weight", {d}, {L(i, "ln_2.weight")});
      linear("mlp.gate_proj", "mlp.gate", d, r);
      linear("mlp.up_proj", "mlp.up", d, r);
      linear("mlp.down_proj", "mlp.down", r, d);
    }
    add("norm.weight", {d}, {"ln_f.weight"});
  }
  if (!c.tied) add("lm_head.weight", {V, d}, {"lm_head.weight"});
  return t;
}

std::string hf_config_json(const Config& c) {
  require_expressible(c);
  using results::Value;
  Value v = Value::object();
  if (c.family == Family::gpt2) {
    v.set("architectures", Value::array({Value("GPT2LMHeadModel")}));
    v.set("model_type", "gpt2");
    v.set("n_embd", c.d), v.set("n_layer", c.layers), v.set("n_head", c.heads);
    v.set("n_inner", c.ffn), v.set("n_positions", c.positions), v.set("n_ctx", c.positions);
    v.set("vocab_size", c.vocab), v.set("layer_norm_epsilon", c.norm_eps);
    v.set("activation_function", c.gelu == GeluForm::tanh ? "gelu_new" : "gelu");
    v.set("scale_attn_weights", true);
    v.set("attn_pdrop", 0.0), v.set("embd_pdrop", 0.0), v.set("resid_pdrop", 0.0);
  } else {
    v.set("architectures", Value::array({Value("LlamaForCausalLM")}));
    v.set("model_type", "llama");
    v.set("hidden_size", c.d), v.set("intermediate_size", c.ffn), v.set("num_hidden_layers", c.layers);
    v.set("num_attention_heads", c.heads), v.set("num_key_value_heads", c.kv_heads), v.set("head_dim", c.head_dim);
    v.set("max_position_embeddings", c.positions), v.set("vocab_size", c.vocab);
    v.set("rms_norm_eps", c.norm_eps), v.set("rope_theta", c.rope_theta), v.set("rope_scaling", rope_scaling(c));
    v.set("hidden_act", "silu"), v.set("attention_bias", c.bias), v.set("mlp_bias", c.bias);
    v.set("attention_dropout", 0.0);
  }
  v.set("tie_word_embeddings", c.tied);
  v.set("torch_dtype", "float32");
  return v.json();
}

void export_hf(const Checkpoint& ck, const std::filesystem::path& dir) {
  // A checkpoint's manifest and optimizer state describe another model's files: a reader would
  // refuse the directory (manifest.json), or a resume load the state.
  std::vector<std::string> stale = {"model.safetensors.index.json", "vocab.json", "merges.txt", "tokenizer.model",
                                    "tokenizer_config.json", "special_tokens_map.json", "manifest.json",
                                    "optimizer.safetensors"};
  if (ck.tokenizer_json.empty()) stale.push_back("tokenizer.json");
  for (const std::string& name : stale)
    if (std::filesystem::exists(dir / name))
      throw UsageError((dir / name).string() + " is not this model's and the export would not replace it: export " +
                       "into an empty directory");
  const bool weights = std::filesystem::exists(dir / "model.safetensors");
  for (const char* name : {"model.safetensors", "config.json"})
    if (std::filesystem::exists(dir / name) && !is_earlier_export(dir))
      throw UsageError((dir / name).string() + " is another model's (" +
                       (weights ? "its weights lack lm export's mark: a model from elsewhere, or an export made before "
                                  "2026-11-27, which you may remove"
                                : "no model.safetensors beside it, as an export has: another model's or tool's file") +
                       "), which the export would replace: export into an empty directory");
  const std::vector<HfTensor> table = hf_tensors(ck.config);
  const auto layout = parameter_layout(ck.config, make_plan(ck.config));
  if (ck.values.size() != layout.total())
    throw std::invalid_argument("export_hf: the values do not match the configuration's layout");
  engine::SafeTensors file;
  file.metadata["format"] = "pt";  // transformers refuses a safetensors file without it
  file.metadata[kExportedBy] = kExporter;
  for (const HfTensor& t : table) {
    std::size_t count = 1;
    for (auto s : t.shape) count *= std::size_t(s);
    std::vector<float> out(count, 0.0f);  // a part the model lacks (gpt2 biases) stays zero
    const std::size_t rows = t.shape.size() == 2 ? std::size_t(t.shape[0]) : 1, cols = count / (rows ? rows : 1);
    std::size_t column = 0;
    for (const std::string& part : t.parts) {
      const engine::ParameterSpec* spec = layout.find(part);
      const std::size_t width = spec ? spec->size() / rows : std::size_t(t.shape.back()) / t.parts.size();
      if (!spec && !(ck.config.family == Family::gpt2 && !ck.config.bias))
        throw std::logic_error("export_hf: no tensor " + part + " in the layout");
      if (spec && !t.transposed && spec->shape.size() == 2 && std::size_t(spec->shape[0]) != rows)
        throw std::logic_error("export_hf: " + part + " does not have the rows of " + t.name);
      if (spec) {
        const float* x = ck.values.data() + spec->offset;
        if (t.transposed) {  // ours (in, out) → stored (out, in)
          const std::size_t in = std::size_t(spec->shape[0]), o = std::size_t(spec->shape[1]);
          for (std::size_t i = 0; i < in; ++i)
            for (std::size_t j = 0; j < o; ++j) out[j * in + i] = x[i * o + j];
        } else {
          for (std::size_t i = 0; i < rows; ++i) std::memcpy(&out[i * cols + column], x + i * width, width * sizeof(float));
        }
      }
      column += width;
    }
    engine::Tensor tensor{engine::DType::F32, std::vector<std::uint64_t>(t.shape.begin(), t.shape.end()), {}};
    tensor.data.resize(count * sizeof(float));
    std::memcpy(tensor.data.data(), out.data(), tensor.data.size());  // little-endian host (x86-64, aarch64)
    file.tensors[t.name == "lm_head.weight" ? t.name : hf_prefix(ck.config.family) + t.name] = std::move(tensor);
  }
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir / "config.json");  // first: a write cut short leaves no model to load
  engine::save_safetensors(dir / "model.safetensors", file);
  if (!ck.tokenizer_json.empty()) write_bytes_atomically(dir / "tokenizer.json", "JSON", ck.tokenizer_json);
  write_bytes_atomically(dir / "config.json", "JSON", hf_config_json(ck.config));
}

}  // namespace qkvlab::lm
