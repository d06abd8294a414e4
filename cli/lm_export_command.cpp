// `qkvlab lm export CKPT --hf DIR`: a vanilla model written in the Hugging Face
// layout of its family (lm/hf.hpp): config.json and model.safetensors (F32).
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "core/errors.hpp"
#include "lm/checkpoint.hpp"
#include "lm/hf.hpp"
#include "lm/parameters.hpp"
#include "results/value.hpp"

namespace qkvlab::cli {

namespace {

struct ExportArgs {
  std::string checkpoint, hf, format = "table";
};

int run_export(const ExportArgs& a) {
  if (std::filesystem::exists(std::filesystem::path(a.hf) / "model.safetensors.index.json"))
    throw UsageError("--hf " + a.hf + " holds a model.safetensors.index.json: export into an empty directory");
  const lm::Checkpoint ck = lm::load_checkpoint(a.checkpoint);
  lm::hf_tensors(ck.config);  // refuses what the layout cannot hold before anything is written
  lm::export_hf(ck, a.hf);
  results::Value out = results::Value::object();
  out.set("checkpoint", a.checkpoint);
  out.set("hf", a.hf);
  out.set("model_type", ck.config.family == lm::Family::gpt2 ? "gpt2" : "llama");
  out.set("tensors", std::int64_t(lm::hf_tensors(ck.config).size()));
  out.set("parameters", std::int64_t(lm::parameter_layout(ck.config, lm::make_plan(ck.config)).count()));
  out.set("zero_biases", ck.config.family == lm::Family::gpt2 && !ck.config.bias);
  std::cout << (a.format == "json" ? out.json() : out.text());
  return 0;
}

}  // namespace

std::vector<Command> add_lm_export_commands(CLI::App& lm, const std::string&) {
  auto a = std::make_shared<ExportArgs>();
  auto* cmd = lm.add_subcommand("export", "Write a vanilla model in the Hugging Face layout of its family "
                                          "(config.json, model.safetensors in F32), loadable by transformers");
  cmd->add_option("CKPT", a->checkpoint, "The qkvlab checkpoint directory to export")->required();
  cmd->add_option("--hf", a->hf, "Directory to write (created if absent)")->required();
  cmd->add_option("--format", a->format, "Output: table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  return {{cmd, [a] { return run_export(*a); }}};
}

}  // namespace qkvlab::cli
