// Experiments 2 and 3 of docs/math/icl.md and the sweep: the two-layer models of
// linear_attention_models.hpp trained with Adam on fresh batches, several
// restarts, against the bounds of theory.hpp.
//
// Every run of one restart r sees the same training prompts (stream
// "icl/train/<tag>/batches/r") whatever the model, and all runs are evaluated
// on the same held-out prompts ("icl/train/<tag>/eval"), so differences
// between models are paired. Initial weights: "icl/train/<tag>/init/<model>/r".
//
// Bounds (Assumption 1 only; theory.hpp, column convention): MHA's lower bound
// L_1 ≥ C + C_3 + c_a (a < d), C + E‖Ŵ_D‖² (a = d), valid for every weight
// and every A, B of those shapes; the SkipV1 construction's value at the
// coordinate copying layer (C + C_3 at a = d). C (the Bayes loss) is a floor
// for every predictor.
//
// Decoder accounting of this setting (two layers, two heads of width d,
// docs/math/lm.md's counting; per token, all layers, cross-layer reuse once):
//   keys: 2 d per attention layer; values: 2 d in layer 1 (learned first layer);
//   layer 2 values: mha 2 d, skipv1 d (head 2 reuses V_1's head 2), resformer
//   2 d (V_1 is already cached), svformer 0. With Assumption 1 the first layer
//   has no cache, and a head that reads E needs the token itself: d per head
//   family reading E (skipv1 d, resformer d, svformer d).
//   Parameters of the decoder form: W_Q, W_K per head (d² each), one W_V per
//   value head (d²), W_O per attention layer (2 d × d), H (d²); Assumption 1's
//   A, B add d² when learned.
#pragma once

#include "synthetic/icl/linear_attention_models.hpp"
#include "synthetic/icl/theory.hpp"
#include "synthetic/icl/train.hpp"

#include <optional>

namespace qkvlab::icl {

struct DecoderAccounting {
  long kv_cache_per_token = 0;  // values cached per token (multiply by the dtype's bytes)
  long parameters = 0;          // parameters of the decoder form
};
DecoderAccounting decoder_accounting(VariantKind v, FirstLayer first, int d);

struct TrainExperimentConfig {
  Task task;
  FirstLayer first = FirstLayer::copying_fixed;
  int a = 4;
  std::vector<VariantKind> models{VariantKind::vanilla, VariantKind::skipv1};
  TrainConfig train;
  int restarts = 3;
  int eval_samples = 20000;
  long theory_prompts = 100000;  // for the bounds (Assumption 1) and C
  std::uint64_t seed = 1;
  int threads = 1;
  std::string tag = "main";  // names the random streams (the sweep gives one per point)
};
void validate(const TrainExperimentConfig& config);  // throws UsageError

struct TrainRun {
  VariantKind model = VariantKind::vanilla;
  int restart = 0;
  LossEstimate loss;            // held-out
  double selection_loss = 0;    // on other prompts, the same for every run: it chooses the best restart
  Curve curve;
  long trained_parameters = 0;
};

struct ModelSummary {
  VariantKind model = VariantKind::vanilla;
  int best = 0;  // index into runs: the lowest selection_loss (best_loss is then unbiased by the choice)
  double best_loss = 0, best_se = 0, mean = 0, min = 0, max = 0;
  DecoderAccounting accounting;
  std::optional<Estimate> reference;  // mha: its lower bound; skipv1: the construction's value
};

struct TrainExperimentResult {
  TrainExperimentConfig config;
  std::vector<TrainRun> runs;
  std::vector<ModelSummary> models;
  Estimate C;                     // Bayes loss (always)
  std::optional<Theory> theory;   // Assumption 1 runs
  std::optional<LossEstimate> skipv1_minus_mha;  // best runs, paired, when both were trained
};

TrainExperimentResult run_train_experiment(const TrainExperimentConfig& config,
                                           const std::function<void(int, int)>& progress = {});

// ---- the commands' settings ------------------------------------------------------------------------
// What `qkvlab icl train`, `sweep`, `anchor` and `depth` are given, with the defaults of `icl train`
// and `icl sweep` (anchor and depth set their own steps, batch, lr, restarts and held-out prompts).
// The commands and `qkvlab reproduce` build their configurations from it here, so a figure of
// reproduce is the command's run at the same settings.
struct TrainSettings {
  int d = 4, n = 16;
  double sigma = 0.5, w0_scale = 0;  // W_0 = w0_scale I (none at 0)
  int steps = 3000, batch = 64;
  double lr = 1e-2;
  int restarts = 3, eval_samples = 20000;
  std::uint64_t seed = 1;
  int threads = 0;  // 0: one per hardware thread
};
Task task_of(const TrainSettings& s);          // validated (throws UsageError)
TrainConfig train_of(const TrainSettings& s);  // one curve point per max(1, steps/100) steps; validated

inline const std::vector<VariantKind> kAllVariants{VariantKind::vanilla, VariantKind::skipv1, VariantKind::resformer,
                                                   VariantKind::svformer};
inline constexpr long kTrainTheoryPrompts = 100000;  // `icl train`'s Monte Carlo prompts for C and the bounds
inline constexpr long kSweepTheoryPrompts = 50000;   // `icl sweep`'s

// `icl train`: experiment 2 under Assumption 1 (first = copying_fixed, or copying_learned: A, B learned
// from the copying layer) or experiment 3 (first = attention, a learned first layer); a < 0: a = d. Validated.
TrainExperimentConfig train_experiment_of(const TrainSettings& s, FirstLayer first, int a = -1,
                                          const std::vector<VariantKind>& models = kAllVariants,
                                          long theory_prompts = kTrainTheoryPrompts);

}  // namespace qkvlab::icl
