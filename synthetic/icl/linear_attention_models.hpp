// The trained models of docs/math/icl.md (experiments 2–5) on the engine's tape.
//
// Row-vector convention (the engine's): a prompt is Eᵀ ∈ R^{T×d}, one token per
// row, where docs/math/icl.md writes E ∈ R^{d×T} with tokens as columns. A weight
// W of docs/math/icl.md (acting as W e on a column token) is stored as Θ = Wᵀ, acting
// as e Θ on a row token; to_column_weight() undoes this for comparisons with
// the column-convention models.
//
// 1. TwoLayerModel, docs/math/icl.md's two-layer two-head linear attention without
//    residual or normalization, P = diag(I_2n, 0) (T = 2n + 1 tokens, the query
//    token is no key/value source), ŷ = H E_out[:, last]:
//      head h of layer l:  Σ_{j ≤ 2n} (q_last · k_j) v_j,  q = e Θ_Q, k = e Θ_K.
//    First layer F = TF_1(E): Assumption 1's copying layer
//      F = (x_1, [A x_1; B y_1], …, x_n, [A x_n; B y_n], [A x_{n+1}; 0])
//    with A = [I_a 0] and B = [0 I_{d−a}] fixed or learned from that start, or a
//    learned linear-attention layer TF_1 (two heads, values W_V^{1,h} E).
//    Second layer: queries and keys from F; the value of head h is a sum of
//    sources, each with its own d×d map (W_O folded into W_V, as docs/math/icl.md does):
//      mha        head 1: W F,       head 2: W F
//      skipv1     head 1: W F,       head 2: W' E          (Eq. 3, docs/math/icl.md)
//      resformer  head h: W F + W' E                      (V_2 + V_1, docs/math/lm.md)
//      svformer   head h: W' E                            (V_1 only, docs/math/lm.md)
//    The E-source is layer 1's value V_1 = W_V^{1,h} E seen through the head's
//    free output map: W_O^{2,h} W_V^{1,h} is again a free d×d map, so V_1's tie
//    to layer 1 disappears once W_O is folded (as it does in docs/math/icl.md's SkipV1).
// 2. LinearAttentionStack, L layers of linear self-attention with residual on
//    the concatenated format (tokens z_i = [x_i; y_i] ∈ R^{2d}, query
//    [x_{n+1}; 0]; T = n + 1, keys the first n tokens), scale 1/n:
//      Z_l = Z_{l−1} + Σ_h (1/n) Σ_{j ≤ n} (z_last Θ_Q · z_j Θ_K) v_j,
//    v_j = z_j Θ_V from Z_{l−1}, or, for SkipV1 in layers l ≥ 2, the second
//    half of the heads from Z_0 (the first layer's input). The prediction after
//    layer l is the y-slot (columns d … 2d−1) of the query row of Z_l.
#pragma once

#include "engine/tape.hpp"
#include "core/icl/prompt.hpp"

#include <deque>
#include <string>
#include <vector>

