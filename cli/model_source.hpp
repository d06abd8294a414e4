// Where `qkvlab params` and `qkvlab kv` take a model from: a checkpoint
// directory (own or Hugging Face, lm/model_files.hpp; only its configuration
// and headers are read) or the model flags of `lm init` (cli/model_options.hpp),
// not both.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "cli/model_options.hpp"
#include "lm/config.hpp"

namespace qkvlab::cli {

struct ModelSource {
  std::string dir;
  ModelOptions flags;
  std::vector<const CLI::Option*> flag_options;  // the model flags, to tell whether any was given
};

void add_model_source(CLI::App* cmd, ModelSource& source);

// The configuration: the directory's, or the flags'. UsageError when both are given.
lm::Config model_config(const ModelSource& source);

}  // namespace qkvlab::cli
