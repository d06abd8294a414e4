// Query-weight elimination on a trained model (`qkvlab lm eliminate`;
// Query-weight elimination §4.2, Theorem 4.1, Remarks 1, 2 and 4; docs/lm.md).
//
// The chosen layers j_1 < … < j_k get the Q-identity parameterization (head h's
// query is the h-th slice of N1's output, scale 1/(2 sqrt(d_h)), lm/config.hpp),
// and every other weight is re-expressed by a change of basis of the residual
// stream, X ↦ X T, with T_i the basis of layer i's input: T_i = W_Q of the last
// eliminated layer at or before i (of j_1 before it), T_L = T_{L−1}. Row-vector
// convention, as core/reparametrize.hpp's change_model_basis:
//   E' = E T_0, P' = P T_0;  in layer i: W_{Q,K,V}' = T_i⁻¹ W, W_O' = W_O T_i, b_O' = b_O T_i,
//   W_{fc,gate,up}' = T_i⁻¹ W, W_{proj,down}' = W T_{i+1}, b' = b T_{i+1};  U' = U T_L⁻ᵀ.
// In an eliminated layer W_Q' = I is dropped, W_K' and b_K are doubled (the
// Q-identity scale's ½; exact in float) and b_Q, if any, is dropped. Norm gains
// and biases are kept as they are: with a norm the transform is the one of the
// norm-free model applied with the norm ignored. A tied head cannot absorb a
// non-orthogonal T (Remark 4): the result is untied.
//
// Theorem 4.1 covers (the function is unchanged) exactly one eliminated layer in
// a model without norms and without a query bias: with the skips around
// attention and MLP every layer sees the same basis, so one T fixes one W_Q
// (Remark 1). Several layers use the bases above (Theorem 4.2's construction,
// exact only without MLP skips); the MLP skips then carry T_i into layer i + 1.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "lm/checkpoint.hpp"
#include "lm/evaluate.hpp"
#include "results/value.hpp"

namespace qkvlab::lm {

// The metadata entry of an eliminated model: the largest cond_2 of its eliminated W_Q's ("%.17g").
inline constexpr const char* kEliminatedKappa = "eliminated.kappa";

struct EliminatedLayer {
  int layer = 0;            // 1-based
  double kappa = 1;         // cond_2 of its W_Q (the basis T)
  bool query_bias = false;  // a non-zero b_Q, dropped
};

struct Elimination {
  Checkpoint checkpoint;                // the Q-identity model
  std::vector<EliminatedLayer> layers;  // ascending
  bool untied = false;                  // the source's tied head was untied
};

// `layers` 1-based, distinct. UsageError (one line) where elimination does not
// apply: MLA, a q-identity model or one with Q-identity layers already, H·d_h ≠ d,
// a layer whose keys are shared with another layer, a W_Q numerically singular
// in float (cond_2 > 1/(1e3 u_float) ≈ 1.7e4).
Elimination eliminate_queries(const Checkpoint& source, const std::vector<int>& layers);

// The same function with each Q-identity layer's W_Q = I written out (and W_K,
// b_K halved for the standard scale; b_Q = 0): a model without Q-identity layers,
// for the Hugging Face layout. Exact in float.
Checkpoint explicit_queries(const Checkpoint& checkpoint);

// Whether Theorem 4.1 covers a model with these layers eliminated, and the
// reason either way.
struct Coverage {
  bool covered = false;
  std::string reason;
};
Coverage coverage(const Config& source, const std::vector<EliminatedLayer>& eliminated);

// Two models' function on the same sequences: the logits' relative error
// ‖L' − L‖_F / ‖L‖_F over every position of every sequence (logits formed in
// double from each model's final state and head) and each mean loss as
// `lm eval` computes it (lm/evaluate.hpp).
struct FunctionChange {
  double logits_rel_err = 0, loss_reference = 0, loss = 0;
};
FunctionChange compare_function(const Checkpoint& reference, const Checkpoint& candidate, const TokenSequences& data,
                                 engine::Backend<float>& backend, int batch);

// The measured side of a verdict: rel_err ≤ 1e3 u κ at unit roundoff u, the rule of
// `qkvlab verify` (normalized error e = rel_err / (u κ) ≤ 1e3).
double exact_budget(double kappa, double u);

// The identity checked in double: the eliminated model's values unrounded (`layers` as
// eliminate_queries takes them), and the logits' relative error between `source` (its float values,
// exact in double) and a model of `config` with `values`, both run in double (Model<double>, batch
// sequences at a time). Float's budget, 1e3 u_float κ, is loose at a large κ (0.79 at κ = 1.3e4, where
// the measured error is 3.8e-5); in double the identity's error falls by u_double/u_float, so a
// transform that is not the identity stands out by many orders of magnitude.
std::vector<double> eliminated_in_double(const Checkpoint& source, const std::vector<int>& layers);
double logits_rel_err_in_double(const Checkpoint& source, const Config& config, const std::vector<double>& values,
                                const TokenSequences& data, int batch);

// Per eliminated layer (ascending) the model with it and the layers before it
// in the list eliminated: coverage, measured change and verdict (exact when
// covered and within the budget in float, the stored model's, and in double,
// the transform's).
struct LayerVerdict {
  EliminatedLayer layer;
  std::vector<int> eliminated;  // the layers eliminated in the model measured
  Coverage coverage;
  FunctionChange change;
  double budget = 0;
  double logits_rel_err_double = 0, budget_double = 0;  // covered layers only
  bool exact = false;
};
struct EliminationReport {
  Elimination result;  // every listed layer eliminated
  std::vector<LayerVerdict> layers;
  bool contradicted() const;  // a covered layer whose measurement is outside the budget
};
// progress(done, total): after each of the 1 + layers.size() models run over the tokens.
EliminationReport eliminate_and_measure(const Checkpoint& source, const std::vector<int>& layers,
                                        const TokenSequences& data, engine::Backend<float>& backend, int batch,
                                        const std::function<void(std::size_t, std::size_t)>& progress = {});

// {"loss", "untied", "layers": [{"layer", "eliminated", "exact", "covered", "reason", "kappa",
//  "logits_rel_err", "budget", "logits_rel_err_double", "budget_double" (null where not covered),
//  "loss_change", "loss", "query_bias"}], "model"}
results::Value report_value(const EliminationReport& report);

}  // namespace qkvlab::lm
