// The trained models of docs/math/icl.md (experiments 2–5) on a backend
// (engine/backend.hpp), in double.
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

#include "core/icl/models.hpp"
#include "core/icl/prompt.hpp"
#include "engine/parameters.hpp"

#include <memory>
#include <string>
#include <vector>

namespace qkvlab::icl {

// The second layer's variant (core/qkv_plan.hpp): vanilla ("mha"), skipv1,
// resformer or svformer; its plan over two layers of two heads gives each head's
// value sources (F: its own values; E: layer 1's, V_1).
using qkv::VariantKind;
enum class FirstLayer { copying_fixed, copying_learned, attention };

std::string variant_name(VariantKind v);
VariantKind parse_variant(const std::string& name);  // throws UsageError
std::string first_layer_name(FirstLayer f);

// Host batches are row-major, the layout of the backend's buffers, so a batch
// goes up in one copy per matrix.
using RowMatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Prompts stacked by rows for the two-layer models: prompt b is rows
// b T … b T + 2n of E (its Eᵀ); the other matrices hold what Assumption 1's
// copying layer needs, row-aligned with E.
struct TokenBatch {
  int d = 0, n = 0;
  RowMatD E;       // (B T) × d
  RowMatD x_pass;  // x_i on x-token rows, 0 elsewhere
  RowMatD x_pair;  // x_i on y-token rows, x_{n+1} on the query row, 0 elsewhere
  RowMatD y_pair;  // y_i on y-token rows, 0 elsewhere
  RowMatD target;  // B × d, rows y_{n+1}ᵀ
  Eigen::Index prompts() const { return target.rows(); }
  int tokens() const { return 2 * n + 1; }
};
TokenBatch make_token_batch(const std::vector<Prompt>& prompts);
// The same in place: every entry of `batch` is written, and its storage is kept
// when the shape is unchanged (a training step allocates nothing).
void fill_token_batch(const std::vector<Prompt>& prompts, TokenBatch& batch);

// Prompts in the concatenated format: prompt b is rows b (n+1) … b (n+1) + n.
struct ConcatBatch {
  int d = 0, n = 0;
  RowMatD Z;       // (B (n+1)) × 2d
  RowMatD target;  // B × d
  Eigen::Index prompts() const { return target.rows(); }
  int tokens() const { return n + 1; }
};
ConcatBatch make_concat_batch(const std::vector<Prompt>& prompts);
void fill_concat_batch(const std::vector<Prompt>& prompts, ConcatBatch& batch);  // in place, as fill_token_batch

// A model's parameters on its backend (engine/parameters.hpp: one flat array of
// values and one of gradients, each tensor a row-major Θ named as below), with
// host copies of single tensors for tests and comparisons.
MatD weight(const engine::ParameterSet<double>& params, const std::string& name);  // Θ
void set_weight(engine::ParameterSet<double>& params, const std::string& name, const MatD& theta);

struct TwoLayerConfig {
  VariantKind variant = VariantKind::vanilla;
  FirstLayer first = FirstLayer::copying_fixed;
  int d = 4, n = 16, a = 4;  // a: rows of A (Assumption 1 only)
};

// Parameter names (row convention Θ = Wᵀ): "l1.h{1,2}.{WQ,WK,WV}" (learned
// first layer), "A", "B" (learned copying: Aᵀ, d×a, and Bᵀ, d×(d−a); an empty
// one is left out), "l2.h{1,2}.{WQ,WK}", "l2.h{1,2}.WV_F" and/or "l2.h{1,2}.WV_E"
// (the value sources), "H".
//
// Forward and backward are explicit passes over the backend's kernels
// (engine/linear.hpp, engine/linear_attention.hpp), in double:
//   F = TF_1(E);  per head h: Q = F_last Θ_Q, K = F Θ_K, V = F Θ_V^F + E Θ_V^E;
//   O = Σ_h LA_last(Q, K, V);  ŷ = O Θ_H;  loss = Σ_b ‖ŷ_b − y_b‖² / B,
// and backward in reverse: dŷ = 2 (ŷ − y)/B, dΘ_H += Oᵀ dŷ, dO = dŷ Θ_Hᵀ, each head's
// linear-attention backward, then dF (and the first layer's parameters) through
// the projections.
class TwoLayerModel {
 public:
  // Weights drawn with entries N(0, 1/d) (value maps N(0, 1/d)/(2n), so that the
  // un-normalized sum over 2n keys starts at the scale of one token).
  TwoLayerModel(engine::Backend<double>& backend, const TwoLayerConfig& config, Rng& rng);
  TwoLayerModel(TwoLayerModel&&) noexcept;
  ~TwoLayerModel();

