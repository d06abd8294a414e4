// `qkvlab verify --checkpoint DIR`: every selected claim that has a checkpoint
// form (checks.hpp) and applies to the model's architecture runs at each of its
// sites (a layer, a head and a pair of weights, or a norm), at every precision,
// through theory's runner (theory/verify.hpp: the same outcomes, verdicts,
// ladders and report); every other selected claim is skipped with its reason.
//
//   claim          sites                                      applies to
//   qwe.lemma3.1   layer, head, pair QK and VO                vanilla attention (no MLA, W_Q present)
//   qwe.prop4.1    layer, head                                the same
//   qwe.prop4.2    layer (one block per key head: GQA)        the same
//   qwe.lemma8.2   ln_1 and ln_2 of each layer, ln_f          LayerNorm (gpt2)
//   qwe.thm8.3     the same, with the norm's gain and reader  LayerNorm (gpt2)
//   qwe.remark5    the same (its RMSNorm half)                RMSNorm (llama)
// A site's configuration reads e.g. "d=64 layer=2 head=3 pair=QK trial=0" (layers and
// heads numbered from 1).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "results/report.hpp"
#include "theory/verify.hpp"
#include "theory_lm/checks.hpp"

namespace qkvlab::theory_lm {

struct CheckpointPlan {
  std::vector<std::unique_ptr<theory::Claim>> claims;  // one per claim and site
  theory::VerifyPlan plan;                             // each with its configuration
  std::vector<results::SkippedClaim> skipped;
  std::vector<std::string> run;  // the ids that run, in registry order
};

// The sites of the selected claims on this model, and the claims skipped with why.
CheckpointPlan plan_checkpoint(std::shared_ptr<const CheckpointData> data, const std::vector<const theory::Claim*>& selected);

// The checkpoint as a result value: path, format, family and configuration.
results::Value checkpoint_value(const ModelWeights& weights);

// `verify --checkpoint DIR`, whole: the model's activations on `tokens` recorded (one forward
// pass on the CPU), the selected claims planned at their sites and run (theory::verify). The report
// records "checkpoint", `tokens_value` (where the inputs came from), "claims_run" and the skipped claims.
results::Report verify_checkpoint(const std::filesystem::path& dir, const ModelWeights& weights,
                                  const lm::TokenSequences& tokens, results::Value tokens_value,
                                  const std::vector<const theory::Claim*>& selected, const theory::VerifyOptions& options);

}  // namespace qkvlab::theory_lm
