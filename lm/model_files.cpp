#include "lm/model_files.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "core/errors.hpp"
#include "lm/checkpoint.hpp"
#include "lm/hf.hpp"
#include "lm/hf_config.hpp"
#include "lm/parameters.hpp"
#include "results/value.hpp"

namespace qkvlab::lm {

namespace fs = std::filesystem;
using engine::MappedSafeTensors;
using engine::TensorEntry;

namespace {

constexpr const char* kOwnFormat = "qkvlab-lm";
constexpr std::uintmax_t kMaxJsonBytes = 64u << 20;  // config.json and the index: far above any real one

[[noreturn]] void fail(const fs::path& where, const std::string& what) { throw UsageError(where.string() + ": " + what); }

// Something is there (a file, a FIFO, a directory, a link, broken or not): it is opened, or refused saying what it is.
bool present(const fs::path& p) {
  std::error_code error;
  return fs::exists(fs::symlink_status(p, error));
}

template <class T>
std::string shape_text(const std::vector<T>& shape) {
  std::string s = "[";
  for (std::size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + "]";
}

template <class A, class B>
bool same_shape(const std::vector<A>& a, const std::vector<B>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t k = 0; k < a.size(); ++k)
    if (std::uint64_t(a[k]) != std::uint64_t(b[k])) return false;
  return true;
}

MappedSafeTensors map_file(const fs::path& path) {
  try {
    return MappedSafeTensors(path);
  } catch (const std::runtime_error& e) {
    throw UsageError(e.what());
  }
}

std::string read_json_file(const fs::path& path) {
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec) fail(path, "cannot read: " + ec.message());
  if (size > kMaxJsonBytes) fail(path, "larger than 64 MiB: not a configuration or index file");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in && !in.eof()) fail(path, "cannot read");
  return text.str();
}

bool own_format(const engine::SafeTensorsView& view) {
  const auto it = view.metadata.find("format");
  return it != view.metadata.end() && it->second == kOwnFormat;
}

void require_float(const fs::path& file, const std::string& name, const TensorEntry& e) {
  if (!engine::is_float(e.dtype))
    fail(file, "tensor \"" + name + "\" has dtype " + engine::dtype_name(e.dtype) +
                   "; only F32, F16, BF16 and F64 are converted");
}

ModelFiles open_own(const fs::path& dir, MappedSafeTensors file) {
  ModelFiles files;
  files.dir = dir;
  files.format = "qkvlab";
  const fs::path path = file.path();
  const auto& metadata = file.view().metadata;
  try {
    files.config = from_metadata(metadata);
  } catch (const UsageError& e) {
    fail(path, e.what());
  }
  const auto config_keys = to_metadata(files.config);
  for (const auto& [key, value] : metadata)
    if (!config_keys.count(key) && key != "format") files.metadata[key] = value;
  files.shards.push_back(std::move(file));
  const auto& tensors = files.shards.back().view().tensors;
  const auto layout = parameter_layout(files.config, make_plan(files.config));
  for (const auto& spec : layout.specs()) {
    const auto it = tensors.find(spec.name);
    if (it == tensors.end())
      fail(path, "missing tensor \"" + spec.name + "\" (the configuration implies " + shape_text(spec.shape) + ")");
    require_float(path, spec.name, it->second);
    if (!same_shape(it->second.shape, spec.shape))
      fail(path, "tensor \"" + spec.name + "\" has shape " + shape_text(it->second.shape) +
                     " but the configuration implies " + shape_text(spec.shape));
    files.sources[spec.name] = ModelFiles::Source{0, spec.name, &it->second, 0, false};
  }
  const Variant& v = files.config.variant;
  const bool earlier_yoco = v.kind == VariantKind::skipv1_yoco && v.source_layer > files.config.layers / 2;
  for (const auto& [name, entry] : tensors)
    if (!layout.find(name))
      fail(path, "unknown tensor \"" + name + "\" for this configuration" +
                     (earlier_yoco ? std::string(" (skipv1-yoco with source layer k > L/2: since 2026-11-27 layers L/2+1 … k "
                                                 "take layer L/2's keys; this model was written with their own)")
                                   : std::string()));
  return files;
}

