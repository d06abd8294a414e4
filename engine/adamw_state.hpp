// AdamW's state in a safetensors file: the one format of lm/'s optimizer.safetensors and of
// `qkvlab transfer`'s checkpoints (synthetic/transfer.cpp). For every tensor NAME of a ParameterLayout:
//
//   "m/NAME", "v/NAME"   F32 of NAME's shape: the moments m and v of engine/kernels/adamw.hpp
//   __metadata__ "t"     the updates taken (engine/optimizer.hpp's AdamWState::t), a decimal integer ≥ 0
//
// The moments are stored bit for bit, so a resumed run continues bit for bit. Reading checks
// everything a resumed run relies on: each moment present, F32 of its tensor's shape, finite, v ≥ 0,
// and t a non-negative integer; otherwise a std::runtime_error naming the tensor or field (the caller
// adds the file's path).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/parameters.hpp"
#include "engine/safetensors.hpp"

namespace qkvlab::engine {

// AdamWState's m, v (in the layout's order and offsets) and t, on the host.
struct AdamWHostState {
  std::vector<float> m, v;
  std::int64_t t = 0;
};

inline constexpr const char* kAdamWStepKey = "t";
// "m/NAME" (moment 'm') or "v/NAME" (moment 'v').
std::string adamw_moment_name(char moment, const std::string& tensor);
// Whether `name` is "m/NAME" or "v/NAME" for a tensor NAME of the layout.
bool is_adamw_tensor(const std::string& name, const ParameterLayout& layout);

// The F32 tensor of `spec`'s shape holding values[spec.offset, spec.offset + spec.size()).
Tensor tensor_of(const ParameterSpec& spec, const std::vector<float>& values);

// Adds the moments and "t" to `file` (its other tensors and metadata are left as they are).
void write_adamw_state(SafeTensors& file, const ParameterLayout& layout, const AdamWHostState& state);
AdamWHostState read_adamw_state(const SafeTensorsView& file, const ParameterLayout& layout);
AdamWHostState read_adamw_state(const SafeTensors& file, const ParameterLayout& layout);

// The metadata entry `key` as a decimal integer: std::runtime_error naming the key when it is missing
// ("no \"KEY\" in its metadata") or not one ("\"KEY\" is not an integer: \"TEXT\"").
std::int64_t metadata_integer(const std::map<std::string, std::string>& metadata, const std::string& key);

}  // namespace qkvlab::engine
