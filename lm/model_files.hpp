// A model directory, the toolkit's own checkpoint or a Hugging Face one, opened
// once and read tensor by tensor into any parameter layout's order:
//
//   lm::ModelFiles files = lm::open_model(dir);          // headers and config only
//   lm::Model<float> model(files.config, backend);
//   lm::load_parameters(files, model);                    // or, in one call:
//   std::unique_ptr<lm::Model<float>> m = lm::load_model(dir, backend);
//
// open_model recognizes
//   - an own checkpoint: model.safetensors whose __metadata__ says "format":
//     "qkvlab-lm" (lm/checkpoint.hpp); the configuration comes from the metadata;
//   - a Hugging Face directory: config.json (lm/hf_config.hpp) and either
//     model.safetensors or the shards listed by model.safetensors.index.json
//     (model.safetensors wins when both exist, as in transformers), with the
//     tensor names and layouts of lm/hf.hpp, each name with or without the
//     family's prefix. A directory without model.safetensors whose manifest.json is a
//     qkvlab checkpoint's is checked against it first (verify_manifest_if_present), so
//     a checkpoint missing its model.safetensors is named as such, not read as Hugging Face's.
// Every safetensors file is memory-mapped (engine::MappedSafeTensors) and its
// header validated against the file's size; then every tensor the
// configuration implies is found and its shape and dtype (F32, F16, BF16, F64)
// checked, and every tensor in the files accounted for, before any value is
// read. A missing tensor, an unknown one, a shape that disagrees with the
// configuration, an index that disagrees with its shards, an unsupported
// option: a UsageError of one line naming it (exit 2).
//
// Reading converts each tensor to float in one staging buffer the size of the
// largest tensor (a model holding 16-bit weights rounds them back: exact for the stored type) (Llama's [out, in] weights transposed, GPT-2's c_attn split
// into q, k, v) and hands it to a sink, which uploads it where it belongs: the
// checkpoint is never held twice, in host memory or on a device.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "engine/parameters.hpp"
#include "engine/safetensors.hpp"
#include "lm/config.hpp"
#include "lm/model.hpp"

namespace qkvlab::lm {

struct ModelFiles {
  std::filesystem::path dir;
  std::string format;  // "qkvlab" (own checkpoint) or the HF model_type: "gpt2", "llama", "mistral"
  Config config;
  std::map<std::string, std::string> metadata;  // own checkpoints: __metadata__ besides the configuration

  // Where each tensor of parameter_layout(config, make_plan(config)) lies: a
  // block of columns of a file tensor (the whole tensor but for GPT-2's
  // c_attn), or its transpose.
  struct Source {
    std::size_t shard = 0;
    std::string name;                          // the tensor's name in the file
    const engine::TensorEntry* entry = nullptr;
    std::int64_t column = 0;                   // first column along the stored last axis
    bool transposed = false;                   // stored [out, in]
  };
  std::vector<engine::MappedSafeTensors> shards;
  std::map<std::string, Source> sources;  // by the toolkit's tensor name
  // Weights holding NaN or ±Inf: refused by read_parameters (a UsageError naming
  // the file, the tensor, the element and the value) unless this is set
  // (--allow-nonfinite, cli/model_source.hpp).
  bool allow_nonfinite = false;
};

ModelFiles open_model(const std::filesystem::path& dir);

// Checks the directory's manifest.json (verify_manifest_if_present), then
// calls sink(spec, values) for every tensor of `layout` in its order, with
// spec.size() floats in the toolkit's row-major (in, out) layout; `values` is
// valid during the call only. The layout must be the configuration's
// (std::invalid_argument otherwise).
using ParameterSink = std::function<void(const engine::ParameterSpec& spec, const float* values)>;
void read_parameters(const ModelFiles& files, const engine::ParameterLayout& layout, const ParameterSink& sink);

// Uploads every tensor into the model's parameters (on its backend), one at a
// time, where the model holds it (Model::store: float, or 16 bits). The model must have been built
// with files.config.
template <class S>
void load_parameters(const ModelFiles& files, Model<S>& model);

// The type the files store the model's matrices in (every matrix but GPT-2's position table): bf16
// or f16 when all of them are stored so, f32 otherwise.
engine::WeightType stored_weight_type(const ModelFiles& files);
// --dtype (cli/dtype_option.hpp): "auto" (the stored type), "f32", "bf16", "f16"; UsageError otherwise.
engine::WeightType weight_type_for(const ModelFiles& files, const std::string& dtype);

// The model in `dir` (own or Hugging Face) on `backend`, its parameters loaded (non-finite weights
// refused unless allow_nonfinite), its matrices held as `dtype` says (weight_type_for).
std::unique_ptr<Model<float>> load_model(const std::filesystem::path& dir, engine::Backend<float>& backend,
                                         bool allow_nonfinite = false, const std::string& dtype = "f32");
// The same from a directory already opened (open_model), so that a command checks its inputs against
// files.config (vocabulary, positions) before any weight is read.
std::unique_ptr<Model<float>> load_model(ModelFiles files, engine::Backend<float>& backend, bool allow_nonfinite = false,
                                         const std::string& dtype = "f32");

extern template void load_parameters<float>(const ModelFiles&, Model<float>&);
extern template void load_parameters<double>(const ModelFiles&, Model<double>&);

}  // namespace qkvlab::lm
