// `qkvlab probe CKPT`: layerwise linear probes of a frozen model (probes/layerwise.hpp).
#include <iostream>
#include <optional>

#include "cli/output_paths.hpp"
#include "cli/format_option.hpp"
#include "cli/threads_option.hpp"
#include "cli/commands.hpp"
#include "cli/device_option.hpp"
#include "cli/nonfinite_option.hpp"
#include "cli/plot_common.hpp"
#include "cli/token_options.hpp"
#include "cli/validators.hpp"
#include "core/atomic_file.hpp"
#include "corpus/token_file.hpp"
#include "engine/make_backend.hpp"
#include "lm/model_files.hpp"
#include "probes/layerwise.hpp"
#include "probes/probe_data.hpp"

namespace qkvlab::cli {

namespace {

struct ProbeArgs {
  std::string checkpoint, corpus, data = "data/brown", tokens, text, val_tokens, target = "next", init = "model";
  std::string recipe = "qkvlab";
  std::optional<int> eval_windows;
  std::string format = "table", out, csv, figure;
  probes::ProbeOptions options;
  int threads = 0;
  Device device = Device::cpu;
  bool quiet = false, allow_nonfinite = false;
};

// The options' one source of tokens, checked, read (probes/probe_data.hpp).
probes::ProbeData probe_data(const ProbeArgs& a) {
  if (int(!a.corpus.empty()) + int(!a.tokens.empty()) + int(!a.text.empty()) != 1)
    throw UsageError("give one of --corpus brown, --tokens FILE and --text FILE");
  if (a.target == "pos" && a.corpus.empty()) throw UsageError("--target pos needs --corpus brown (the tags come with it)");
  if (!a.corpus.empty() && !a.val_tokens.empty())
    throw UsageError("--val-tokens goes with --tokens or --text: --corpus brown validates on its validation split");
  if (!a.corpus.empty()) return probes::corpus_probe_data(a.data, a.target == "pos");
  auto train = a.text.empty() ? corpus::read_token_file(a.tokens).ids : text_token_ids(a.text, a.checkpoint);
  std::optional<std::vector<std::int32_t>> validation;
  if (!a.val_tokens.empty()) validation = corpus::read_token_file(a.val_tokens).ids;
  return probes::stream_probe_data(std::move(train), std::move(validation));
}

// --figure STEM as in every command that draws one (plot_common.hpp): its numbers go beside it to
// STEM.csv, or, when --csv names that same file, only there.
std::string figure_data(const ProbeArgs& a) {
  const std::string data = figure_table(a.figure);
  return !a.csv.empty() && same_file(data, a.csv) ? a.csv : data;
}

// The streams and sizes against the model's configuration: ids inside its vocabulary, --seq-len within
// its positions, and --eval-windows within the consecutive windows the validation stream holds
// (qkvlab's recipe; refused as --sequences is: the default takes up to 64, the output records those used).
void check_probe_data(const ProbeArgs& a, const probes::ProbeOptions& o, const probes::ProbeData& data,
                      const lm::Config& config) {
  for (const auto* s : {&data.train, &data.validation})
    for (std::int32_t id : *s)
      if (id >= config.vocab)
        throw UsageError("token id " + std::to_string(id) + " is outside the model's vocabulary of " +
                         std::to_string(config.vocab));
  if (a.options.seq_len > config.positions)
    throw UsageError("--seq-len " + std::to_string(a.options.seq_len) + " is longer than the model's positions");
  const std::size_t held = (data.validation.size() - 1) / std::size_t(o.seq_len);
  if (a.eval_windows && o.recipe == probes::ProbeRecipe::qkvlab && std::size_t(*a.eval_windows) > held)
    throw UsageError("--eval-windows " + std::to_string(*a.eval_windows) + ": the validation stream holds " +
                     std::to_string(held) + " windows of " + std::to_string(o.seq_len) + " tokens");
}

int run_probe(const ProbeArgs& a, const std::string& command_line) {
  require_device(a.device);
  refuse_files_in(a.checkpoint, {{"--out", &a.out}, {"--csv", &a.csv}, {"--figure", &a.figure}});
  if (!a.corpus.empty()) refuse_files_in(a.data, {{"--out", &a.out}, {"--csv", &a.csv}, {"--figure", &a.figure}});
  FileList outputs{{"--out", a.out}, {"--csv", a.csv}};
  if (!a.figure.empty()) {
    for (const auto& f : results::figure_files(a.figure)) outputs.emplace_back("--figure", f.string());
    if (const std::string data = figure_data(a); data != a.csv) outputs.emplace_back("--figure", data);
  }
  require_output_directories(outputs);
  refuse_overlapping_files(outputs, {{"--tokens", a.tokens}, {"--text", a.text}, {"--val-tokens", a.val_tokens}});
  probes::ProbeOptions o = a.options;
  if (o.steps > 0 && o.warmup >= o.steps)
    throw UsageError("--warmup " + std::to_string(o.warmup) + " must be less than --steps " + std::to_string(o.steps));
  o.tags = a.target == "pos", o.init_model = a.init == "model";
  o.recipe = a.recipe == "released" ? probes::ProbeRecipe::released : probes::ProbeRecipe::qkvlab;
  o.eval_windows = a.eval_windows.value_or(o.recipe == probes::ProbeRecipe::released ? 64 * o.batch : 64);
  const probes::ProbeData data = probe_data(a);
  apply_threads(a.threads, BlasUse::per_worker);  // the CPU backend runs one product per worker
  const auto backend = engine::make_backend(a.device, a.threads);
  lm::ModelFiles model_files = lm::open_model(a.checkpoint);  // the tokens are checked against its config first
  check_probe_data(a, o, data, model_files.config);
  const auto model = lm::load_model(std::move(model_files), *backend, a.allow_nonfinite);
  const Progress show{"probe", Progress::wanted(a.quiet)};
  const probes::ProbeReport r = probes::run_probes(*model, data, o, [&](std::int64_t done, std::int64_t total) {
    show("steps", std::size_t(done), std::size_t(total));
  });
  if (!r.nonfinite.empty()) return report_nonfinite("probe", r.nonfinite);
  results::Value v = r.to_value();
  v.set("checkpoint", a.checkpoint);
  v.set("tokens", !a.text.empty() ? "text " + a.text : a.tokens.empty() ? "corpus " + a.corpus + " (" + a.data + ")" : a.tokens);
  v.set("device", backend->description());
  v.set("command_line", command_line);
  StagedFiles files;  // the HDF5, the CSV and the figure: all or none
  files.protect(a.tokens, "--tokens"), files.protect(a.text, "--text"), files.protect(a.val_tokens, "--val-tokens");
  if (!a.out.empty()) results::stage_tables_hdf5(files, a.out, {r.table}, o.seed, command_line);
  if (!a.csv.empty()) results::stage_csv(files, a.csv, r.table);
  if (!a.figure.empty()) {
    if (const std::string data = figure_data(a); data != a.csv) results::stage_csv(files, data, r.table);
    results::stage_figure(files, r.figure, r.table, a.figure);
  }
  files.commit();
  std::cout << (a.format == "json" ? v.json() : v.text());
  return 0;
}

}  // namespace

Command add_probe_command(CLI::App& app, const std::string& command_line) {
  auto a = std::make_shared<ProbeArgs>();
  auto* cmd = app.add_subcommand("probe", "Layerwise linear probes of a frozen model: validation loss per layer and "
                                          "the deeper half's slope (SkipV1Former App. C.1)");
  cmd->footer("Each layer output h_0 (embedding) ... h_L gets a probe (the family's norm, then a linear map) per\n"
              "learning rate; the model runs once per batch and is never backpropagated through. The deeper half is\n"
              "layers floor((L+1)/2) ... L; its slope is null for L <= 3 (fewer than three points). docs/analysis.md.");
  cmd->add_option("CKPT", a->checkpoint, "Checkpoint directory (qkvlab's own or Hugging Face's)")->required();
  cmd->add_option("--corpus", a->corpus, "A prepared corpus: brown (see --data)")->check(CLI::IsMember({"brown"}));
  cmd->add_option("--data", a->data, "Where 'qkvlab data brown' prepared the corpus")->capture_default_str();
  cmd->add_option("--tokens", a->tokens, "Training tokens: .npy of integers or nanoGPT's uint16 .bin");
  add_text_option(cmd, a->text, "one stream (the tokenizer's BOS only at its start), from which the windows are drawn");
  cmd->add_option("--val-tokens", a->val_tokens, "Validation tokens (default: the last tenth of --tokens or --text)");
  cmd->add_option("--target", a->target, "next (the next token) or pos (the Brown tag of the token's word)")
      ->check(CLI::IsMember({"next", "pos"}))
      ->capture_default_str();
  cmd->add_option("--init", a->init, "model (the final norm and unembedding) or random")
      ->check(CLI::IsMember({"model", "random"}))
      ->capture_default_str();
  add_list_option(cmd, "--lr-grid", a->options.lr_grid, "Peak learning rates tried (the best per layer is reported)",
                  real_in(1e-12, 10.0));
  cmd->add_option("--steps", a->options.steps, "Training steps per probe (0: evaluate the probes as started)")
      ->check(integer64_in(0, 1LL << 40))
      ->capture_default_str();
  cmd->add_option("--warmup", a->options.warmup, "Warmup steps (default: a tenth of --steps)")
      ->check(integer64_in(0, 1LL << 40));
  cmd->add_option("--batch", a->options.batch, "Windows per step")->check(integer_in(1, 4096))->capture_default_str();
  cmd->add_option("--seq-len", a->options.seq_len, "Tokens per window")->check(integer_in(2, 1 << 20))->capture_default_str();
  cmd->add_option("--eval-windows", a->eval_windows, "Validation windows: consecutive from the start (qkvlab, "
                                                    "default 64) or at random offsets (released, default 64 batches)")
      ->check(integer_in(1, 1 << 24));
  cmd->add_option("--recipe", a->recipe, "qkvlab (PyTorch's AdamW, warmup then cosine, the family's norm, "
                                         "consecutive validation windows) or released (dense_skip's probe: "
                                         "transformers' AdamW, OneCycleLR, LayerNorm without bias, random "
                                         "validation batches); docs/analysis.md")
      ->check(CLI::IsMember({"qkvlab", "released"}))
      ->capture_default_str();
  cmd->add_option("--seed", a->options.seed, "Seed of the training windows and random starts")->check(seed_value)->capture_default_str();
  add_device_option(cmd, a->device);
  add_threads_option(cmd, a->threads);
  add_format_option(cmd, a->format);
  cmd->add_option("--out", a->out, "Write the per-layer table to an HDF5 file");
  cmd->add_option("--csv", a->csv, "Write the per-layer table as CSV");
  cmd->add_option("--figure", a->figure, "Draw STEM.svg and STEM.png, their numbers (the per-layer table) to STEM.csv "
                                         "(needs gnuplot)");
  add_allow_nonfinite_option(cmd, a->allow_nonfinite);
  cmd->add_flag("--quiet", a->quiet, "No progress on stderr");
  return {cmd, [a, command_line] {
            a->figure = figure_stem(a->figure);
            return run_probe(*a, command_line);
          }};
}

}  // namespace qkvlab::cli
