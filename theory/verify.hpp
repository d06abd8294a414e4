// `qkvlab verify`: selects claims by id or prefix, sweeps their configurations
// over dimensions, trials and precisions, runs them on worker threads and
// gathers a results::Report. Every (claim, configuration) draws from its own
// named random stream and runs all its precisions in one task, so the numbers
// are the same whatever the number of threads.
#pragma once

#include "results/report.hpp"
#include "theory/claim.hpp"

#include <cstdint>
#include <functional>
#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace qkvlab::theory {

struct VerifyOptions {
  std::vector<std::string> ids;  // ids or prefixes; empty selects every claim
  std::uint64_t seed = 1;
  int trials = 1;
  // Sweep lists; absent means the default (the claim's own where it has one).
  std::optional<std::vector<int>> d, heads, layers, seq;
  std::vector<Precision> precisions{std::begin(all_precisions), std::end(all_precisions)};
  int threads = 0;  // 0: one per hardware thread
  std::string command_line;
  std::function<void(std::size_t done, std::size_t total)> progress;  // may be empty
};

inline const std::vector<int> default_d{16, 32}, default_heads{1, 2, 4}, default_layers{1, 3}, default_seq{4, 16};

// Claims matching any id or prefix, in registry order; throws UsageError naming
// an argument that matches nothing.
std::vector<const Claim*> select_claims(const std::vector<std::string>& ids);

// What verify() runs: each selected claim's configurations over the sweep lists
// (variants included, trial 0; each runs options.trials times). Made once, from
// the options, which it checks: positive sizes and trials, d >= 2, every head
// count dividing every d of a claim with heads, a precision. Throws UsageError
// naming the values.
struct VerifyPlan {
  std::vector<std::pair<const Claim*, SweepPoint>> configurations;
  // The memory the sizes imply: the largest configuration on every thread at
  // once, and the records of every configuration and trial.
  double memory_bytes = 0;
  std::vector<results::SkippedClaim> skipped;  // claims with no configuration (Dims::min_layers)
};
VerifyPlan plan_verify(const std::vector<const Claim*>& claims, const VerifyOptions& options);

// The configuration as it appears in every output, e.g. "d=16 H=2 n=4 mask=causal elim=Q trial=0".
std::string describe(const Claim& claim, const SweepPoint& config);

// Every claim id with its one-line statement, a line each (`verify --list`).
std::string claim_list();

// The least sizes of the claims that have some (Dims), grouped by requirement, on one line for
// `verify --help`: "qwe.obs3.1: d >= 4; qwe.thm4.3, resformer.eq5: L >= 2; …".
std::string least_sizes();

// The size lists set, each as "LABEL v1,v2,…" (labels of d, heads, layers, seq and trials,
// the latter only when not 1) joined by `separator`; "the default sweep" when none is set.
using SizeLabels = std::array<std::string, 5>;
std::string sizes_text(const VerifyOptions& options, const SizeLabels& labels, const std::string& separator);

// Runs a plan made from these options (its memory already accepted) on options.threads workers.
results::Report verify(const VerifyPlan& plan, const VerifyOptions& options);

// select_claims, plan_verify, refuses sizes beyond the memory budget (naming their
// values), and runs the plan.
results::Report verify(const VerifyOptions& options);

// One configuration of one claim (every precision): what verify() records for it.
// A check whose run throws is recorded with status "error", its message as the note.
results::Report verify_configuration(const Claim& claim, const SweepPoint& config, const VerifyOptions& options);

}  // namespace qkvlab::theory
