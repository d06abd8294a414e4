// The small attention network whose functional dimension `qkvlab fdim` counts, and the layout
// of its parameters in one flat vector θ (docs/math/fdim.md).
//
// Row-vector convention (docs/math/conventions.md): a sequence is X ∈ R^{T×d}, a linear map
// X ↦ X W + 1 bᵀ. Per layer l, with N the pre-norm (identity when --norm none; DyT: γ ⊙ tanh(α x) + β
// with a learned scalar α, optional gain γ and offset β):
//   attention A(X) = Σ_h softmax(Q_h K_hᵀ / √d_h) V_h W_O^h + b_O,
//     Q_h = N(X) W_Q^h + b_Q^h (free) or N(X)[:, h·d_h … (h+1)·d_h) (identity: W_Q = I),
//     K_h = N(X) W_K^h + b_K^h, V_h = N(X) W_V^h + b_V^h;
//   MLP M(Y) = σ(N(Y) W_1 + b_1) W_2 + b_2 (σ: ReLU, GELU, tanh, ReLU²; gated, W_1 = [gates | values]:
//     σ = g(gates) ⊙ values with g = relu (ReGLU), silu (SwiGLU), gelu (GeGLU), the logistic (GLU));
//   both skips: Y = S(X) + A(X), X' = S(Y) + M(Y); attention skip: X' = M(S(X) + A(X)); none: X' = M(A(X))
//   (without an MLP, X' = Y; without attention, --mixer none, Y = X), where the skip S is the identity,
//   X A (learned), X U V (identity units with trainable U, V) or X + X U W (low-rank, U d × r, W r × d).
//   Ends: X_0 = E[tokens], X_in E + e, or X_in (none), plus learned
//   positions P; output N_f(X_L) D + b_D (linear), N_f(X_L) Eᵀ (tied) or X_L (none).
#pragma once

#include <Eigen/Core>

#include <string>
#include <vector>

namespace qkvlab::fdim {

enum class Skips { both, attention, none };
enum class Norm { none, layernorm, rmsnorm, dyt };
enum class Mlp { none, relu, gelu, tanh, relu2, reglu, swiglu, geglu, glu };
enum class Mixer { attention, none };
enum class SkipKind { identity, learned, units, lowrank };
enum class Embed { tokens, linear, none };
enum class Readout { linear, tied, none };

// The network (its architecture, as above) and where its Jacobian is taken: `inputs` sequences of
// `seq` tokens at the point drawn from `seed`. (lm::Config is the trained language models'.)
struct Network {
  int layers = 1, d = 4, heads = 1, head_dim = 4, seq = 4, inputs = 4;
  Mixer mixer = Mixer::attention;
  Skips skips = Skips::both;
  SkipKind skip_kind = SkipKind::identity;
  int skip_rank = 1;  // r of --skip-kind lowrank
  Norm norm = Norm::none;
  Mlp mlp = Mlp::none;
  int ffn = 8;
  Embed embed = Embed::none;
  int vocab = 8, din = 4;
  bool pos_emb = false;
  Readout readout = Readout::none;
  int dout = 4;
  bool bias = false, norm_gain = false, norm_bias = false, causal = false;
  std::vector<int> identity_layers;  // 1-based layers with W_Q = I
  double norm_eps = 1e-5;
  unsigned long long seed = 0;
  int threads = 0;  // workers of the Jacobian's columns and the gauges' checks (0: one per hardware thread);
                    // not the network's: every count is the same at any thread count

  bool identity_query(int layer) const;  // layer from 0
  int input_dim() const;                  // vocab, din or d
  int output_dim() const;                 // dout, the input dimension (tied) or d
  bool gated() const;                     // ReGLU, SwiGLU, GeGLU, GLU
  int hidden_columns() const;             // W_1's columns: ffn, 2·ffn gated
  bool attention() const { return mixer == Mixer::attention; }
  bool attention_skip() const { return attention() && skips != Skips::none; }
  bool mlp_skip() const { return mlp != Mlp::none && skips == Skips::both; }
};

// Throws UsageError naming the option when the configuration cannot be built.
void validate(const Network& c);

const char* skips_name(Skips s);
const char* norm_name(Norm n);
const char* mlp_name(Mlp m);
const char* mixer_name(Mixer m);
const char* skip_kind_name(SkipKind k);
const char* embed_name(Embed e);
const char* readout_name(Readout r);

// A named tensor of θ: rows × cols entries from offset, column-major.
struct Tensor {
  std::string name;
  int rows = 0, cols = 0;
  Eigen::Index offset = 0;
};

// A pre-norm's parameters (−1: absent): DyT's α, a gain γ, DyT's offset β.
struct NormTensors {
  int alpha = -1, gain = -1, offset = -1;
};

// A learned skip's matrices (−1: absent): A (learned), U and V (units; low-rank: U d × r, V = W r × d).
struct SkipTensors {
  int A = -1, U = -1, V = -1;
  bool lowrank = false;  // S(X) = X + X U V rather than X U V
};

struct LayerTensors {  // −1: absent
  NormTensors norm1, norm2;
  SkipTensors skip1, skip2;  // around attention, around the MLP
  int b_O = -1, W_1 = -1, b_1 = -1, W_2 = -1, b_2 = -1;
  std::vector<int> W_Q, W_K, W_V, W_O, b_Q, b_K, b_V;  // per head; W_Q, b_Q empty in identity layers
};

struct Layout {
  std::vector<Tensor> tensors;
  int embed = -1, embed_bias = -1, positions = -1, readout = -1, readout_bias = -1;
  NormTensors final_norm;
  std::vector<LayerTensors> layers;
  Eigen::Index size = 0;
};

Layout layout(const Network& c);

// layout(c).size in closed form, in double: a configuration too large to build (a tensor per head)
// or to count in an Eigen::Index is sized without building it, so it is refused before any allocation.
double parameter_count(const Network& c);

}  // namespace qkvlab::fdim
