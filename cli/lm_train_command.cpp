// `qkvlab lm train --out DIR`: train a language model from a preset or explicit
// sizes, on the Brown corpus or a token file (lm/train.hpp).
#include <cmath>
#include <cstdio>
#include <iostream>

#include "cli/format_option.hpp"
#include "cli/threads_option.hpp"
#include "cli/commands.hpp"
#include "cli/device_option.hpp"
#include "cli/model_options.hpp"
#include "cli/nonfinite_option.hpp"
#include "cli/plot_common.hpp"
#include "cli/usage_hint.hpp"
#include "cli/validators.hpp"
#include "engine/make_backend.hpp"
#include "lm/checkpoint.hpp"
#include "lm/model_files.hpp"
#include "lm/train.hpp"

namespace qkvlab::cli {

namespace {

struct LmTrainArgs {
  std::string preset = "tiny", corpus, data = "data/brown", tokens, val_tokens, out, from, format = "table",
              dtype = "f32";
  ModelOptions model;
  lm::RunOptions run;  // loop fields filled from the preset, then from the flags given
  int threads = 0;
  Device device = Device::cpu;
  bool quiet = false;
};

// --from's model configuration. A resumed run takes it from its own checkpoint (or the one before it,
// where a write was cut), so that it needs nothing at --from by then (docs/lm.md: the run records the
// checkpoint it started from, not what the path holds later); a fresh run reads --from's.
lm::Config from_configuration(const LmTrainArgs& a) {
  if (a.run.resume)
    for (const char* own : {"checkpoint", "checkpoint.previous"})
      if (const std::filesystem::path dir = std::filesystem::path(a.out) / own; std::filesystem::exists(dir / "model.safetensors"))
        return lm::open_model(dir).config;
  return lm::load_checkpoint(a.from, false, a.run.allow_nonfinite).config;
}

lm::RunOptions run_options(const LmTrainArgs& a, const CLI::App& cmd, const std::string& command_line) {
  lm::RunOptions o = lm::find_preset(a.preset).options;
  const lm::Config preset = o.model;
  o.model = model_config(o.model, a.model, cmd);
  if (!a.from.empty()) {  // the model is the checkpoint's: its configuration, then its values
    if (lm::to_metadata(o.model) != lm::to_metadata(preset))
      throw UsageError("--from " + a.from + ": the model is the checkpoint's; model flags (--d, --heads, …) do not apply");
    o.model = from_configuration(a);
    o.init_from = a.from;
  }
  auto given = [&cmd](const char* flag) { return cmd.count(flag) > 0; };
  if (given("--steps")) o.loop.steps = a.run.loop.steps, o.loop.warmup = engine::default_warmup(o.loop.steps);
  if (given("--lr")) o.loop.lr = a.run.loop.lr, o.loop.min_lr = a.run.loop.lr / 10;
  if (given("--min-lr")) o.loop.min_lr = a.run.loop.min_lr;
  if (given("--warmup")) o.loop.warmup = a.run.loop.warmup;
  if (given("--weight-decay")) o.loop.adamw.weight_decay = a.run.loop.adamw.weight_decay;
  if (given("--clip")) o.loop.clip = a.run.loop.clip;
  if (given("--accum")) o.loop.accum = a.run.loop.accum;
  if (given("--batch")) o.batch = a.run.batch;
  if (given("--seq-len")) o.seq = a.run.seq;
  if (given("--eval-every")) o.eval_every = a.run.eval_every;
  if (given("--eval-windows")) o.eval_windows = a.run.eval_windows;
  if (given("--checkpoint-every")) o.checkpoint_every = a.run.checkpoint_every;
  if (o.seq > o.model.positions && ((given("--positions") && parse_positions(a.model.positions).count) || !a.from.empty()))
    throw UsageError("--seq-len " + std::to_string(o.seq) + " is longer than the model's " +
                     std::to_string(o.model.positions) + " positions" + (a.from.empty() ? " (--positions)" : " (--from)"));
  if (o.seq > o.model.positions) o.model.positions = o.seq;  // the preset's positions grow with --seq-len
  if (o.loop.warmup >= o.loop.steps) throw UsageError("--warmup must be below --steps");
  if (!(o.loop.min_lr <= o.loop.lr)) throw UsageError("--min-lr must not exceed --lr");
  o.seed = a.run.seed, o.out = a.out, o.resume = a.run.resume, o.command_line = command_line;
  o.allow_nonfinite = a.run.allow_nonfinite;
  o.products = a.dtype == "bf16" ? engine::WeightType::bf16 : engine::WeightType::f32;
  return o;
}

int run_train(const LmTrainArgs& a, const CLI::App& cmd, const std::string& command_line) {
  require_device(a.device);
  if (a.corpus.empty() == a.tokens.empty()) throw UsageError("give one of --corpus brown and --tokens FILE");
  if (!a.val_tokens.empty() && a.tokens.empty()) throw UsageError("--val-tokens goes with --tokens");
  const lm::RunOptions o = run_options(a, cmd, command_line);
  const lm::TrainData data = a.corpus.empty()
                                 ? lm::file_data(a.tokens, a.val_tokens.empty() ? std::nullopt
                                                                                : std::optional<std::filesystem::path>(a.val_tokens))
                                 : with_hint([&] { return lm::brown_data(a.data); },
                                             "prepare it with 'qkvlab data brown --out " + a.data + "'");
  apply_threads(a.threads, BlasUse::per_worker);  // the CPU backend runs one product per worker
  const auto backend = engine::make_backend(a.device, a.threads);
  const Progress show{"lm train", Progress::wanted(a.quiet)};
  bool first = true;
  const results::Value out = lm::train_language_model(o, data, *backend, [&](const lm::Progress& p) {
    if (first) show.already = std::size_t(p.step - 1), first = false;  // a resumed run's rate is of its own steps
    char extra[160];
    std::snprintf(extra, sizeof extra, "loss %.4f%s  lr %.2e  %.0f tok/s", p.loss,
                  p.validation_loss ? (" val " + std::to_string(*p.validation_loss).substr(0, 6)).c_str() : "", p.lr,
                  p.tokens_per_second);
    show("step", std::size_t(p.step), std::size_t(p.steps), extra);
  });
  std::cout << (a.format == "json" ? out.json() : out.text());
  return 0;
}

}  // namespace

std::vector<Command> add_lm_train_commands(CLI::App& lm, const std::string& command_line) {
  auto a = std::make_shared<LmTrainArgs>();
  auto* cmd = lm.add_subcommand("train", "Train a language model (checkpoints, logs, validation, n-gram baselines "
                                         "in --out; --resume continues bit for bit)");
  std::string presets;
  for (const auto& p : lm::presets()) {
    const lm::RunOptions& o = p.options;
    char schedule[256];  // what --steps, --batch, --lr, ... default to under the preset
    std::snprintf(schedule, sizeof schedule,
                  "\n    --steps %lld --batch %d --seq-len %d --lr %g --min-lr %g --warmup %lld --clip %g --weight-decay %g "
                  "--eval-every %lld --eval-windows %lld --checkpoint-every %lld",
                  (long long)o.loop.steps, o.batch, o.seq, o.loop.lr, o.loop.min_lr, (long long)o.loop.warmup, o.loop.clip,
                  o.loop.adamw.weight_decay, (long long)o.eval_every, (long long)o.eval_windows, (long long)o.checkpoint_every);
    presets += "\n  " + p.name + ": " + p.description + schedule;
  }
  cmd->footer("Presets (model flags given on the command line override a preset's; --family also brings that\n"
              "family's tying and biases: gpt2 tied with biases, llama neither):" + presets);
  cmd->add_option("--preset", a->preset, "Starting point: model, batch, sequence length, schedule")
      ->capture_default_str();
  add_model_options(cmd, a->model);
  cmd->add_option("--corpus", a->corpus, "A prepared corpus: brown (see --data)")->check(CLI::IsMember({"brown"}));
  cmd->add_option("--data", a->data, "Where 'qkvlab data brown' prepared the corpus")->capture_default_str();
  cmd->add_option("--tokens", a->tokens, "Training tokens: .npy of integers or nanoGPT's uint16 .bin");
  cmd->add_option("--val-tokens", a->val_tokens, "Validation tokens (default: the last tenth of --tokens)");
  cmd->add_option("--out", a->out, "Run directory: checkpoint/, train.csv, validation.csv, baselines.json, run.json "
                                  "(one that holds a run is refused without --resume)")
      ->required();
  cmd->add_option("--from", a->from, "Start from this checkpoint's model (e.g. 'lm convert' output) instead of "
                                     "a fresh initialization; the model is then the checkpoint's");
  cmd->add_flag("--resume", a->run.resume, "Continue from --out's checkpoint (same settings required; a run cut in "
                                           "its final validation is finished)");
  cmd->add_option("--steps", a->run.loop.steps, "Optimizer steps")->check(integer64_in(1, 1LL << 40));
  cmd->add_option("--batch", a->run.batch, "Sequences per micro-batch")->check(integer_in(1, 65536));
  cmd->add_option("--seq-len", a->run.seq, "Positions predicted per sequence: each sequence is T + 1 tokens (lm eval --seq-len counts the tokens)")->check(integer_in(2, 1 << 20));
  cmd->add_option("--accum", a->run.loop.accum, "Micro-batches per step")->check(integer_in(1, 65536));
  cmd->add_option("--lr", a->run.loop.lr, "Peak learning rate (the floor becomes lr/10 unless --min-lr)")
      ->check(real_in(0.0, 10.0));
  cmd->add_option("--min-lr", a->run.loop.min_lr, "Floor of the cosine decay")->check(real_in(0.0, 10.0));
  cmd->add_option("--warmup", a->run.loop.warmup, "Linear warmup steps (default: the preset's; with --steps N, N/20, at least 1 and below N)")->check(integer64_in(0, 1LL << 40));
  cmd->add_option("--weight-decay", a->run.loop.adamw.weight_decay, "AdamW's decoupled weight decay")
      ->check(real_in(0.0, 10.0));
  cmd->add_option("--clip", a->run.loop.clip, "Clip the gradient's global norm (0: no clipping)")->check(real_in(0.0, 1e6));
  cmd->add_option("--seed", a->run.seed, "Seed of the initialization and the batches")->check(seed_value)->capture_default_str();
  cmd->add_option("--eval-every", a->run.eval_every, "Validation every N steps")->check(integer64_in(1, 1LL << 40));
  cmd->add_option("--eval-windows", a->run.eval_windows, "Validation windows at each evaluation (the end uses all)")
      ->check(integer_in(1, 1 << 24));
  cmd->add_option("--checkpoint-every", a->run.checkpoint_every, "Checkpoint every N steps (and at the end)")
      ->check(integer64_in(1, 1LL << 40));
  cmd->add_option("--dtype", a->dtype,
                  "The products' operands: f32, or bf16 as PyTorch's bf16 autocast rounds a matmul's, the "
                  "attention's included (rounded to bf16, summed in float32; the weights, gradients, softmax and "
                  "AdamW stay float32; docs/lm.md, \"Training with bf16 products\")")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  add_device_option(cmd, a->device);
  add_threads_option(cmd, a->threads);
  add_format_option(cmd, a->format);
  add_allow_nonfinite_option(cmd, a->run.allow_nonfinite,
                             "a run whose loss or gradient is then not finite stops as diverged, exit 3");
  cmd->add_flag("--quiet", a->quiet, "No progress on stderr");
  return {{cmd, [a, cmd, command_line] { return run_train(*a, *cmd, command_line); }}};
}

}  // namespace qkvlab::cli
