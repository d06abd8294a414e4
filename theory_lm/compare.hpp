// `qkvlab verify --checkpoint B --against A`: are two checkpoints the same function?
//
// By gauge invariants, where the symmetry relating them is the head-wise
// reparametrization (qwe.lemma3.1 on each head's pairs, qwe.prop4.2 with GQA's
// groups): per query head h of layer ℓ, with its key/value head g,
//   W_QK = W̃_Q^h W_K^gᵀ             (W̃ = [W; b]: the query's bias included; the key's bias adds
//                                    the same q·b_K to every score of a query, which the softmax
//                                    removes, so it is left out)
//   RoPE: C_i = q_i k_iᵀ + q_i' k_i'ᵀ and S_i = q_i k_i'ᵀ − q_i' k_iᵀ for each frequency pair
//         (i, i' = i + d_h/2) of W̃_Q^h's and W̃_K^g's columns: the matrices of which
//         W̃_Q^h R_Δ W̃_K^gᵀ = Σ_i cos(Δω_i) C_i + sin(Δω_i) S_i is made, invariant under the
//         rotations' commutant (a generic M keeps W_QK but changes the function);
//   W_VO = W̃_V^g W_O^h,
// and every other tensor (embeddings, norms, MLP, W_O's bias, head) equal. Each
// compared by rel_err = ‖B − A‖_F/‖A‖_F against the tolerance.
//
// By the function on the given tokens otherwise (or with method function): the
// logits' relative error ‖L_B − L_A‖_F/‖L_A‖_F over every position, against the
// tolerance. This covers any two parameterizations of one function, e.g. every
// weight changed by a change of basis of a norm-free model's residual stream.
//
// method automatic: gauge invariants when the two have the same architecture (every
// configuration field equal: sizes, positions, RoPE's base and scaling, norms and their
// epsilon, GELU, biases, tying; vanilla attention with W_Q), where a tensor outside
// attention that differs is named; the function otherwise (e.g. `lm eliminate`'s output).
// Two models of one architecture related by a change of basis of the residual stream are
// the same function with other tensors: --compare function. Both methods also compare the
// logits and, on the sequence where the logits differ most, every layer's attention
// patterns (all must pass), on the given tokens only: `coverage` records how many of the
// vocabulary's ids and of the model's positions they were, the inputs a comparison by
// function cannot see beyond.
#pragma once

#include <string>

#include "results/value.hpp"
#include "theory_lm/model_data.hpp"

namespace qkvlab::theory_lm {

enum class Comparison { automatic, gauge, function };

// The row of two (positions × vocabulary) logits where B's differs most from A's in norm: the largest
// share of rel_err's numerator, the position reported as the worst (defined where A's row is all zero).
Eigen::Index most_different_row(const MatD& A, const MatD& B);
Comparison comparison_named(const std::string& name);  // "auto", "gauge", "function"

struct CompareOptions {
  Comparison method = Comparison::automatic;
  double tolerance = 1e-4;  // ≈ 1e3 unit roundoffs of float, the weights' storage
  std::string tolerance_basis = "given";  // what the tolerance was sized by (the output's tolerance_basis)
};

// The default tolerance of `--against` for checkpoints B and A: 1e-4 (about 1e3 unit roundoffs u of
// float, the weights' storage), or, where either is an `lm eliminate` output whose change of basis has
// condition κ (its metadata's eliminated.kappa), u κ if larger: a basis of condition κ stored in float
// moves the attention patterns by up to about u κ. Measured on the committed norm-free model's layer-1
// elimination (κ = 1.3e4, u κ = 7.9e-4) on 8 x 128 tokens: its rounding reaches 1.15e-4 in layer 4's
// patterns (it failed the fixed 1e-4), while one key head of layer 2 scaled by 1.1 moves layer 2's by
// 1.5e-3 (a mismatch at u κ, none at 10 u κ): u κ separates the two by about 7x and 2x.
CompareOptions default_against_options(Comparison method, const std::filesystem::path& B, const std::filesystem::path& A);

struct CompareResult {
  results::Value value;  // method, tolerance, invariants, tensors, logits, coverage, mismatches, ok
  bool ok = false;
};

// B and A with their activations on the same tokens. UsageError when the two
// cannot be compared at all (different vocabularies), or when gauge is asked
// of models of different architectures.
CompareResult compare_checkpoints(const ModelWeights& B, const Activations& activations_B, const ModelWeights& A,
                                  const Activations& activations_A, const CompareOptions& options);

// `verify --checkpoint B --against A`: both models' activations on `tokens`, compared; the value
// records checkpoint, against, tokens, comparison and command_line.
CompareResult compare_against(const std::filesystem::path& B, const ModelWeights& weights_B, const std::filesystem::path& A,
                              const lm::TokenSequences& tokens, const results::Value& tokens_value,
                              const CompareOptions& options, int threads, const std::string& command_line);

}  // namespace qkvlab::theory_lm
