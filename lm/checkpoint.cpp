#include "lm/checkpoint.hpp"

#include <cstring>

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/json_text.hpp"
#include "engine/safetensors.hpp"
#include "lm/describe.hpp"
#include "lm/parameters.hpp"

namespace qkvlab::lm {

namespace fs = std::filesystem;
using engine::DType;
using engine::SafeTensors;
using engine::Tensor;

namespace {

constexpr const char* kFormat = "qkvlab-lm";

Tensor tensor_of(const engine::ParameterSpec& spec, const std::vector<float>& values) {
  Tensor t;
  t.dtype = DType::F32;
  for (auto s : spec.shape) t.shape.push_back(std::uint64_t(s));
  t.data.resize(spec.size() * sizeof(float));
  std::memcpy(t.data.data(), values.data() + spec.offset, t.data.size());
  return t;
}

void read_into(const SafeTensors& file, const std::string& key, const engine::ParameterSpec& spec,
               std::vector<float>& values, const fs::path& path) {
  const auto it = file.tensors.find(key);
  if (it == file.tensors.end()) throw UsageError(path.string() + ": missing tensor \"" + key + "\"");
  const Tensor& t = it->second;
  std::vector<std::uint64_t> shape(spec.shape.begin(), spec.shape.end());
  if (t.dtype != DType::F32 || t.shape != shape)
    throw UsageError(path.string() + ": tensor \"" + key + "\" is not F32 of the shape the configuration implies");
  std::memcpy(values.data() + spec.offset, t.data.data(), t.data.size());
}

void refuse_unknown(const SafeTensors& file, const engine::ParameterLayout& layout, const fs::path& path,
                    bool optimizer) {
  for (const auto& [name, tensor] : file.tensors) {
    const std::string base = optimizer && name.size() > 2 ? name.substr(2) : name;
    if (!layout.find(base) || (optimizer && name.rfind("m/", 0) != 0 && name.rfind("v/", 0) != 0))
      throw UsageError(path.string() + ": unknown tensor \"" + name + "\" for this configuration");
  }
}

}  // namespace

std::string config_json(const Config& c) { return config_value(c).json(); }

void save_checkpoint(const fs::path& dir, const Checkpoint& ck) {
  const auto layout = parameter_layout(ck.config, make_plan(ck.config));
  if (ck.values.size() != layout.total())
    throw std::invalid_argument("save_checkpoint: the values do not match the configuration's layout");
  fs::create_directories(dir);
  if (ck.optimizer) {
    SafeTensors opt;
    for (const auto& spec : layout.specs()) {
      opt.tensors["m/" + spec.name] = tensor_of(spec, ck.optimizer->m);
      opt.tensors["v/" + spec.name] = tensor_of(spec, ck.optimizer->v);
    }
    opt.metadata["format"] = kFormat;
    opt.metadata["t"] = std::to_string(ck.optimizer->t);
    engine::save_safetensors(dir / "optimizer.safetensors", opt);
  }
  SafeTensors model;
  for (const auto& spec : layout.specs()) model.tensors[spec.name] = tensor_of(spec, ck.values);
  model.metadata = ck.metadata;
  for (const auto& [key, value] : to_metadata(ck.config)) model.metadata[key] = value;
  model.metadata["format"] = kFormat;
  engine::save_safetensors(dir / "model.safetensors", model);
  write_bytes_atomically(dir / "config.json", "JSON", config_json(ck.config));
}

bool is_own_checkpoint(const fs::path& dir) {
  const fs::path path = dir / "model.safetensors";
  if (!fs::is_regular_file(path)) return false;
  try {
    const auto file = engine::load_safetensors(path);
    const auto it = file.metadata.find("format");
    return it != file.metadata.end() && it->second == kFormat;
  } catch (const std::exception&) {
    return false;
  }
}

Checkpoint load_checkpoint(const fs::path& dir, bool with_optimizer) {
  const fs::path path = dir / "model.safetensors";
  if (!fs::is_regular_file(path)) throw UsageError(dir.string() + ": no model.safetensors in this directory");
  SafeTensors file;
  try {
    file = engine::load_safetensors(path);
  } catch (const std::runtime_error& e) {
    throw UsageError(e.what());
  }
  const auto format = file.metadata.find("format");
  if (format == file.metadata.end() || format->second != kFormat)
    throw UsageError(path.string() + ": not a qkvlab checkpoint (no \"format\": \"qkvlab-lm\" in its metadata)");
  Checkpoint ck;
  ck.config = from_metadata(file.metadata);
  const auto layout = parameter_layout(ck.config, make_plan(ck.config));
  const auto config_keys = to_metadata(ck.config);
  for (const auto& [key, value] : file.metadata)
    if (!config_keys.count(key) && key != "format") ck.metadata[key] = value;
  refuse_unknown(file, layout, path, false);
  ck.values.assign(layout.total(), 0.0f);
  for (const auto& spec : layout.specs()) read_into(file, spec.name, spec, ck.values, path);
  if (!with_optimizer) return ck;
  const fs::path opt_path = dir / "optimizer.safetensors";
  if (!fs::is_regular_file(opt_path)) throw UsageError(dir.string() + ": no optimizer.safetensors to resume from");
  const SafeTensors opt = engine::load_safetensors(opt_path);
  refuse_unknown(opt, layout, opt_path, true);
  OptimizerState state{std::vector<float>(layout.total(), 0.0f), std::vector<float>(layout.total(), 0.0f), 0};
  for (const auto& spec : layout.specs()) {
    read_into(opt, "m/" + spec.name, spec, state.m, opt_path);
    read_into(opt, "v/" + spec.name, spec, state.v, opt_path);
  }
  const auto t = opt.metadata.find("t");
  if (t == opt.metadata.end()) throw UsageError(opt_path.string() + ": no step count \"t\" in its metadata");
  state.t = std::stoll(t->second);
  ck.optimizer = std::move(state);
  return ck;
}

}  // namespace qkvlab::lm
