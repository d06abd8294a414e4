// qwe.exp8.4 — MLP basis transfer (docs/math/qkv.md, qwe.exp8.4; Query-weight elimination §8.4, eqs. 13–15).
//
// A skip block x + M(x) seen in an input basis T_in and an output basis T_out becomes
// x ↦ T_out T_in⁻¹ x + T_out M(T_in⁻¹ x). Can a skip MLP of the same width learn such a map?
// The paper's target and model, in its column-vector convention:
//     f*(x) = R x + V GELU(U x),   R d×d entries N(0, 1/d), U r×d N(0, 1/d), V d×r N(0, 1/r), r = 4d;
//     f(x)  = x + W̃2 GELU(W̃1 x),  W̃1 r×d, W̃2 d×r.
//
// Here, the engine's row-vector convention: a batch X is n×d, one sample per row, and
//     f*(X) = X Rᵀ + GELU(X Uᵀ) Vᵀ,   f(X) = X + GELU(X W1) W2   (W1 = W̃1ᵀ d×r, W2 = W̃2ᵀ r×d).
// Target keeps the transposes (Target::R = Rᵀ, U = Uᵀ, V = Vᵀ), so f*(X) = X R + GELU(X U) V.
// GELU is the exact erf form; everything trains in float.
//
// The model and its target exist once, in SkipMlp, written against engine/backend.hpp: the
// CPU backend and the CUDA backend (`--device cpu|cuda`, engine/make_backend.hpp) run the same code.
// Forward, with Z = X W1 (n×r), H = GELU(Z), F = X + H W2 and Z* = X U, H* = GELU(Z*),
// F* = X R + H* V (the target is data: no gradient flows into it):
//     loss = Σ‖F − F*‖² / Σ‖F*‖² over the batch   (engine/relative_error.hpp, sums in double)
// Backward, with S* = Σ‖F*‖²:
//     dF = 2 (F − F*) / S*,  dW2 = Hᵀ dF,  dH = dF W2ᵀ,  dZ = dH ⊙ GELU'(Z),  dW1 = Xᵀ dZ
// (engine/linear.hpp), then clipping by the global norm of (dW1, dW2) (engine::clip_gradients)
// and AdamW on W1 and W2, both decayed (engine::AdamWState).
//
// Training: fresh x ~ N(0, I) every step; linear warmup then cosine decay to a floor
// (engine/schedule.hpp), clipping at global gradient norm 3.0.
//
// Linear baseline: streaming ridge regression. Over chunks of samples accumulate, in double,
//     G = Σ x xᵀ = XᵀX,   B = Σ x f*(x)ᵀ = XᵀY,   then  W = (G + λ n I)⁻¹ B,  f_lin(X) = X W.
// For x ~ N(0, I) the best linear map is E[x f*(x)ᵀ] = Rᵀ + ½ Uᵀ Vᵀ (row form: R + ½ U V): by
// Stein's lemma E[x GELU(uᵀx)] = u E[GELU'(uᵀx)], and E[GELU'(z)] = E[Φ(z)] + E[z φ(z)] = ½ for
// symmetric z. population_linear_map() returns it; the ridge fit estimates it from samples.
//
// Evaluation on held-out samples: relative L2 error sqrt(Σ‖f − f*‖² / Σ‖f*‖²) and mean cosine
// similarity (1/n) Σ cos(f(x), f*(x)), sums in double; f* and the MLP's f come from SkipMlp.
//
// Randomness: every draw comes from its own named stream Rng(seed, NAME), so numbers do not
// depend on the number of threads. Inputs are drawn by draw_inputs in sub-chunks of kChunkRows
// rows, each appending "/chunk=K" to its caller's name:
//     target     "transfer/d=D/target"                      (R, U, V)
//     init       "transfer/d=D/init"                        (W1, W2)
//     train      "transfer/d=D/train/step=S/chunk=K"        (the batch of step S)
//     ridge      "transfer/d=D/ridge/chunk=C/chunk=K"       (C: the ridge chunk of RidgeConfig::chunk_rows rows)
//     eval       "transfer/d=D/eval/chunk=C/chunk=K"        (C: the evaluation chunk of 8192 rows)
#pragma once

#include "core/errors.hpp"
#include "core/types.hpp"
#include "engine/backend.hpp"
#include "engine/safetensors.hpp"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace qkvlab::transfer {

// A checkpoint that cannot be resumed (another configuration, corrupt): a usage
// error naming the file; the command adds its option's name.
struct CheckpointError : UsageError {
  using UsageError::UsageError;
};

using MatF = Mat<float>;

// Samples are drawn in chunks of this many rows, each chunk from its own stream.
inline constexpr int kChunkRows = 1024;

// f*(X) = X R + GELU(X U) V, row form (R = Rᵀ, U = Uᵀ, V = Vᵀ of the paper).
struct Target {
  MatF R;  // d×d
  MatF U;  // d×r
  MatF V;  // r×d
  int d() const { return int(R.rows()); }
  int r() const { return int(U.cols()); }
};

// The skip MLP f(X) = X + GELU(X W1) W2.
struct Mlp {
  MatF W1;  // d×r
  MatF W2;  // r×d
};

Target draw_target(int d, std::uint64_t seed);
// W1 entries N(0, 1/d) and W2 entries N(0, 1/r): the target's scales, independent draws.
Mlp init_mlp(int d, std::uint64_t seed);

// R + ½ U V (row form): the linear map minimizing E‖x W − f*(x)‖² for x ~ N(0, I).
MatD population_linear_map(const Target& target);

