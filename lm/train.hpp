// Training a language model on a token stream: `qkvlab lm train`.
//
// Step s draws, for each micro-batch m < accum, B windows of T + 1 tokens at
// random offsets of the training stream from Rng(seed, "lm/batch/step=s/micro=m")
// (corpus/batches.hpp), and takes one optimizer step (engine/trainer.hpp:
// AdamW, warmup then cosine decay to min_lr, clipping by global norm). Every
// `eval_every` steps the validation loss is measured on `eval_windows`
// windows of T + 1 tokens spread evenly over the validation stream, and at the
// end on all of them. The run directory gets:
//   checkpoint/       model, config.json, optimizer state and the corpus's tokenizer.json (lm/checkpoint.hpp), every
//                     `checkpoint_every` steps and at the end; its metadata records the step and
//                     everything that changes the numbers, so --resume continues bit for bit and
//                     refuses a checkpoint made with other settings
//   train.csv         step, loss, lr, grad_norm, seconds (the time column is the only one that
//                     differs between a resumed and an uninterrupted run)
//   validation.csv    step, loss, windows, tokens
//   baselines.json    the unigram and interpolated-bigram validation cross-entropy of the same
//                     tokens (corpus/ngram.hpp)
//   run.json          the result below, written last; "from" (only with init_from) records the
//                     initial checkpoint: its path as given, its model.safetensors's FNV-1a checksum
//                     and its metadata's run_id, step and converted_by where present
// A non-finite training loss stops the run with a NumericalError naming the step.
// The run holds the directory's lock (core/atomic_file.hpp DirectoryLock) from
// start to end: a second writer fails at once, naming the holder's PID. --resume
// refuses a checkpoint that is incomplete or mixed (lm/checkpoint.hpp), one whose
// step is outside the schedule or disagrees with the optimizer's t, one made with
// other validation tokens (its "data.validation_hash"), and a finished run
// (step = steps): run.json and the logs are kept.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "engine/trainer.hpp"
#include "lm/config.hpp"
#include "results/value.hpp"

namespace qkvlab::lm {

struct TrainData {
  std::vector<std::int32_t> train, validation;
  std::string source;        // where the tokens came from, for the record
  results::Value baselines;  // as written to baselines.json
  std::string tokenizer_json;  // the corpus's tokenizer (lm/tokenizer.hpp), given to the checkpoints; empty: none
};

// data/brown as `qkvlab data brown` prepared it (train/validation tokens, baselines.json; its
// vocab.json + merges.txt, when there, as the own tokenizer.json of lm/tokenizer.hpp).
TrainData brown_data(const std::filesystem::path& dir);
// A token file (.npy or .bin); the validation stream from its own file, or else
// the last tenth of the tokens (the first nine tenths train). Baselines computed here.
TrainData file_data(const std::filesystem::path& tokens, const std::optional<std::filesystem::path>& validation);

struct RunOptions {
  Config model;
  engine::TrainConfig loop;
  int batch = 16, seq = 128;
  std::uint64_t seed = 1;
  std::int64_t eval_every = 100, checkpoint_every = 500;
  int eval_windows = 128;
  std::filesystem::path out;
  bool resume = false;
  std::optional<std::filesystem::path> init_from;  // start from this checkpoint's values (same configuration)
  bool allow_nonfinite = false;                    // load --from / --resume weights holding NaN or Inf
  // The products' operands (engine/backend.hpp's product type): f32, or bf16 as PyTorch's bf16
  // autocast rounds a matmul's, the attention's included; the weights, gradients and AdamW's state
  // stay float32.
  engine::WeightType products = engine::WeightType::f32;
  std::string command_line;
};

// A named starting point (docs/lm.md lists them): model, batch, sequence length and schedule.
struct Preset {
  std::string name, description;
  RunOptions options;
};
const std::vector<Preset>& presets();
const Preset& find_preset(const std::string& name);  // UsageError naming the known presets

struct Progress {
  std::int64_t step = 0, steps = 0;
  double loss = 0, lr = 0, tokens_per_second = 0, seconds = 0, eta_seconds = 0;
  std::optional<double> validation_loss;
};

// Everything besides the model configuration that changes a run's numbers, as the checkpoint's
// metadata records it ("run.seed", "run.steps", "run.lr", …, "run.train_hash"): --resume checks
// it, and reproduce/ keys its checkpoint cache on it with to_metadata(model).
std::map<std::string, std::string> run_identity(const RunOptions& options, const TrainData& data);

// The validation tokens' hash, as the checkpoint's "data.validation_hash" records it: what a resumed
// run and a reused reproduce cache entry must share (their validation losses are of those tokens).
std::string validation_hash(const TrainData& data);

// The names of the files and directories a training run writes into its directory (RunOptions::out;
// above), checkpoint.writing (a checkpoint being saved) among them, besides its lock (core/atomic_file.hpp
// DirectoryLock) and staged temporaries: a fresh run refuses a directory holding any of them.
const std::vector<std::string>& run_file_names();

// Runs (or resumes) the training and returns what run.json holds.
results::Value train_language_model(const RunOptions& options, const TrainData& data,
                                    engine::Backend<float>& backend,
                                    const std::function<void(const Progress&)>& progress);

}  // namespace qkvlab::lm