// The shard files of a Hugging Face directory, mapped, with the index checked
// against their headers.
std::vector<MappedSafeTensors> open_shards(const fs::path& dir) {
  std::vector<MappedSafeTensors> shards;
  if (present(dir / "model.safetensors")) {  // a FIFO or a directory: "not a regular file"
    shards.push_back(map_file(dir / "model.safetensors"));
    return shards;
  }
  const fs::path index_path = dir / "model.safetensors.index.json";
  if (!fs::is_regular_file(index_path))
    fail(dir, "no model.safetensors or model.safetensors.index.json (PyTorch .bin files are not read)");
  const auto weight_map = parse_safetensors_index(read_json_file(index_path), index_path.string());
  std::map<std::string, std::size_t> shard_of_file;
  for (const auto& [tensor, file] : weight_map) {
    if (shard_of_file.count(file)) continue;
    if (!fs::is_regular_file(dir / file))
      fail(index_path, "shard \"" + file + "\" (listed for tensor \"" + tensor + "\") is not a file in " + dir.string());
    shard_of_file[file] = shards.size();
    shards.push_back(map_file(dir / file));
  }
  for (const auto& [tensor, file] : weight_map)
    if (!shards[shard_of_file.at(file)].view().tensors.count(tensor))
      fail(index_path, "tensor \"" + tensor + "\" is listed in shard \"" + file + "\", which does not hold it");
  for (const auto& [file, k] : shard_of_file)
    for (const auto& [tensor, entry] : shards[k].view().tensors) {
      const auto it = weight_map.find(tensor);
      if (it == weight_map.end() || it->second != file)
        fail(index_path, "shard \"" + file + "\" holds tensor \"" + tensor + "\", which the weight_map " +
                             (it == weight_map.end() ? "does not list" : "places in \"" + it->second + "\""));
    }
  return shards;
}

// "h.<i>.<rest>" (gpt2) or "layers.<i>.<rest>" (llama) with i < layers: i, else −1.
int layer_of(const std::string& name, const std::string& head, const std::string& rest, int layers) {
  if (name.size() <= head.size() + rest.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - rest.size(), rest.size(), rest) != 0)
    return -1;
  const char* first = name.data() + head.size();
  const char* last = name.data() + name.size() - rest.size();
  int i = -1;
  const auto [end, error] = std::from_chars(first, last, i);
  if (error != std::errc() || end != last || (*first == '0' && last - first > 1) || i < 0 || i >= layers) return -1;
  return i;
}

// A buffer that carries no parameters: GPT-2's causal masks, Llama's old RoPE
// inv_freq (checked against rope_theta and rope_scaling). True when `name` is one.
// `key` is the name without the family's prefix, `name` the one the file stores.
bool buffer_tensor(const Config& c, const std::string& key, const std::string& name, const TensorEntry& e,
                   const engine::SafeTensorsView& view, const fs::path& file) {
  if (c.family == Family::gpt2)
    return layer_of(key, "h.", ".attn.bias", c.layers) >= 0 || layer_of(key, "h.", ".attn.masked_bias", c.layers) >= 0;
  if (layer_of(key, "layers.", ".self_attn.rotary_emb.inv_freq", c.layers) < 0) return false;
  require_float(file, name, e);
  const std::size_t n = std::size_t(c.head_dim / 2);
  if (!same_shape(e.shape, std::vector<std::size_t>{n}))
    fail(file, "tensor \"" + name + "\" has shape " + shape_text(e.shape) + ", expected [" + std::to_string(n) + "]");
  std::vector<float> x(n);
  engine::decode_floats(e.dtype, view.bytes(e).data(), n, x.data());
  // transformers computes 1/θ^(2i/d_h) in float32: the exponent's rounding moves it by up to
  // ln θ · 2⁻²⁴ relative, pow and the division by a few more units; the storage rounds it to its
  // type (2 u relative), and below f16's normal range to its subnormal spacing (half of it absolute).
  const double compute = (std::log(c.rope_theta) + 4) * 0x1p-24;
  const double stored = e.dtype == engine::DType::BF16 ? 0x1p-7 : e.dtype == engine::DType::F16 ? 0x1p-10 : 0;
  const double floor = e.dtype == engine::DType::F16 ? 0x1p-25 : e.dtype == engine::DType::BF16 ? 0x1p-134 : 0x1p-150;
  for (std::size_t i = 0; i < n; ++i) {
    const double expected = c.rope_frequencies().omega(int(i), c.head_dim);
    if (!(std::abs(x[i] - expected) <= (compute + stored) * expected + floor)) {
      char theta[32], values[96];
      std::snprintf(theta, sizeof theta, "%.9g", c.rope_theta);
      std::snprintf(values, sizeof values, " (%.9g vs %.9g)", double(x[i]), expected);
      fail(file, "tensor \"" + name + "\" disagrees with rope_theta " + theta +
                     (c.rope_original_context > 0 ? " and rope_scaling" : "") + " at " + std::to_string(i) + values);
    }
  }
  return true;
}