// `rows` samples x ~ N(0, I_d), drawn in double and rounded to float, chunk c of
// kChunkRows rows from Rng(seed, stream + "/chunk=" + c); chunks drawn on `threads` threads.
MatF draw_inputs(int d, Eigen::Index rows, std::uint64_t seed, const std::string& stream, int threads);

// Streaming ridge regression. `target(X, chunk)` gives the outputs of the samples of one chunk.
struct RidgeConfig {
  std::int64_t samples = 500'000;
  int chunk_rows = 8192;
  // λ in (G + λ n I) W = B. G/n → I for x ~ N(0, I), so the system is well conditioned and λ
  // only guards against a singular G; 1e-6 biases W by about 1e-6 relative, far below the
  // sampling error ~ sqrt(d/n) of 500,000 samples.
  double lambda = 1e-6;
};
using ChunkTarget = std::function<MatD(const MatF& X, std::int64_t chunk)>;
// W (d×d, row form f_lin(X) = X W). Chunk c's inputs are draw_inputs(…, stream + "/chunk=" + c, …),
// i.e. from Rng(seed, stream + "/chunk=" + c + "/chunk=" + k) for its sub-chunks k.
MatD fit_ridge(int d, const ChunkTarget& target, const RidgeConfig& config, std::uint64_t seed,
               const std::string& stream, int threads);

struct Metrics {
  double rel_l2 = 0;       // sqrt(Σ‖f − f*‖² / Σ‖f*‖²)
  double mean_cosine = 0;  // (1/n) Σ cos(f(x), f*(x))
};
using Predictor = std::function<MatD(const MatF& X)>;
// Metrics of `predict` against `target` on `samples` held-out inputs x ∈ R^d, drawn in chunks of
// 8192 rows (streams "transfer/d=D/eval/chunk=C/chunk=K").
Metrics evaluate(int d, const Predictor& target, const Predictor& predict, std::int64_t samples,
                 std::uint64_t seed, int threads);

struct TrainConfig {
  std::int64_t steps = 2000;
  int batch = 4096;
  double lr = 1e-2;            // peak learning rate
  double lr_floor = 1e-2;      // the cosine decays to lr · lr_floor
  double warmup = 0.02;        // warmup steps as a fraction of steps
  double weight_decay = 0.0;   // AdamW's decoupled weight decay
  double clip_norm = 3.0;
  engine::Device device = engine::Device::cpu;  // the backend every product and kernel runs on
  // Where to save (every checkpoint_every steps and at the end) and resume from; empty: none.
  std::filesystem::path checkpoint_dir;
  std::int64_t checkpoint_every = 500;
};

struct TransferConfig {
  TrainConfig train;
  RidgeConfig ridge;
  std::int64_t eval_samples = 65'536;
  std::uint64_t seed = 1;
  int threads = 2;
};

struct TransferResult {
  int d = 0;
  Metrics mlp, linear;
  double population_linear_rel_l2 = 0;  // the best linear map R + ½ U V, for comparison
  double ridge_distance = 0;            // ‖W_ridge − (R + ½ U V)‖_F / ‖R + ½ U V‖_F
  std::int64_t steps = 0;
  std::int64_t resumed_from = 0;        // the step training resumed at (0: from scratch)
  double final_loss = 0;                // mean training loss over the last 5% of steps run
  double train_seconds = 0, ridge_seconds = 0, eval_seconds = 0;
  std::vector<double> loss;             // the training loss of every step run
};

// Called after each training step with the step count done and the batch's loss.
using StepObserver = std::function<void(std::int64_t step, double loss)>;

// Every d's checkpoint in config.train.checkpoint_dir, where there is one, read and checked against
// the configuration as resuming checks it (its tensors' shapes aside): a CheckpointError naming the
// first that cannot be resumed, so a sweep is refused before it trains any d.
void check_checkpoints(const std::vector<int>& ds, const TransferConfig& config);

// The whole experiment at one d: target, ridge baseline, MLP training, evaluation of both.
TransferResult run_transfer(int d, const TransferConfig& config, const StepObserver& observe);

// The skip MLP and its target on a backend (the header's formulas): the one definition that
// trains, predicts and computes the target on every device. Its buffers hold config.batch rows,
// allocated once; target() and predict() take any number of rows, config.batch at a time.
class SkipMlp {
 public:
  SkipMlp(engine::Backend<float>& backend, const Target& target, const Mlp& init, const TrainConfig& config);
  ~SkipMlp();
  SkipMlp(const SkipMlp&) = delete;
  SkipMlp& operator=(const SkipMlp&) = delete;

  MatF target(const MatF& X);   // f*(X)
  MatF predict(const MatF& X);  // f(X)
  // One step on X (config.batch × d): forward, the loss Σ‖f − f*‖²/Σ‖f*‖² (before the update),
  // backward, clipping, AdamW at learning rate lr.
  float step(const MatF& X, double lr);
  Mlp weights() const;
  std::int64_t steps() const;  // AdamW steps taken (restored ones included)
  // Parameters "W1", "W2" (F32, row-major d×r and r×d) and AdamW's state in engine/adamw_state.hpp's
  // format (moments "m/W1", …, step count in metadata "t"); restore also reads the format of files
  // written before (moments "adamw.m/W1", …, step count "adamw.steps"). Restoring is bit-exact and
  // all-or-nothing: a missing, mis-shaped or non-finite tensor throws std::runtime_error, nothing changed.
  void save(engine::SafeTensors& file) const;
  void restore(const engine::SafeTensors& file);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qkvlab::transfer
