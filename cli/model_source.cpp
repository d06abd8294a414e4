#include "cli/model_source.hpp"

#include "core/errors.hpp"
#include "lm/model_files.hpp"

namespace qkvlab::cli {

void add_model_source(CLI::App* cmd, ModelSource& s) {
  cmd->add_option("DIR", s.dir, "A model directory: a qkvlab checkpoint or a Hugging Face one (config.json and "
                                "safetensors); without it the model flags describe the model")
      ->check(CLI::ExistingDirectory);
  const std::size_t before = cmd->get_options().size();
  add_model_options(cmd, s.flags);
  const auto options = cmd->get_options();
  s.flag_options.assign(options.begin() + std::ptrdiff_t(before), options.end());
}

lm::Config model_config(const ModelSource& s) {
  if (s.dir.empty()) return model_config(s.flags);
  for (const CLI::Option* option : s.flag_options)
    if (option->count() > 0)
      throw UsageError("give a model directory or model flags, not both (" + option->get_name() + " with " + s.dir + ")");
  return lm::open_model(s.dir).config;
}

}  // namespace qkvlab::cli
