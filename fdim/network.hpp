// The forward pass of the network of config.hpp at any scalar S (double; Dual<double> for the
// Jacobian; Dual<Interval> for its enclosure), built from core's attention head and softmax
// (core/attention.hpp), activations (core/block.hpp) and normalizers (core/normalize.hpp).
#pragma once

#include "core/attention.hpp"
#include "core/block.hpp"
#include "core/normalize.hpp"
#include "core/rng.hpp"
#include "fdim/config.hpp"
#include "fdim/dual.hpp"

#include <cmath>

namespace qkvlab::fdim {

// One input sequence: token ids (--embed tokens) or a T × input_dim matrix.
struct Sequence {
  std::vector<int> tokens;
  MatD x;
};

// A random point: θ (each weight N(0, 1/fan_in), gains and DyT's α 1 + N(0, 0.3²), biases and DyT's β
// N(0, 0.3²), square skip matrices I + 0.3 N(0, 1/d)) and --inputs sequences, all drawn from --seed.
struct Point {
  VecD theta;
  std::vector<Sequence> inputs;
};
Point draw_point(const Network& c, const Layout& layout);

template <class S> Mat<S> tensor(const Layout& layout, const Vec<S>& theta, int id) {
  const Tensor& t = layout.tensors[id];
  return Eigen::Map<const Mat<S>>(theta.data() + t.offset, t.rows, t.cols);
}

namespace detail {

template <class S> Mat<S> affine(const Mat<S>& X, const Layout& L, const Vec<S>& th, int W, int b) {
  Mat<S> Y = X * tensor<S>(L, th, W);
  if (b >= 0) Y.rowwise() += tensor<S>(L, th, b).row(0);
  return Y;
}

// Pre-norm N(X) on rows (core's normalizers act on columns; DyT is core's tanh(1·(α X))), times the
// gain, plus DyT's offset, where they exist.
template <class S>
Mat<S> normed(const Network& c, const Mat<S>& X, const Layout& L, const Vec<S>& th, const NormTensors& n) {
  Mat<S> Z;
  switch (c.norm) {
    case Norm::none: return X;
    case Norm::layernorm: Z = layer_norm<S>(X.transpose(), c.norm_eps).transpose(); break;
    case Norm::rmsnorm: Z = rms_norm<S>(X.transpose(), c.norm_eps).transpose(); break;
    case Norm::dyt: Z = dyt<S>(Mat<S>(X * tensor<S>(L, th, n.alpha)(0, 0)), 1.0); break;
  }
  if (n.gain >= 0) Z = Z * tensor<S>(L, th, n.gain).row(0).asDiagonal();
  if (n.offset >= 0) Z.rowwise() += tensor<S>(L, th, n.offset).row(0);
  return Z;
}

// The skip S(X): X itself, X A, (X U) V, or X + (X U) V (low-rank).
template <class S> Mat<S> skip(const Mat<S>& X, const Layout& L, const Vec<S>& th, const SkipTensors& s) {
  if (s.A >= 0) return X * tensor<S>(L, th, s.A);
  if (s.U < 0) return X;
  const Mat<S> branch = (X * tensor<S>(L, th, s.U)) * tensor<S>(L, th, s.V);
  return s.lowrank ? Mat<S>(X + branch) : branch;
}

template <class S>
Mat<S> attention(const Network& c, const Mat<S>& X, const Layout& L, const Vec<S>& th, const LayerTensors& t,
                 bool identity) {
  const Mat<S> Z = normed<S>(c, X, L, th, t.norm1);
  const S scale = S(std::sqrt(double(c.head_dim)));
  const Mask mask = c.causal ? Mask::causal : Mask::bidirectional;
  auto bias = [](const std::vector<int>& b, int h) { return b.empty() ? -1 : b[h]; };
  Mat<S> out = Mat<S>::Zero(X.rows(), c.d);
  for (int h = 0; h < c.heads; ++h) {
    const Mat<S> Q = identity ? Mat<S>(Z.middleCols(h * c.head_dim, c.head_dim))
                              : affine<S>(Z, L, th, t.W_Q[h], bias(t.b_Q, h));
    const Mat<S> K = affine<S>(Z, L, th, t.W_K[h], bias(t.b_K, h));
    const Mat<S> V = affine<S>(Z, L, th, t.W_V[h], bias(t.b_V, h));
    out += attention_head<S>(Q, K, V, mask, scale) * tensor<S>(L, th, t.W_O[h]);
  }
  if (t.b_O >= 0) out.rowwise() += tensor<S>(L, th, t.b_O).row(0);
  return out;
}

// The logistic 1 / (1 + e^−z) (MPFI: through its exp).
template <class S> S logistic(const S& z) {
  using std::exp;
  return S(1) / (S(1) + exp(S(-z)));
}

// The gate g of a gated MLP (core's relu and gelu, silu = z · logistic(z), the logistic).
template <class S> Mat<S> gate(const Network& c, const Mat<S>& G) {
  switch (c.mlp) {
    case Mlp::reglu: return activate<S>(G, MlpActivation::relu);
    case Mlp::geglu: return activate<S>(G, MlpActivation::gelu);
    case Mlp::swiglu: return G.unaryExpr([](const S& z) -> S { return z * logistic<S>(z); });
    default: return G.unaryExpr([](const S& z) -> S { return logistic<S>(z); });
  }
}

// σ of the MLP: core's relu and gelu, tanh, relu², and the gated g(gates) ⊙ values.
template <class S> Mat<S> hidden(const Network& c, const Mat<S>& Z) {
  if (c.gated()) return gate<S>(c, Mat<S>(Z.leftCols(c.ffn))).cwiseProduct(Z.rightCols(c.ffn));
  switch (c.mlp) {
    case Mlp::relu: return activate<S>(Z, MlpActivation::relu);
    case Mlp::gelu: return activate<S>(Z, MlpActivation::gelu);
    case Mlp::tanh: return Z.unaryExpr([](const S& z) -> S { using std::tanh; return tanh(z); });
    case Mlp::relu2: return Z.unaryExpr([](const S& z) -> S { return relu_squared(z); });
    default: return Z;
  }
}

template <class S>
Mat<S> mlp_of(const Network& c, const Mat<S>& Y, const Layout& L, const Vec<S>& th, const LayerTensors& t) {
  const Mat<S> H = hidden<S>(c, affine<S>(normed<S>(c, Y, L, th, t.norm2), L, th, t.W_1, t.b_1));
  return affine<S>(H, L, th, t.W_2, t.b_2);
}

template <class S> Mat<S> embed(const Network& c, const Sequence& in, const Layout& L, const Vec<S>& th) {
  Mat<S> X;
  if (c.embed == Embed::tokens) {
    const Mat<S> E = tensor<S>(L, th, L.embed);
    X.resize(Eigen::Index(in.tokens.size()), c.d);
    for (std::size_t i = 0; i < in.tokens.size(); ++i) X.row(Eigen::Index(i)) = E.row(in.tokens[i]);
  } else {
    X = in.x.cast<S>();
    if (c.embed == Embed::linear) X = affine<S>(X, L, th, L.embed, L.embed_bias);
  }
  if (L.positions >= 0) X += tensor<S>(L, th, L.positions);
  return X;
}

}  // namespace detail

// The network's output on one sequence, T × output_dim.
template <class S> Mat<S> forward(const Network& c, const Layout& L, const Vec<S>& th, const Sequence& in) {
  Mat<S> X = detail::embed<S>(c, in, L, th);
  for (int l = 0; l < c.layers; ++l) {
    const LayerTensors& t = L.layers[l];
    Mat<S> Y = X;
    if (c.attention()) {
      Y = detail::attention<S>(c, X, L, th, t, c.identity_query(l));
      if (c.attention_skip()) Y += detail::skip<S>(X, L, th, t.skip1);
    }
    if (c.mlp == Mlp::none) {
      X = Y;
      continue;
    }
    X = detail::mlp_of<S>(c, Y, L, th, t);
    if (c.mlp_skip()) X += detail::skip<S>(Y, L, th, t.skip2);
  }
  if (c.readout == Readout::none) return X;
  const Mat<S> Z = detail::normed<S>(c, X, L, th, L.final_norm);
  if (c.readout == Readout::tied) return Z * tensor<S>(L, th, L.embed).transpose();
  return detail::affine<S>(Z, L, th, L.readout, L.readout_bias);
}

}  // namespace qkvlab::fdim
