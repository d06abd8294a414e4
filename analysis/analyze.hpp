// `qkvlab analyze KIND CKPT`: the per-layer analyses of a trained model
// (docs/analysis.md), computed per sequence from the activation record
// (lm/record.hpp) and summarized over sequences (mean, standard deviation,
// standard error: core/statistics.hpp). Each analysis is a Recorder that
// consumes a layer's activations as soon as the forward pass produces them,
// so an attention pattern never outlives its layer; entropy and first-token (and all) take the
// patterns reduced inside the attention instead, so no layer's whole pattern is formed
// (Options::query_block); similarity, spectrum and first-token's norms take the states reduced
// where the model runs (lm/record.hpp's StateReduction: unit sums, Gram matrices, norms), so only
// per-sequence results cross from the device to the host.
//
//   entropy      per layer (1 … L): attention entropy, definition column | row | printed
//   similarity   per state: mean pairwise cosine of the tokens' hidden states (hf: the L + 1
//                states of output_hidden_states — the embedding output, blocks 1 … L−1's
//                outputs, the last after the final norm; raw: the embedding output and every
//                block's raw output), or of keys or values (heads concatenated or averaged)
//   spectrum     per layer: eigenvalues of the value covariance, averaged by rank, and the largest
//   first-token  per layer: the first token's importance, value norm and hidden-state norm over the
//                mean of the others', and the same per position
//   heads        one layer's H×H cosine matrix of head outputs z_h or patterns A_h (flattened)
//   tokens       one layer's T×T cosine matrix of the block outputs (before the final norm)
//   cross-layer  per layer (1 … L): the mean over tokens of the cosine between true cross-layer
//                attention to layer 1 (ResFormer Eq. 2) and its approximations Eq. 3 (the current
//                attention as the map) and Eq. 6 (identity mapping), measures.hpp's definitions
//   all          entropy, similarity, spectrum and first-token in one pass
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "analysis/measures.hpp"
#include "core/statistics.hpp"
#include "lm/evaluate.hpp"
#include "lm/model.hpp"
#include "results/figure.hpp"
#include "results/value.hpp"

namespace qkvlab::analysis {

enum class Kind { entropy, similarity, spectrum, first_token, heads, tokens, cross_layer, all };
Kind parse_kind(const std::string& name);
std::string to_string(Kind kind);
// The tables a report of `kind` holds, in order (Report::tables): analyze all's four parts', one for
// every other kind (its name, '-' written '_').
std::vector<std::string> table_names(Kind kind);

enum class States { hf, raw };
enum class Of { hidden, keys, values };
enum class HeadMatrixOf { outputs, patterns };

struct Options {
  EntropyDefinition entropy = EntropyDefinition::column;
  States states = States::hf;
  Of of = Of::hidden;
  HeadCombination heads = HeadCombination::concat;
  HeadMatrixOf head_matrix = HeadMatrixOf::outputs;
  int layer = -1;  // heads, tokens: 0-based; −1 the last
  int top_k = 0;   // spectrum: 0 every eigenvalue; k > 0 the k largest by Lanczos on the Gram matrix
  int batch = 4;   // sequences per forward pass
  int threads = 0;  // CPU threads for the per-sequence measures (0: all cores)
  // entropy, first-token (and all): the patterns are reduced inside the attention, this many queries
  // at a time (lm/record.hpp's PatternReduction), never formed whole; 0 forms each layer's patterns
  // and reduces them here (the layer-by-layer path, which heads --of patterns, tokens and cross-layer
  // always take). The numbers are the same either way (measures.hpp's one definition).
  int query_block = 64;
};

// n of the sequences (all of them when n = 0 or n ≥ their number), chosen without replacement
// by a partial Fisher–Yates shuffle driven by Rng(seed, "analysis/sequences") and kept in
// their order in the file, so the same seed picks the same sequences.
lm::TokenSequences choose_sequences(const lm::TokenSequences& all, std::int64_t n, std::uint64_t seed);

// One layer's (or hidden state's) scalar measure, summarized over the sequences.
struct LayerSummary {
  int layer = 0;  // 1 … L; similarity of hidden states 0 … L (0: the embedding output)
  Summary summary;
};

// spectrum: one layer's value covariance eigenvalues by rank (mean over sequences) and the largest.
struct SpectrumLayer {
  int layer = 0;
  std::vector<double> eigenvalues;
  Summary max;
};

// first-token: x_0 over the mean of x_1 … x_{T−1} (summarized over sequences), and each position's
// x_p over the mean of all positions (mean over sequences).
struct FirstTokenMeasure {
  Summary ratio;
  std::vector<double> per_position;
};
struct FirstTokenLayer {
  int layer = 0;
  FirstTokenMeasure importance, value_norm, hidden_norm;
};

// heads, tokens: one layer's cosine matrix, mean over sequences, with each entry's standard deviation
// and standard error over them (NaN for one sequence).
struct CosineMap {
  int layer = 0;  // 1 … L
  RowMatrix mean, std, se;
  double mean_off_diagonal() const;      // the mean of the entries i ≠ j
  double mean_abs_off_diagonal() const;  // the mean of their absolute values
};

// cross-layer: per layer, cos(Eq. 2, Eq. 3) and cos(Eq. 2, Eq. 6), summarized over sequences.
struct CrossLayerCosine {
  int layer = 0;
  Summary eq3, eq6;
};

// What an analysis measured, typed; to_value() is its JSON (the command's output, the figures' record).
struct Report {
  Kind kind = Kind::all;
  results::Value definition;  // the options that define what was measured
  std::int64_t sequences = 0;
  int seq_len = 0;
  std::vector<LayerSummary> entropy, similarity;
  std::vector<SpectrumLayer> spectrum;
  std::vector<FirstTokenLayer> first_token;
  std::optional<CosineMap> cosine;  // heads, tokens
  std::vector<CrossLayerCosine> cross_layer;
  std::vector<results::Table> tables;    // the same numbers as columns (CSV, HDF5, figures)
  std::vector<results::Figure> figures;  // one per table, drawn from its CSV
  // Set when an activation the analysis reads holds NaN or ±Inf ("layer 3's pattern holds nan
  // (sequence 0)"): then nothing is measured or summarised (no layers, no tables), and the
  // command reports this, exit 1.
  std::string nonfinite;

  // {analysis, definition, sequences, seq_len, then layers (heads, tokens: layer and matrix)};
  // `all`: one {layers} object per analysis, under entropy, similarity, spectrum, first_token.
  results::Value to_value() const;
};

Report analyze(lm::Model<float>& model, Kind kind, const lm::TokenSequences& data, const Options& options,
               const std::function<void(std::int64_t done, std::int64_t total)>& progress = {});

// The first-token importance ratio of a uniform causal pattern over T positions (query i attends
// 1/(i+1) to each j ≤ i, so a_j = Σ_{i ≥ j} 1/(i+1)): a_0 over the mean of a_1 … a_{T−1}, what
// position alone gives the first token (ResFormer Fig. 10's baseline).
double uniform_causal_importance_ratio(int T);

}  // namespace qkvlab::analysis