ModelFiles open_hf(const fs::path& dir) {
  const fs::path config_path = dir / "config.json";
  if (!fs::is_regular_file(config_path)) {
    if (fs::is_regular_file(dir / "checkpoint" / "model.safetensors"))  // an lm train run's directory
      fail(dir, "a training run's directory: its model is " + (dir / "checkpoint").string());
    fail(dir, fs::exists(dir / "model.safetensors") ? "no config.json, and model.safetensors is not a qkvlab checkpoint"
                                                    : "no model.safetensors and no config.json: not a model's directory");
  }
  const HfConfig hf = parse_hf_config(read_json_file(config_path), config_path.string());
  ModelFiles files;
  files.dir = dir;
  files.format = hf.model_type;
  files.config = hf.config;
  files.shards = open_shards(dir);
  const Config& c = files.config;
  const std::string prefix = hf_prefix(c.family);

  struct Located {
    std::size_t shard;
    std::string name;
    const TensorEntry* entry;
  };
  std::map<std::string, Located> by_name;  // names without the prefix
  for (std::size_t k = 0; k < files.shards.size(); ++k)
    for (const auto& [name, entry] : files.shards[k].view().tensors) {
      std::string key = name;
      if (name.compare(0, prefix.size(), prefix) == 0 && name.substr(prefix.size()) != "lm_head.weight")
        key = name.substr(prefix.size());
      const auto [it, inserted] = by_name.emplace(key, Located{k, name, &entry});
      if (!inserted) fail(dir, "tensor \"" + key + "\" appears twice (as \"" + it->second.name + "\" and \"" + name + "\")");
    }

  const auto layout = parameter_layout(c, make_plan(c));
  std::set<std::string> used;
  for (const HfTensor& t : hf_tensors(c)) {
    const auto it = by_name.find(t.name);
    const std::string shown = t.name == "lm_head.weight" ? t.name : prefix + t.name;
    if (it == by_name.end())
      fail(dir, "missing tensor \"" + shown + "\" (config.json implies " + shape_text(t.shape) + ")");
    const Located& at = it->second;
    const fs::path& file = files.shards[at.shard].path();
    require_float(file, at.name, *at.entry);
    if (!same_shape(at.entry->shape, t.shape))
      fail(file, "tensor \"" + at.name + "\" has shape " + shape_text(at.entry->shape) + " but config.json implies " +
                     shape_text(t.shape));
    used.insert(t.name);
    std::int64_t column = 0;
    for (const std::string& part : t.parts) {
      const engine::ParameterSpec& spec = layout.at(part);
      files.sources[part] = ModelFiles::Source{at.shard, at.name, at.entry, column, t.transposed};
      column += spec.shape.size() == 2 && !t.transposed ? spec.shape[1] : std::int64_t(spec.size());
    }
  }
  // A tied model's file may store the head too (transformers writes it and ties it on loading): the
  // embedding's bytes again, accepted as that; a head that differs contradicts config.json.
  auto embedding_copy = [&](const Located& head) {
    for (const HfTensor& t : hf_tensors(c))
      if (t.parts == std::vector<std::string>{"wte"}) {
        const Located& e = by_name.at(t.name);
        const auto a = files.shards[head.shard].view().bytes(*head.entry), b = files.shards[e.shard].view().bytes(*e.entry);
        return head.entry->dtype == e.entry->dtype && head.entry->shape == e.entry->shape &&
               std::equal(a.begin(), a.end(), b.begin(), b.end());
      }
    return false;
  };
  for (const auto& [key, at] : by_name) {
    const fs::path& file = files.shards[at.shard].path();
    if (used.count(key) || buffer_tensor(c, key, at.name, *at.entry, files.shards[at.shard].view(), file)) continue;
    if (key == "lm_head.weight" && c.tied) {
      if (embedding_copy(at)) continue;
      fail(file, "tensor \"lm_head.weight\" differs from the embedding, which config.json ties it to "
                 "(tie_word_embeddings)");
    }
    fail(file, "unknown tensor \"" + at.name + "\" (not in the " + hf.model_type + " layout for this config.json)");
  }
  if (files.sources.size() != layout.specs().size())
    throw std::logic_error("open_model: the HF table does not cover the parameter layout");
  return files;
}