  const TwoLayerConfig& config() const;
  engine::Backend<double>& backend();
  engine::ParameterSet<double>& params();
  const engine::ParameterSet<double>& params() const;

  // Assumption 1's A ∈ R^{a×d}, B ∈ R^{(d−a)×d} (column convention), fixed or learned.
  MatD A() const;
  MatD B() const;
  MatD first_layer(const TokenBatch& batch);  // F = TF_1(E), (B T) × d
  MatD predict(const TokenBatch& batch);      // ŷ, B × d
  double loss(const TokenBatch& batch);       // squared-error loss of predict
  // The loss, with its gradient added to params().grads.
  double add_gradient(const TokenBatch& batch);
  // The same on prompts, through a batch the model keeps (filled in place).
  double add_gradient(const std::vector<Prompt>& prompts);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

void validate(const TwoLayerConfig& config);  // throws UsageError

struct StackConfig {
  int d = 4, n = 16, layers = 1, heads = 1;
  // vanilla, or skipv1: in layers ≥ 2 the value heads its plan (core/qkv_plan.hpp)
  // injects from layer 1, the last ⌈heads/2⌉, take their values from Z_0
  VariantKind variant = VariantKind::vanilla;
};

// Parameter names "l{l}.h{h}.{WQ,WK,WV}" (row convention, 2d × 2d). Forward:
// Z_l = Z_{l−1} + Σ_h LA_all(Z_{l−1} Θ_Q, Z_{l−1} Θ_K, Z_{l−1 or 0} Θ_V) / n;
// backward: dZ_{l−1} = dZ_l + the projections' input gradients of layer l's heads
// (a SkipV1 head's value gradient stops at the constant Z_0).
class LinearAttentionStack {
 public:
  // Entries N(0, 1/(2d)) scaled by 1/sqrt(heads · layers).
  LinearAttentionStack(engine::Backend<double>& backend, const StackConfig& config, Rng& rng);
  LinearAttentionStack(LinearAttentionStack&&) noexcept;
  ~LinearAttentionStack();

  const StackConfig& config() const;
  engine::Backend<double>& backend();
  engine::ParameterSet<double>& params();
  const engine::ParameterSet<double>& params() const;

  // The query row of Z_l for l = 1 … L, each B × 2d; the prediction after
  // layer l is its columns d … 2d−1.
  std::vector<MatD> query_states(const ConcatBatch& batch);
  MatD predict(const ConcatBatch& batch);  // B × d, after layer L
  double loss(const ConcatBatch& batch);
  double add_gradient(const ConcatBatch& batch);
  double add_gradient(const std::vector<Prompt>& prompts);  // through a batch the model keeps

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

void validate(const StackConfig& config);  // throws UsageError

// Σ_b ‖ŷ_b − y_b‖² / B on the backend: docs/math/icl.md's E‖ŷ − y_{n+1}‖² on a
// batch of B rows of width d; writes diff = ŷ − y.
double squared_error_loss(engine::Backend<double>& backend, int B, int d, const double* prediction,
                          const double* target, double* diff);

// docs/math/icl.md's column-convention weight W from a stored Θ = Wᵀ.
inline MatD to_column_weight(const MatD& theta) { return theta.transpose(); }

}  // namespace qkvlab::icl
