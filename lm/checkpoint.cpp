#include "lm/checkpoint.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/json_text.hpp"
#include "engine/safetensors.hpp"
#include "lm/describe.hpp"
#include "lm/model_files.hpp"
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

// The optimizer's moments "m/NAME" and "v/NAME", F32 exactly (a resumed run
// continues bit for bit), decoded from the mapped file into the layout's offsets.
OptimizerState read_optimizer(const fs::path& path, const engine::ParameterLayout& layout) {
  std::optional<engine::MappedSafeTensors> mapped;
  try {
    mapped.emplace(path);
  } catch (const std::runtime_error& e) {
    throw UsageError(e.what());
  }
  const engine::SafeTensorsView& file = mapped->view();
  for (const auto& [name, entry] : file.tensors)
    if ((name.rfind("m/", 0) != 0 && name.rfind("v/", 0) != 0) || !layout.find(name.substr(2)))
      throw UsageError(path.string() + ": unknown tensor \"" + name + "\" for this configuration");
  OptimizerState state{std::vector<float>(layout.total(), 0.0f), std::vector<float>(layout.total(), 0.0f), 0};
  for (const auto& spec : layout.specs())
    for (auto [prefix, values] : {std::pair{"m/", &state.m}, std::pair{"v/", &state.v}}) {
      const std::string key = prefix + spec.name;
      const auto it = file.tensors.find(key);
      if (it == file.tensors.end()) throw UsageError(path.string() + ": missing tensor \"" + key + "\"");
      const engine::TensorEntry& t = it->second;
      if (t.dtype != DType::F32 || t.elements() != spec.size() || t.shape.size() != spec.shape.size())
        throw UsageError(path.string() + ": tensor \"" + key + "\" is not F32 of the shape the configuration implies");
      engine::decode_floats(DType::F32, file.bytes(t).data(), spec.size(), values->data() + spec.offset);
    }
  const auto t = file.metadata.find("t");
  if (t == file.metadata.end()) throw UsageError(path.string() + ": no step count \"t\" in its metadata");
  try {
    state.t = std::stoll(t->second);
  } catch (const std::exception&) {
    throw UsageError(path.string() + ": the step count \"t\" is not an integer: " + t->second);
  }
  return state;
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
    const engine::MappedSafeTensors file(path);  // the header only: no tensor byte is read
    const auto it = file.view().metadata.find("format");
    return it != file.view().metadata.end() && it->second == kFormat;
  } catch (const std::exception&) {
    return false;
  }
}

Checkpoint load_checkpoint(const fs::path& dir, bool with_optimizer) {
  const fs::path path = dir / "model.safetensors";
  if (!fs::is_regular_file(path)) throw UsageError(dir.string() + ": no model.safetensors in this directory");
  if (!is_own_checkpoint(dir)) {
    try {
      engine::MappedSafeTensors{path};  // a malformed file reports its own error first
    } catch (const std::runtime_error& e) {
      throw UsageError(e.what());
    }
    throw UsageError(path.string() + ": not a qkvlab checkpoint (no \"format\": \"qkvlab-lm\" in its metadata)");
  }
  const ModelFiles files = open_model(dir);
  Checkpoint ck;
  ck.config = files.config;
  ck.metadata = files.metadata;
  const auto layout = parameter_layout(ck.config, make_plan(ck.config));
  ck.values.assign(layout.total(), 0.0f);
  read_parameters(files, layout, [&](const engine::ParameterSpec& spec, const float* x) {
    std::copy(x, x + spec.size(), ck.values.begin() + std::ptrdiff_t(spec.offset));
  });
  if (!with_optimizer) return ck;
  const fs::path opt_path = dir / "optimizer.safetensors";
  if (!fs::is_regular_file(opt_path)) throw UsageError(dir.string() + ": no optimizer.safetensors to resume from");
  ck.optimizer = read_optimizer(opt_path, layout);
  return ck;
}

}  // namespace qkvlab::lm