// The tensor `spec` from its source, as float, into out (spec.size() entries).
void read_tensor(const ModelFiles& files, const engine::ParameterSpec& spec, const ModelFiles::Source& src,
                 std::vector<float>& block, float* out) {
  const TensorEntry& e = *src.entry;
  const std::uint8_t* base = files.shards[src.shard].view().bytes(e).data();
  const std::size_t es = engine::dtype_size(e.dtype);
  if (src.transposed) {  // stored [o, in] → ours [in, o], 16 stored rows at a time
    const std::size_t in = std::size_t(spec.shape[0]), o = std::size_t(spec.shape[1]);
    constexpr std::size_t kRows = 16;
    block.resize(kRows * in);
    for (std::size_t j0 = 0; j0 < o; j0 += kRows) {
      const std::size_t rows = std::min(kRows, o - j0);
      engine::decode_floats(e.dtype, base + j0 * in * es, rows * in, block.data());
      for (std::size_t i = 0; i < in; ++i)
        for (std::size_t j = 0; j < rows; ++j) out[i * o + j0 + j] = block[j * in + i];
    }
  } else if (spec.shape.size() == 2) {
    const std::size_t rows = std::size_t(spec.shape[0]), width = std::size_t(spec.shape[1]);
    const std::size_t cols = std::size_t(e.shape.back());
    for (std::size_t r = 0; r < rows; ++r)
      engine::decode_floats(e.dtype, base + (r * cols + std::size_t(src.column)) * es, width, out + r * width);
  } else {
    engine::decode_floats(e.dtype, base + std::size_t(src.column) * es, spec.size(), out);
  }
}

// Where the element k of the toolkit's tensor `spec` (read_tensor's output) lies in the stored tensor:
// transposed from [out, in], or a block of columns of a wider one (GPT-2's c_attn).
std::size_t stored_index(const engine::ParameterSpec& spec, const ModelFiles::Source& src, std::size_t k) {
  if (src.transposed) {
    const std::size_t in = std::size_t(spec.shape[0]), o = std::size_t(spec.shape[1]);
    return (k % o) * in + k / o;
  }
  if (spec.shape.size() == 2) {
    const std::size_t width = std::size_t(spec.shape[1]);
    return (k / width) * std::size_t(src.entry->shape.back()) + std::size_t(src.column) + k % width;
  }
  return std::size_t(src.column) + k;
}

// A weight that is NaN or ±Inf ends the load: no number computed from it could be trusted. The
// message gives the element's index in the stored tensor, as the file's reader would count it; a
// finite F64 value that became ±inf is named as what it is, beyond float's range.
void refuse_nonfinite(const ModelFiles& files, const engine::ParameterSpec& spec, const ModelFiles::Source& src,
                      const float* x) {
  for (std::size_t k = 0; k < spec.size(); ++k) {
    if (std::isfinite(x[k])) continue;
    const std::size_t at = stored_index(spec, src, k);
    const std::string tensor = files.shards[src.shard].path().string() + ": tensor \"" + src.name + "\"";
    const std::string value = std::isnan(x[k]) ? "nan" : x[k] > 0 ? "inf" : "-inf";
    double stored = 0;  // the F64 value as the file holds it (a little-endian host, as the reader)
    if (src.entry->dtype == engine::DType::F64)
      std::memcpy(&stored, files.shards[src.shard].view().bytes(*src.entry).data() + 8 * at, sizeof stored);
    if (src.entry->dtype == engine::DType::F64 && std::isfinite(stored))
      throw UsageError(tensor + " element " + std::to_string(at) + " (" + results::short_number(stored) +
                       ") overflows float32, the type weights are read into; a command's --allow-nonfinite, where it "
                       "has one, loads it as " + value);
    throw UsageError(tensor + " holds a non-finite weight (" + value + " at element " + std::to_string(at) +
                     "); a command's --allow-nonfinite, where it has one, loads it anyway");
  }
}

// The source holds spec: the geometry open_model established (a second check,
// so a caller's layout cannot make a read leave the tensor).
bool fits(const engine::ParameterSpec& spec, const ModelFiles::Source& src) {
  const TensorEntry& e = *src.entry;
  if (src.transposed)
    return spec.shape.size() == 2 && same_shape(e.shape, std::vector<std::int64_t>{spec.shape[1], spec.shape[0]});
  if (spec.shape.size() == 2)
    return e.shape.size() == 2 && std::int64_t(e.shape[0]) == spec.shape[0] && src.column >= 0 &&
           std::uint64_t(src.column + spec.shape[1]) <= e.shape[1];
  return spec.shape.size() == 1 && e.shape.size() == 1 && src.column >= 0 &&
         std::uint64_t(src.column) + spec.size() <= e.shape[0];
}

}  // namespace

