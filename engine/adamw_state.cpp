#include "engine/adamw_state.hpp"

#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>

#include "core/json_text.hpp"

namespace qkvlab::engine {

namespace {

// What the reader needs of one stored tensor, from a parsed file or from a view of one.
struct StoredTensor {
  DType dtype;
  const std::vector<std::uint64_t>* shape;
  std::span<const std::uint8_t> bytes;
};
using Lookup = std::function<std::optional<StoredTensor>(const std::string&)>;

std::string shown(float x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return json_number(x);
}

void read_moment(const StoredTensor& t, const std::string& key, const ParameterSpec& spec, char moment, float* x) {
  std::uint64_t elements = 1;
  for (auto s : *t.shape) elements *= s;
  if (t.dtype != DType::F32 || elements != spec.size() || t.shape->size() != spec.shape.size())
    throw std::runtime_error("tensor \"" + key + "\" is not F32 of the shape the configuration implies");
  decode_floats(DType::F32, t.bytes.data(), spec.size(), x);
  for (std::size_t k = 0; k < spec.size(); ++k)
    if (!std::isfinite(x[k]) || (moment == 'v' && x[k] < 0))
      throw std::runtime_error("tensor \"" + key + "\" holds " + shown(x[k]) + " at element " + std::to_string(k) +
                               " (the moments must be finite, v non-negative)");
}

AdamWHostState read_state(const Lookup& find, const std::map<std::string, std::string>& metadata,
                          const ParameterLayout& layout) {
  AdamWHostState state{std::vector<float>(layout.total(), 0.0f), std::vector<float>(layout.total(), 0.0f), 0};
  for (const auto& spec : layout.specs())
    for (auto [moment, values] : {std::pair{'m', &state.m}, std::pair{'v', &state.v}}) {
      const std::string key = adamw_moment_name(moment, spec.name);
      const std::optional<StoredTensor> t = find(key);
      if (!t) throw std::runtime_error("missing tensor \"" + key + "\"");
      read_moment(*t, key, spec, moment, values->data() + spec.offset);
    }
  state.t = metadata_integer(metadata, kAdamWStepKey);
  if (state.t < 0) throw std::runtime_error("the step count \"t\" is negative: " + std::to_string(state.t));
  return state;
}

}  // namespace

std::string adamw_moment_name(char moment, const std::string& tensor) { return std::string(1, moment) + "/" + tensor; }

bool is_adamw_tensor(const std::string& name, const ParameterLayout& layout) {
  return (name.rfind("m/", 0) == 0 || name.rfind("v/", 0) == 0) && layout.find(name.substr(2));
}

Tensor tensor_of(const ParameterSpec& spec, const std::vector<float>& values) {
  Tensor t;
  t.dtype = DType::F32;
  for (auto s : spec.shape) t.shape.push_back(std::uint64_t(s));
  t.data.resize(spec.size() * sizeof(float));
  std::memcpy(t.data.data(), values.data() + spec.offset, t.data.size());
  return t;
}

void write_adamw_state(SafeTensors& file, const ParameterLayout& layout, const AdamWHostState& state) {
  for (const auto& spec : layout.specs()) {
    file.tensors[adamw_moment_name('m', spec.name)] = tensor_of(spec, state.m);
    file.tensors[adamw_moment_name('v', spec.name)] = tensor_of(spec, state.v);
  }
  file.metadata[kAdamWStepKey] = std::to_string(state.t);
}

AdamWHostState read_adamw_state(const SafeTensorsView& file, const ParameterLayout& layout) {
  return read_state(
      [&](const std::string& key) -> std::optional<StoredTensor> {
        const auto it = file.tensors.find(key);
        if (it == file.tensors.end()) return std::nullopt;
        return StoredTensor{it->second.dtype, &it->second.shape, file.bytes(it->second)};
      },
      file.metadata, layout);
}

AdamWHostState read_adamw_state(const SafeTensors& file, const ParameterLayout& layout) {
  return read_state(
      [&](const std::string& key) -> std::optional<StoredTensor> {
        const auto it = file.tensors.find(key);
        if (it == file.tensors.end()) return std::nullopt;
        return StoredTensor{it->second.dtype, &it->second.shape, it->second.data};
      },
      file.metadata, layout);
}

std::int64_t metadata_integer(const std::map<std::string, std::string>& metadata, const std::string& key) {
  const auto it = metadata.find(key);
  if (it == metadata.end()) throw std::runtime_error("no \"" + key + "\" in its metadata");
  std::int64_t n = 0;
  const std::string& text = it->second;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    throw std::runtime_error("\"" + key + "\" is not an integer: " + json_quote(text));
  return n;
}

}  // namespace qkvlab::engine
