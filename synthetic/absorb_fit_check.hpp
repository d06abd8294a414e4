// qwe.cor8.4.1, empirical half, as a check (`qkvlab absorb fit`): for each seed
// and pair kind, draws a skip network f(x) = R x + W_2 σ(W_1 x) (column vectors,
// W_1 m×d, W_2 d×m; absorb_fit.hpp), decides with core/absorb.hpp's
// decide_absorption whether it is a skipless MLP of width m, fits
// g(x) = W̃_2 σ(W̃_1 x) from several restarts (fit_skipless) and judges the pair:
//   representable pair: decision yes and best held-out rel_err ≤ optimizer_precision,
//   generic pair:       decision no  and best held-out rel_err ≥ generic_floor,
//   given pair:         what its decision says (undecided fails).
// The statement holds when every pair does. Streams: "absorb fit/pair/KIND"
// (the draw), "absorb fit/R" (a generic R), "absorb fit/KIND" (the fit).
#pragma once

#include "core/absorb.hpp"
#include "results/figure.hpp"
#include "results/value.hpp"
#include "synthetic/absorb_fit.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace qkvlab::synthetic {

enum class PairKind { representable, generic, given };
const char* pair_kind_name(PairKind k);

struct AbsorbFitConfig {
  int d = 3, m = 6;
  std::uint64_t seed = 1;  // first seed
  int seeds = 3;           // seed, seed + 1, …
  double min_sine = 0.2;   // of the drawn W_1 (absorb_fit.hpp)
  bool generic_skip = false;  // R: the identity, or a generic invertible matrix drawn per seed
  std::vector<PairKind> kinds{PairKind::representable, PairKind::generic};
  std::optional<SkipNetwork> given;  // kinds {given}: this pair (R = I) at every seed
  FitConfig fit;
  AbsorbLimits limits;  // of the decision: a given float32 pair's unit roundoff, as `qkvlab absorb`
};

struct PairFit {
  PairKind kind = PairKind::given;
  std::uint64_t seed = 0;
  AbsorbDecision decision;
  FitResult fit;
  std::string failure;  // why the pair breaks the statement, one line; empty when it holds
  bool holds() const { return failure.empty(); }
};

// The verdict on one pair (see the file comment): empty when it holds.
std::string pair_failure(PairKind kind, std::uint64_t seed, const AbsorbDecision& decision, const FitResult& fit);

struct AbsorbFitResult {
  AbsorbFitConfig config;
  std::vector<PairFit> fits;  // seed-major, kinds in config order
  bool holds = false;         // every pair holds
};

// The memory the sizes imply: per step the batch's inputs, targets, hidden layer
// and their gradients on the tape; the selection and held-out samples with their
// hidden layers.
double absorb_fit_memory_bytes(const FitConfig& config, int d, int m);

// Throws SamplingLimit when W_1 cannot (practically) be drawn with min_sine.
// progress(done, total) before each fit and at the end (may be empty).
AbsorbFitResult run_absorb_fit(const AbsorbFitConfig& config,
                               const std::function<void(std::size_t, std::size_t)>& progress = {});

// The result rendered: the terminal table, the JSON object, the HDF5 tables
// (fits, restarts, traces; pair and decision as their enum codes).
std::string absorb_fit_text(const AbsorbFitResult& r);
results::Value absorb_fit_json(const AbsorbFitResult& r, const std::string& command_line);
std::vector<results::Table> absorb_fit_tables(const AbsorbFitResult& r);

}  // namespace qkvlab::synthetic
