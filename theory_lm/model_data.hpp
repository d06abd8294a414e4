// A model's weights as stored and the activations that reach each of its
// layers: what the claims' checkpoint forms (checks.hpp) and the comparison of
// two checkpoints (compare.hpp) read.
//
// Weights are read through lm/model_files.hpp (own checkpoints and Hugging Face
// directories alike) in the toolkit's layout: linear maps (in, out), the row
// vector's X W; each float value is held exactly in double and promoted from
// there to the working precision. Activations come from the lm forward pass on
// the CPU backend (float), through the activation record (lm/record.hpp):
// every layer's input (resid_pre) and attention output (attn_out), the last
// block's output and the final norm's output.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/types.hpp"
#include "lm/config.hpp"
#include "lm/evaluate.hpp"

namespace qkvlab::lm {
struct ModelFiles;  // lm/model_files.hpp
}

namespace qkvlab::theory_lm {

struct ModelWeights {
  std::filesystem::path dir;
  std::string format;  // "qkvlab" or the Hugging Face model_type
  lm::Config config;
  std::map<std::string, MatD> tensors;  // by the toolkit's name (lm/parameters.hpp); a 1-D tensor is one row

  bool has(const std::string& name) const { return tensors.count(name) > 0; }
  const MatD& at(const std::string& name) const;  // std::logic_error naming a missing tensor
  // Layer ℓ's (0-based) tensor, e.g. layer(0, "attn.q.weight") = "h.0.attn.q.weight".
  const MatD& layer(int l, const std::string& what) const;
  bool has_layer(int l, const std::string& what) const;
  // [W; b]: layer ℓ's linear map `what` (e.g. "attn.q") with its bias as an extra last row
  // (zero without one), so that X W + b = [X, 1] [W; b].
  MatD augmented(int l, const std::string& what) const;
  // The head's weight U (V × d): lm_head, or the token embedding when tied.
  const MatD& unembedding() const;
};

ModelWeights read_weights(const std::filesystem::path& dir);
ModelWeights read_weights(const lm::ModelFiles& files);  // a directory already opened (lm::open_model)

// Rows are positions, sequence after sequence: row b·T + t.
struct Activations {
  lm::TokenSequences tokens;  // what was run
  int sequences = 0, length = 0;
  std::vector<MatD> resid_pre, attn_out;  // per layer: the block's input, its attention sublayer's output
  MatD resid_final;                       // the last block's output (the final norm's input)
  MatD final_norm;                        // N_f(resid_final): the head reads it
};

// One forward pass over every sequence (float, CPU backend with `threads`).
Activations record_activations(const std::filesystem::path& dir, const lm::TokenSequences& tokens, int threads);

// The memory record_activations and its forward take for `sequences` of `seq_len` tokens:
// per token, the recorded activations (double) and the forward's (float).
double activation_bytes(const lm::Config& c, std::int64_t sequences, int seq_len);

// Every layer's attention pattern on one sequence (float, CPU backend): per layer a
// (heads·T × T) matrix, row h·T + t the probabilities of query head h at position t.
std::vector<MatD> attention_patterns(const std::filesystem::path& dir, const lm::TokenSequences& one_sequence);

// logits = N_f(X_L) Uᵀ, in double from the recorded final norm.
MatD logits(const ModelWeights& weights, const Activations& activations);

}  // namespace qkvlab::theory_lm