namespace qkvlab::icl {

enum class Variant { mha, skipv1, resformer, svformer };
enum class FirstLayer { copying_fixed, copying_learned, attention };

std::string variant_name(Variant v);
Variant parse_variant(const std::string& name);  // throws UsageError
std::string first_layer_name(FirstLayer f);

// Prompts stacked by rows for the two-layer models: prompt b is rows
// b T … b T + 2n of E (its Eᵀ); the other matrices hold what Assumption 1's
// copying layer needs, row-aligned with E.
struct TokenBatch {
  int d = 0, n = 0;
  MatD E;       // (B T) × d
  MatD x_pass;  // x_i on x-token rows, 0 elsewhere
  MatD x_pair;  // x_i on y-token rows, x_{n+1} on the query row, 0 elsewhere
  MatD y_pair;  // y_i on y-token rows, 0 elsewhere
  MatD target;  // B × d, rows y_{n+1}ᵀ
  Eigen::Index prompts() const { return target.rows(); }
  int tokens() const { return 2 * n + 1; }
};
TokenBatch make_token_batch(const std::vector<Prompt>& prompts);

// Prompts in the concatenated format: prompt b is rows b (n+1) … b (n+1) + n.
struct ConcatBatch {
  int d = 0, n = 0;
  MatD Z;       // (B (n+1)) × 2d
  MatD target;  // B × d
  Eigen::Index prompts() const { return target.rows(); }
  int tokens() const { return n + 1; }
};
ConcatBatch make_concat_batch(const std::vector<Prompt>& prompts);

// Parameters that live at stable addresses (a deque) with unique names.
struct ParameterSet {
  std::deque<engine::Parameter<double>> storage;
  engine::Parameter<double>& add(const std::string& name, MatD value);
  engine::Parameter<double>& at(const std::string& name);
  const engine::Parameter<double>& at(const std::string& name) const;
  engine::Parameters<double> list();
  Eigen::Index count() const;  // number of scalars
};

struct TwoLayerConfig {
  Variant variant = Variant::mha;
  FirstLayer first = FirstLayer::copying_fixed;
  int d = 4, n = 16, a = 4;  // a: rows of A (Assumption 1 only)
};

// Parameter names (row convention Θ = Wᵀ): "l1.h{1,2}.{WQ,WK,WV}" (learned
// first layer), "A", "B" (learned copying: Aᵀ, d×a, and Bᵀ, d×(d−a)), "l2.h{1,2}.{WQ,WK}",
// "l2.h{1,2}.WV_F" and/or "l2.h{1,2}.WV_E" (the value sources), "H".
struct TwoLayerModel {
  TwoLayerConfig config;
  ParameterSet params;

  // Assumption 1's A ∈ R^{a×d}, B ∈ R^{(d−a)×d} (column convention), fixed or learned.
  MatD A() const;
  MatD B() const;
  // F = TF_1(E), (B T) × d.
  engine::Var<double> first_layer(engine::Tape<double>& tape, const TokenBatch& batch);
  // ŷ, B × d.
  engine::Var<double> predict(engine::Tape<double>& tape, const TokenBatch& batch);
  // squared_error_loss of predict on the prompts' token batch.
  engine::Var<double> loss(engine::Tape<double>& tape, const std::vector<Prompt>& prompts);
};

// Weights drawn with entries N(0, 1/d) (value maps N(0, 1/d)/(2n), so that
// the un-normalized sum over 2n keys starts at the scale of one token).
TwoLayerModel make_two_layer_model(const TwoLayerConfig& config, Rng& rng);
void validate(const TwoLayerConfig& config);  // throws UsageError

struct StackConfig {
  int d = 4, n = 16, layers = 1, heads = 1;
  bool skipv1 = false;  // layers ≥ 2: heads heads/2 … heads−1 take values from Z_0
};

// Parameter names "l{l}.h{h}.{WQ,WK,WV}" (row convention, 2d × 2d).
struct LinearAttentionStack {
  StackConfig config;
  ParameterSet params;
  // The query row of Z_l for l = 1 … L, each B × 2d; the prediction after
  // layer l is its columns d … 2d−1.
  std::vector<engine::Var<double>> query_states(engine::Tape<double>& tape, const ConcatBatch& batch);
  engine::Var<double> predict(engine::Tape<double>& tape, const ConcatBatch& batch);  // B × d, after layer L
  // squared_error_loss of predict on the prompts' concatenated batch.
  engine::Var<double> loss(engine::Tape<double>& tape, const std::vector<Prompt>& prompts);
};

// Entries N(0, 1/(2d)) scaled by 1/sqrt(heads · layers).
LinearAttentionStack make_stack(const StackConfig& config, Rng& rng);
void validate(const StackConfig& config);  // throws UsageError

// Σ_b ‖ŷ_b − y_b‖² / B: docs/math/icl.md's E‖ŷ − y_{n+1}‖² on a batch (d times the engine's mse_loss).
engine::Var<double> squared_error_loss(engine::Var<double> prediction, const MatD& target);

// docs/math/icl.md's column-convention weight W from a stored Θ = Wᵀ.
inline MatD to_column_weight(const MatD& theta) { return theta.transpose(); }

}  // namespace qkvlab::icl
