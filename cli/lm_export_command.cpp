// `qkvlab lm export CKPT --hf DIR`: a vanilla model written in the Hugging Face
// layout of its family (lm/hf.hpp): config.json and model.safetensors (F32).
// `qkvlab lm convert CKPT --to skipv1 --method M --out DIR`: a vanilla model
// converted into SkipV1Former for uptraining (lm/convert.hpp).
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/format_option.hpp"
#include "cli/commands.hpp"
#include "cli/nonfinite_option.hpp"
#include "cli/output_paths.hpp"
#include "cli/validators.hpp"
#include "core/errors.hpp"
#include "lm/checkpoint.hpp"
#include "lm/convert.hpp"
#include "lm/eliminate.hpp"
#include "lm/hf.hpp"
#include "lm/parameters.hpp"
#include "results/value.hpp"

namespace qkvlab::cli {

namespace {

struct ExportArgs {
  std::string checkpoint, hf, format = "table";
  bool allow_nonfinite = false;
};

int run_export(const ExportArgs& a) {
  refuse_same_directory(a.checkpoint, "--hf", a.hf);
  const lm::Checkpoint ck = lm::explicit_queries(lm::load_checkpoint(a.checkpoint, false, a.allow_nonfinite));  // W_Q = I written out
  lm::hf_tensors(ck.config);  // refuses what the layout cannot hold before anything is written
  lm::export_hf(ck, a.hf);
  results::Value out = results::Value::object();
  out.set("checkpoint", a.checkpoint);
  out.set("hf", a.hf);
  out.set("model_type", ck.config.family == lm::Family::gpt2 ? "gpt2" : "llama");
  out.set("tensors", std::int64_t(lm::hf_tensors(ck.config).size()));
  out.set("parameters", std::int64_t(lm::parameter_layout(ck.config, lm::make_plan(ck.config)).count()));
  out.set("zero_biases", ck.config.family == lm::Family::gpt2 && !ck.config.bias);
  out.set("tokenizer", !ck.tokenizer_json.empty());  // tokenizer.json written beside the model
  std::cout << (a.format == "json" ? out.json() : out.text());
  return 0;
}

struct ConvertArgs {
  std::string checkpoint, to = "skipv1", method = "mean-v", out, format = "table";
  double skip_ratio = 0.5;
  bool allow_nonfinite = false;
};

int run_convert(const ConvertArgs& a) {
  refuse_same_directory(a.checkpoint, "--out", a.out);
  lm::require_model_destination(a.out, "--out");
  const lm::Checkpoint source = lm::load_checkpoint(a.checkpoint, false, a.allow_nonfinite);
  const lm::Checkpoint converted = lm::convert_to_skipv1(source, lm::parse_conversion(a.method), a.skip_ratio);
  lm::save_checkpoint(a.out, converted);
  const auto count = [](const lm::Config& c) { return std::int64_t(lm::parameter_layout(c, lm::make_plan(c)).count()); };
  results::Value out = results::Value::object();
  out.set("checkpoint", a.checkpoint), out.set("out", a.out), out.set("to", a.to), out.set("method", a.method);
  out.set("skip_ratio", a.skip_ratio);
  out.set("parameters_before", count(source.config)), out.set("parameters_after", count(converted.config));
  std::cout << (a.format == "json" ? out.json() : out.text());
  return 0;
}

}  // namespace

std::vector<Command> add_lm_export_commands(CLI::App& lm, const std::string&) {
  auto a = std::make_shared<ExportArgs>();
  auto* cmd = lm.add_subcommand("export", "Write a vanilla model in the Hugging Face layout of its family "
                                          "(config.json, model.safetensors in F32), loadable by transformers");
  cmd->add_option("CKPT", a->checkpoint, "The qkvlab checkpoint directory to export")->required();
  cmd->add_option("--hf", a->hf, "Directory to write (created if absent): new, empty, or an earlier export")->required();
  add_format_option(cmd, a->format);
  add_allow_nonfinite_option(cmd, a->allow_nonfinite, "they are then written as they are, exit 0");
  auto c = std::make_shared<ConvertArgs>();
  auto* convert = lm.add_subcommand("convert", "Convert a trained vanilla model into SkipV1Former for uptraining "
                                               "(SkipV1Former §5.1, App. B.1; methods: lm/convert.hpp)");
  convert->add_option("CKPT", c->checkpoint, "The vanilla model's qkvlab checkpoint directory")->required();
  convert->add_option("--to", c->to, "The variant to convert into")->check(CLI::IsMember({"skipv1"}))->capture_default_str();
  convert->add_option("--method", c->method,
                      "released-avg (= mean-v, the paper's Mean V), released-topk, released-topk1, released-svd "
                      "(= svd): the authors' released converter's functions as written; released-topk-as-run, "
                      "released-svd-as-run: what its script saves (W_O kept: its loop copies the original over the "
                      "function's; topk1 as run is topk as run); mean-v-adjacent, mean-vo, top-v, top-vo: "
                      "qkvlab's readings of App. B.1 (lm/convert.hpp)")
      ->check(CLI::IsMember(lm::conversion_names()))
      ->capture_default_str();
  convert->add_option("--skip-ratio", c->skip_ratio, "Share of value heads taken from layer 1")
      ->check(real_in(0.0, 1.0))
      ->capture_default_str();
  convert->add_option("--out", c->out, "Checkpoint directory to write: new, empty, or a model lm init, convert or eliminate wrote")->required();
  add_format_option(convert, c->format);
  add_allow_nonfinite_option(convert, c->allow_nonfinite,
                             "the converted model then holds them and what is computed from them, exit 0");
  return {{cmd, [a] { return run_export(*a); }}, {convert, [c] { return run_convert(*c); }}};
}

}  // namespace qkvlab::cli
