// Elementwise activations:
//   GELU(x) = x Φ(x), Φ the standard normal CDF (exact erf form, not tanh);  GELU'(x) = Φ(x) + x φ(x)
//   ReLU(x) = max(x, 0);  ReLU'(x) = [x > 0]
//   SwiGLU(a, b) = SiLU(a) ⊙ b,  SiLU(a) = a σ(a);  SiLU'(a) = σ(a) (1 + a (1 − σ(a)))
// (in an MLP: SwiGLU(X W_gate, X W_up) W_down).
#pragma once

#include <cmath>
#include <numbers>
#include <unsupported/Eigen/SpecialFunctions>

#include "engine/tape.hpp"

namespace qkvlab::engine {

// Φ(X) = (1 + erf(X/√2)) / 2 entrywise, with Eigen's vectorized erf (for
// float a rational approximation within 2e-7 of Φ, over ten times faster than
// std::erf; for double std::erf).
template <class S>
Mat<S> normal_cdf(const Mat<S>& X) {
  return (S(0.5) * (S(1) + (X.array() / std::numbers::sqrt2_v<S>).erf())).matrix();
}

// φ(X) = exp(−X²/2) / √(2π) entrywise.
template <class S>
Mat<S> normal_pdf(const Mat<S>& X) {
  return ((S(-0.5) * X.array().square()).exp() * (std::numbers::inv_sqrtpi_v<S> / std::numbers::sqrt2_v<S>))
      .matrix();
}

// σ(a) without overflow: exp() only ever sees a non-positive argument.
template <class S>
S sigmoid(S a) {
  if (a >= S(0)) return S(1) / (S(1) + std::exp(-a));
  const S e = std::exp(a);
  return e / (S(1) + e);
}

// Φ(X) is kept for the backward pass.
template <class S>
Var<S> gelu(Var<S> X) {
  Mat<S> Phi = normal_cdf(X.value());
  Tape<S>& tape = X.tape();
  Var<S> Y = tape.output(X.value().cwiseProduct(Phi), {X});
  tape.on_backward(Y, [X, Y, Phi = std::move(Phi)] {
    X.grad().array() += Y.grad().array() * (Phi + X.value().cwiseProduct(normal_pdf(X.value()))).array();
  });
  return Y;
}

template <class S>
Var<S> relu(Var<S> X) {
  Tape<S>& tape = X.tape();
  Var<S> Y = tape.output(X.value().cwiseMax(S(0)), {X});
  tape.on_backward(Y,
                   [X, Y] { X.grad().array() += (X.value().array() > S(0)).select(Y.grad().array(), S(0)); });
  return Y;
}

template <class S>
Var<S> swiglu(Var<S> a, Var<S> b) {
  require(a.rows() == b.rows() && a.cols() == b.cols(), "swiglu: gate and value shapes differ");
  const Mat<S> sig = a.value().unaryExpr([](S x) { return sigmoid(x); });
  const Mat<S> silu = a.value().cwiseProduct(sig);
  Tape<S>& tape = a.tape();
  Var<S> Y = tape.output(silu.cwiseProduct(b.value()), {a, b});
  tape.on_backward(Y, [a, b, Y, sig, silu] {
    const Mat<S>& dY = Y.grad();
    if (a.requires_grad())
      a.grad().array() +=
          dY.array() * b.value().array() * sig.array() * (S(1) + a.value().array() * (S(1) - sig.array()));
    if (b.requires_grad()) b.grad().array() += dY.array() * silu.array();
  });
  return Y;
}

}  // namespace qkvlab::engine
