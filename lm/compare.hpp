// `qkvlab lm compare RUN_DIR…`: runs of `lm train` side by side.
//
// Runs are grouped by model (family, variant and its options: every field of
// the configuration), training, kind of device (cpu, cuda), corpus (its tokens' hashes: run.json's
// data_hashes, else the checkpoint's run.train_hash and data.validation_hash; where some run records
// none, every run's recorded n-gram baselines instead; never the corpus's name) and starting point
// (run.json's "from" path, lm train --from, each component less its -sSEED so that the
// seeds of one conversion are replicates; absent: a fresh start), but nothing
// of the seed; within a group the seeds are the replicates (a seed twice is refused).
// For each group: the final validation loss (run.json's, over the whole validation
// stream) as mean, standard deviation and count over seeds, and its difference from
// its baseline group paired by seed where both have the seed, with the standard error
// of the paired differences. The baseline is one of the groups named `baseline` (the
// runs' directories less -sSEED: resformer-l05 for resformer-l05-sSEED) or of that
// variant (vanilla by default), of the group's family, products (float32 runs are
// never measured against bf16 runs, nor the reverse), kind of device, corpus and budget (training
// steps, batch, seq_len and accum: a learning rate may differ; with no such baseline the group gets
// no difference and a "baseline_note" naming each run of that name or variant and what it differs in):
// the one whose model is nearest the group's, every field but the variant's own
// (variant, α, β, λ, ρ, source layer, strategy, and the parameter count) compared (gqa-skipv1 against gqa,
// mla-skipv1 against mla, skipv1 with RoPE against vanilla with RoPE), then one
// of that name (skipv1 for skipv1-pooling, both of the variant skipv1), then one
// trained as the group was. Two equally near are a UsageError, as is a --baseline
// or --claim with no run of that name or variant. A nearest baseline of another model (a field
// outside the variant's own differs: width, depth, heads, ffn, vocabulary, positions, ...) keeps the
// difference but gives no verdict, and the "baseline_note" names the fields that differ.
//
// Relative loss curves (ResFormer §4.1.2): each run's training loss is
// smoothed by a moving average over `window` steps, trailing (the default: the
// mean of steps s − window + 1 … s, fewer at the start) or forward (the mean of
// steps s … s + window − 1, fewer at the end: the smoothing issue 28 reports for
// the papers' released relative-loss plots, there with window 100), and the baseline's smoothed curve of
// the same seed is subtracted step by step; a group's curve is the mean over the
// seeds paired with the baseline's (those of the differences; "relative_curve_seeds"
// counts them), with the standard deviation as a band. The CSV holds each curve to its own end (groups
// of other budgets have curves of other lengths), an empty cell past it. (The validation losses logged during training
// are read, to refuse a cut log, but not compared as curves: only the final one is.)
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "lm/run_log.hpp"  // read_log, Curve: the runs' logs (reproduce's figures read them through here too)
#include "results/value.hpp"
#include "results/verdict.hpp"

namespace qkvlab::lm {

enum class Smoothing { trailing, forward };
Smoothing parse_smoothing(const std::string& name);  // UsageError naming the two
std::string to_string(Smoothing smoothing);

struct CompareOptions {
  int window = 10;
  Smoothing smoothing = Smoothing::trailing;
  std::string baseline = "vanilla";  // the runs the others are measured against: a run name (the directory's,
                                     // less -sSEED) or a variant; each group's nearest (above)
  // A claim on each group's paired difference from the baseline (less: below it), judged by the rule of
  // results/verdict.hpp (Student's t at 0.975 over at least 2 seeds): each group measured against the baseline gains
  // a "verdict" object.
  std::optional<results::Sense> claim;
  std::optional<std::filesystem::path> csv;  // relative curves as CSV (+ figure stem below)
  std::optional<std::filesystem::path> figure;
};

results::Value compare_runs(const std::vector<std::filesystem::path>& runs, const CompareOptions& options);

// The moving average of `values` over `window` entries, trailing or forward (above).
std::vector<double> moving_average(const std::vector<double>& values, int window,
                                   Smoothing smoothing = Smoothing::trailing);

}  // namespace qkvlab::lm
