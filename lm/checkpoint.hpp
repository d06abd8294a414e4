// The toolkit's own checkpoints: a directory holding
//   model.safetensors      every tensor of lm/parameters.hpp by name, F32, row-major; its
//                          __metadata__ holds "format" = "qkvlab-lm", the whole configuration
//                          (lm/config.hpp to_metadata) and the caller's entries (step, seed, …)
//   config.json            the same configuration as a JSON object, for people and other tools
//   tokenizer.json         (when the model was trained on a corpus with a tokenizer) the tokenizer
//                          in Hugging Face's format (lm/tokenizer.hpp), carried on by every rewrite
//                          (a save without one removes the one a directory held)
//   optimizer.safetensors  (training only) AdamW's moments "m/NAME" and "v/NAME", F32, and its
//                          step count in __metadata__ "t" (engine/adamw_state.hpp's format, which
//                          `qkvlab transfer`'s checkpoints share): with the parameters and the data
//                          stream's (seed, step), all a run needs to continue bit for bit; a
//                          save without optimizer state removes the one a directory held
//   manifest.json          written last: each file's size and FNV-1a checksum (core/fnv.hpp), the
//                          metadata's "step", the optimizer's "t" and the run's "run_id" when given
// Each file is written atomically (whole or absent); the old manifest.json is
// removed before the first of them and the new one written after the last, so a
// write cut short (a kill between two renames) leaves a directory without a
// manifest. A model saved without optimizer state (lm init, convert, eliminate:
// written in place, over an earlier model) says "manifest": "manifest.json" in
// model.safetensors's metadata (since 2026-11-27), and a reader refuses it without
// its manifest instead of loading a mix of two writes; lm train's checkpoints are
// swapped in whole, and a copy of their model without the optimizer state its
// manifest lists stays readable.
// Reading checks a manifest that is present against the files (size,
// checksum, step, t), and reading the optimizer (--resume) requires one: a
// checkpoint whose files come from different writes is a UsageError, never
// loaded. The optimizer file's metadata repeats the model's "step" and "run_id"
// (a random identity a training run draws once and keeps when it resumes), so
// an optimizer file copied from another run or step is refused as well; its
// moments must be finite, v ≥ 0 and t ≥ 0.
// Non-finite weights are refused when read (lm/model_files.hpp) unless
// allow_nonfinite.
// Reading maps the files (lm/model_files.hpp, the reader of Hugging Face
// directories too) and checks every tensor's name, dtype and shape against the
// layout the configuration implies before reading a value: a missing, unknown
// or mis-shaped tensor is a UsageError naming it. The values are decoded once,
// from the mapping into `values`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/adamw_state.hpp"
#include "lm/config.hpp"

namespace qkvlab::lm {

using OptimizerState = engine::AdamWHostState;  // in the parameter layout's order and offsets

struct Checkpoint {
  Config config;
  std::vector<float> values;                    // the parameter layout's order and offsets
  std::map<std::string, std::string> metadata;  // extra __metadata__ entries (not the configuration)
  std::optional<OptimizerState> optimizer;
  std::string tokenizer_json;  // the text of tokenizer.json; empty: the checkpoint has none
};

void save_checkpoint(const std::filesystem::path& dir, const Checkpoint& checkpoint);
Checkpoint load_checkpoint(const std::filesystem::path& dir, bool with_optimizer = false, bool allow_nonfinite = false);

// A metadata entry that must be a decimal integer ("step", "t"): a UsageError
// naming the file and the field when it is missing or is not one.
std::int64_t metadata_integer(const std::map<std::string, std::string>& metadata, const std::string& key,
                              const std::filesystem::path& file);

// The metadata's "step" as a manifest holds it (absent, or a non-negative integer): otherwise a UsageError
// naming the file. save_checkpoint writes no manifest that read_manifest would refuse; a writer that copies
// its source's metadata (lm eliminate) checks it before its work.
std::optional<std::int64_t> checkpoint_step(const std::map<std::string, std::string>& metadata,
                                            const std::filesystem::path& file);

// A manifest of other files in the same form ("format", then "files": each
// file's "bytes" and "fnv1a64"), e.g. reproduce's record of a cached run
// directory: `names` are paths relative to dir.
std::string files_manifest_json(const std::filesystem::path& dir, const std::vector<std::string>& names,
                                const std::string& format);
// Every file `manifest` lists (relative to dir, never outside it) is there with its size and checksum:
// otherwise a UsageError naming the file (or the manifest, when it is missing or malformed), with `what`
// saying what a differing file means.
void verify_files_manifest(const std::filesystem::path& dir, const std::filesystem::path& manifest,
                           const std::string& what);

// A checkpoint's manifest.json lists files of one write: each is there with its size and checksum, or a
// UsageError names the file. read_parameters calls it, so every reader of a model's values (lm eval,
// analyze, verify --checkpoint, a resume) refuses mixed files. In a directory that is not an own
// checkpoint (a Hugging Face one) only a manifest of the checkpoints' format is checked; another
// tool's manifest.json is left alone. The files are hashed once per process while they are unchanged.
void verify_manifest_if_present(const std::filesystem::path& dir, bool own_checkpoint);

// For tests: called with each file's name once it is in place, in the order
// written (optimizer.safetensors, model.safetensors, config.json,
// tokenizer.json when there is one, manifest.json). A hook that throws leaves the directory as a kill at that
// point would. An empty function removes the hook.
void set_checkpoint_write_hook(std::function<void(const std::string& file)> hook);
// True when dir holds a model.safetensors whose metadata says "qkvlab-lm".
bool is_own_checkpoint(const std::filesystem::path& dir);

// Where lm init, lm convert and lm eliminate may save a model (save_checkpoint replaces or removes
// model.safetensors, config.json, manifest.json, tokenizer.json and optimizer.safetensors): a new or
// empty directory, one holding none of those files (the others are left alone), or a model these
// commands wrote: one with their mark, "manifest" in its metadata (save_checkpoint writes it into a
// model saved without optimizer state, since 2026-11-27), and no run_id. Otherwise a UsageError naming
// `option` and what is there: a training run's checkpoint (optimizer.safetensors), its trained model
// copied without that state (run_id, or, copied before run_id existed, no mark), their own models
// written before the mark, a prepared corpus or another tool's manifest.json, a Hugging Face model
// are never replaced.
void require_model_destination(const std::filesystem::path& dir, const std::string& option);

// The configuration as a JSON object (numbers as numbers, booleans as booleans).
std::string config_json(const Config& config);

}  // namespace qkvlab::lm