ModelFiles open_model(const fs::path& dir) {
  if (!fs::is_directory(dir)) fail(dir, "not a directory");
  if (present(dir / "model.safetensors")) {  // a FIFO or a directory: "not a regular file"
    MappedSafeTensors file = map_file(dir / "model.safetensors");
    if (own_format(file.view())) return open_own(dir, std::move(file));
  } else {  // a qkvlab checkpoint's manifest names its missing model.safetensors before config.json is read as Hugging Face's
    verify_manifest_if_present(dir, false);
  }
  return open_hf(dir);
}

void read_parameters(const ModelFiles& files, const engine::ParameterLayout& layout, const ParameterSink& sink) {
  verify_manifest_if_present(files.dir, files.format == "qkvlab");
  std::size_t largest = 0;
  for (const auto& spec : layout.specs()) {
    const auto it = files.sources.find(spec.name);
    if (it == files.sources.end() || !fits(spec, it->second))
      throw std::invalid_argument("read_parameters: tensor " + spec.name + " of the layout is not in " +
                                  files.dir.string() + " with that shape");
    largest = std::max(largest, spec.size());
  }
  if (layout.specs().size() != files.sources.size())
    throw std::invalid_argument("read_parameters: the layout is not the configuration's of " + files.dir.string());
  std::vector<float> staging(largest), block;  // bounded by the file: every tensor was found in it
  for (const auto& spec : layout.specs()) {
    const ModelFiles::Source& src = files.sources.at(spec.name);
    read_tensor(files, spec, src, block, staging.data());
    if (!files.allow_nonfinite) refuse_nonfinite(files, spec, src, staging.data());
    files.shards[src.shard].release(*src.entry);  // a model as large as memory is read, not held twice
    sink(spec, staging.data());
  }
}

template <class S>
void load_parameters(const ModelFiles& files, Model<S>& model) {
  read_parameters(files, parameter_layout(model.config(), model.plan()), [&](const engine::ParameterSpec& spec, const float* x) {
    try {
      model.store(spec.name, x, spec.size());
    } catch (const WeightOverflow& e) {  // named as the file stores it
      const ModelFiles::Source& src = files.sources.at(spec.name);
      throw UsageError(files.shards[src.shard].path().string() + ": " +
                       WeightOverflow(src.name, stored_index(spec, src, e.element), e.value, e.type).what());
    }
  });
}

engine::WeightType stored_weight_type(const ModelFiles& files) {
  std::set<engine::DType> types;
  for (const auto& [name, src] : files.sources)
    if (src.entry->shape.size() == 2 && name != "wpe") types.insert(src.entry->dtype);
  if (types == std::set<engine::DType>{engine::DType::BF16}) return engine::WeightType::bf16;
  if (types == std::set<engine::DType>{engine::DType::F16}) return engine::WeightType::f16;
  return engine::WeightType::f32;
}

engine::WeightType weight_type_for(const ModelFiles& files, const std::string& dtype) {
  if (dtype == "auto") return stored_weight_type(files);
  if (dtype == "f32") return engine::WeightType::f32;
  if (dtype == "bf16") return engine::WeightType::bf16;
  if (dtype == "f16") return engine::WeightType::f16;
  throw UsageError("--dtype " + dtype + ": expected auto, f32, bf16 or f16");
}

std::unique_ptr<Model<float>> load_model(const fs::path& dir, engine::Backend<float>& backend, bool allow_nonfinite,
                                         const std::string& dtype) {
  return load_model(open_model(dir), backend, allow_nonfinite, dtype);
}

std::unique_ptr<Model<float>> load_model(ModelFiles files, engine::Backend<float>& backend, bool allow_nonfinite,
                                         const std::string& dtype) {
  files.allow_nonfinite = allow_nonfinite;
  auto model = std::make_unique<Model<float>>(files.config, backend, weight_type_for(files, dtype));
  load_parameters(files, *model);
  return model;
}

template void load_parameters<float>(const ModelFiles&, Model<float>&);
template void load_parameters<double>(const ModelFiles&, Model<double>&);

}  // namespace qkvlab::lm
