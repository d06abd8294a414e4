// `qkvlab lm eliminate CKPT --out DIR [--layers LIST]`: Query-weight elimination
// on a trained model (lm/eliminate.hpp), with each eliminated layer's verdict
// measured on token sequences.
#include <filesystem>
#include <iostream>

#include "cli/format_option.hpp"
#include "cli/output_paths.hpp"
#include "cli/plot_common.hpp"
#include "cli/commands.hpp"
#include "cli/device_option.hpp"
#include "cli/threads_option.hpp"
#include "cli/token_options.hpp"
#include "cli/validators.hpp"
#include "core/errors.hpp"
#include "engine/make_backend.hpp"
#include "lm/checkpoint.hpp"
#include "lm/eliminate.hpp"

namespace qkvlab::cli {

namespace {

struct EliminateArgs {
  std::string checkpoint, out, format = "table";
  TokenOptions input = [] {  // the command's defaults: 16 sequences of 128 tokens
    TokenOptions o;
    o.sequences = 16, o.seq_len = 128;
    return o;
  }();
  std::vector<int> layers;
  int batch = 8, threads = 0;
  std::uint64_t seed = 1;
  Device device = Device::cpu;
  bool quiet = false;
};

int run_eliminate(const EliminateArgs& a) {
  require_device(a.device);
  refuse_same_directory(a.checkpoint, "--out", a.out);
  lm::require_model_destination(a.out, "--out");
  const lm::Checkpoint source = lm::load_checkpoint(a.checkpoint);
  lm::checkpoint_step(source.metadata, std::filesystem::path(a.checkpoint) / "model.safetensors");  // copied into --out's manifest
  std::vector<int> layers = a.layers;
  if (layers.empty())
    for (int l = 1; l <= source.config.layers; ++l) layers.push_back(l);
  lm::eliminate_queries(source, layers);  // refuses what does not apply before anything is read or written
  const lm::TokenSequences data = read_token_sequences(a.input, a.checkpoint, a.seed, source.config, true);
  apply_threads(a.threads, BlasUse::per_worker);  // the CPU backend runs one product per worker
  const auto backend = engine::make_backend(a.device, a.threads);
  const Progress show{"lm eliminate", Progress::wanted(a.quiet)};
  const lm::EliminationReport report =
      lm::eliminate_and_measure(source, layers, data, *backend, a.batch,
                                [&](std::size_t done, std::size_t total) { show("models run", done, total); });
  lm::save_checkpoint(a.out, report.result.checkpoint);
  results::Value out = results::Value::object();
  out.set("checkpoint", a.checkpoint);
  out.set("out", a.out);
  out.set("tokens", tokens_value(a.input, data, a.seed));
  const results::Value measured = lm::report_value(report);
  for (std::size_t k = 0; k < measured.keys().size(); ++k) out.set(measured.keys()[k], measured.items()[k]);
  out.set("device", backend->description());
  std::cout << (a.format == "json" ? out.json() : out.text());
  return report.contradicted() ? 1 : 0;
}

}  // namespace

std::vector<Command> add_lm_eliminate_commands(CLI::App& lm, const std::string&) {
  auto a = std::make_shared<EliminateArgs>();
  auto* cmd = lm.add_subcommand("eliminate", "Query-weight elimination on a trained model: the chosen layers get "
                                             "W_Q = I (q-identity), every other weight a change of basis");
  cmd->footer("Each eliminated layer's verdict: exact where Theorem 4.1 covers it (no norm, one layer, no query\n"
              "bias) and the measured logits' relative error is within 1e3 u cond(W_Q) both in float (the\n"
              "written model) and in double (the transform unrounded, both models run in double); otherwise the\n"
              "measured change (logits' relative error, loss change). With several layers each entry measures\n"
              "the model with it and the layers before it eliminated. A tied head is untied (docs/lm.md).\n"
              "Exit status: 0, 1 when a covered layer's measurement contradicts the theorem, 2 usage error.");
  cmd->add_option("CKPT", a->checkpoint, "The qkvlab checkpoint directory")->required();
  cmd->add_option("--out", a->out, "Checkpoint directory to write the eliminated model to: new, empty, or a model lm init, "
                                             "convert or eliminate wrote")->required();
  add_list_option(cmd, "--layers", a->layers, "Layers to eliminate, 1 ... L, comma-separated (default: all)",
                  integer_in(1, 1 << 16));
  add_token_options(cmd, a->input);
  cmd->add_option("--seed", a->seed, "Seed of the random tokens or of the choice of sequences")
      ->check(seed_value)
      ->capture_default_str();
  cmd->add_option("--batch", a->batch, "Sequences per forward pass")->check(integer_in(1, 4096))->capture_default_str();
  add_device_option(cmd, a->device);
  add_threads_option(cmd, a->threads);
  add_format_option(cmd, a->format);
  cmd->add_flag("--quiet", a->quiet, "No progress on stderr");
  return {{cmd, [a] { return run_eliminate(*a); }}};
}

}  // namespace qkvlab::cli
