// The small attention network whose functional dimension `qkvlab fdim` counts, and the layout
// of its parameters in one flat vector θ (docs/math/fdim.md).
//
// Row-vector convention (docs/math/conventions.md): a sequence is X ∈ R^{T×d}, a linear map
// X ↦ X W + 1 bᵀ. Per layer l, with N the pre-norm (identity when --norm none):
//   attention A(X) = Σ_h softmax(Q_h K_hᵀ / √d_h) V_h W_O^h + b_O,
//     Q_h = N(X) W_Q^h + b_Q^h (free) or N(X)[:, h·d_h … (h+1)·d_h) (identity: W_Q = I),
//     K_h = N(X) W_K^h + b_K^h, V_h = N(X) W_V^h + b_V^h;
//   MLP M(Y) = σ(N(Y) W_1 + b_1) W_2 + b_2;
//   both skips: Y = X + A(X), X' = Y + M(Y); attention skip: X' = M(X + A(X)); none: X' = M(A(X))
//   (without an MLP, X' = Y). Ends: X_0 = E[tokens], X_in E + e, or X_in (none), plus learned
//   positions P; output N_f(X_L) D + b_D (linear), N_f(X_L) Eᵀ (tied) or X_L (none).
#pragma once

#include <Eigen/Core>

#include <string>
#include <vector>

namespace qkvlab::fdim {

enum class Skips { both, attention, none };
enum class Norm { none, layernorm, rmsnorm };
enum class Mlp { none, relu, gelu };
enum class Embed { tokens, linear, none };
enum class Readout { linear, tied, none };

struct Config {
  int layers = 1, d = 4, heads = 1, head_dim = 4, seq = 4, inputs = 4;
  Skips skips = Skips::both;
  Norm norm = Norm::none;
  Mlp mlp = Mlp::none;
  int ffn = 8;
  Embed embed = Embed::none;
  int vocab = 8, din = 4;
  bool pos_emb = false;
  Readout readout = Readout::none;
  int dout = 4;
  bool bias = false, norm_gain = false, causal = false;
  std::vector<int> identity_layers;  // 1-based layers with W_Q = I
  double norm_eps = 1e-5;
  unsigned long long seed = 0;

  bool identity_query(int layer) const;  // layer from 0
  int input_dim() const;                  // vocab, din or d
  int output_dim() const;                 // dout, the input dimension (tied) or d
};

// Throws UsageError naming the option when the configuration cannot be built.
void validate(const Config& c);

const char* skips_name(Skips s);
const char* norm_name(Norm n);
const char* mlp_name(Mlp m);
const char* embed_name(Embed e);
const char* readout_name(Readout r);

// A named tensor of θ: rows × cols entries from offset, column-major.
struct Tensor {
  std::string name;
  int rows = 0, cols = 0;
  Eigen::Index offset = 0;
};

struct LayerTensors {  // −1: absent
  int norm1_gain = -1, norm2_gain = -1, b_O = -1, W_1 = -1, b_1 = -1, W_2 = -1, b_2 = -1;
  std::vector<int> W_Q, W_K, W_V, W_O, b_Q, b_K, b_V;  // per head; W_Q, b_Q empty in identity layers
};

struct Layout {
  std::vector<Tensor> tensors;
  int embed = -1, embed_bias = -1, positions = -1, final_gain = -1, readout = -1, readout_bias = -1;
  std::vector<LayerTensors> layers;
  Eigen::Index size = 0;
};

Layout layout(const Config& c);

}  // namespace qkvlab::fdim
