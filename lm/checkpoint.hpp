// The toolkit's own checkpoints: a directory holding
//   model.safetensors      every tensor of lm/parameters.hpp by name, F32, row-major; its
//                          __metadata__ holds "format" = "qkvlab-lm", the whole configuration
//                          (lm/config.hpp to_metadata) and the caller's entries (step, seed, …)
//   config.json            the same configuration as a JSON object, for people and other tools
//   optimizer.safetensors  (training only) AdamW's moments "m/NAME" and "v/NAME", F32, and its
//                          step count in __metadata__ "t": with the parameters and the data
//                          stream's (seed, step), all a run needs to continue bit for bit
// Each file is written atomically (whole or absent), config.json last.
// Reading maps the files (lm/model_files.hpp, the reader of Hugging Face
// directories too) and checks every tensor's name, dtype and shape against the
// layout the configuration implies before reading a value: a missing, unknown
// or mis-shaped tensor is a UsageError naming it. The values are decoded once,
// from the mapping into `values`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lm/config.hpp"

namespace qkvlab::lm {

struct OptimizerState {
  std::vector<float> m, v;  // in the parameter layout's order and offsets
  std::int64_t t = 0;
};

struct Checkpoint {
  Config config;
  std::vector<float> values;                    // the parameter layout's order and offsets
  std::map<std::string, std::string> metadata;  // extra __metadata__ entries (not the configuration)
  std::optional<OptimizerState> optimizer;
};

void save_checkpoint(const std::filesystem::path& dir, const Checkpoint& checkpoint);
Checkpoint load_checkpoint(const std::filesystem::path& dir, bool with_optimizer = false);
// True when dir holds a model.safetensors whose metadata says "qkvlab-lm".
bool is_own_checkpoint(const std::filesystem::path& dir);

// The configuration as a JSON object (numbers as numbers, booleans as booleans).
std::string config_json(const Config& config);

}  // namespace qkvlab::lm
