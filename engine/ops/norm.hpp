// Row-wise normalizers with a gain g (a 1×d row), each row x ∈ R^d a token:
//   LayerNorm  y = g ⊙ N(x),  N(x) = (x − μ(x)) / sqrt(σ²(x) + ε)  (σ² the population variance)
//   RMSNorm    y = g ⊙ R(x),  R(x) = x / sqrt(‖x‖²/d + ε)
// These are docs/math/qkv.md's N and R ("Normalizers", there in column form) with gain
// G = diag(g). No bias: add one with add_bias. Backward, per row, with
// r = 1/sqrt(σ² + ε) (resp. 1/sqrt(‖x‖²/d + ε)), n = N(x) (resp. R(x)), dn = dy ⊙ g:
//   LayerNorm  dx = r (dn − mean(dn) − n mean(dn ⊙ n))
//   RMSNorm    dx = r (dn − n mean(dn ⊙ n))
//   both       dg += Σ_rows dy ⊙ n
#pragma once

#include <type_traits>

#include "engine/kernel_types.hpp"
#include "engine/tape.hpp"

namespace qkvlab::engine {

// y = g ⊙ n(x) row-wise; the backward differs between the two normalizers
// only by LayerNorm's extra −mean(dn) term.
template <class S>
Var<S> normalize_rows(Var<S> X, Var<S> g, S eps, Centering centering) {
  require(g.rows() == 1 && g.cols() == X.cols(), "norm: the gain must be 1 x X.cols()");
  require(X.cols() > 0, "norm: no features");
  require(eps > S(0), "norm: eps must be positive");
  const auto d = S(X.cols());
  Mat<S> n = X.value();
  if (centering == Centering::mean) n.colwise() -= n.rowwise().mean();
  const Eigen::Array<S, Eigen::Dynamic, 1> r = (n.rowwise().squaredNorm().array() / d + eps).rsqrt();
  n.array().colwise() *= r;
  Tape<S>& tape = X.tape();
  Var<S> Y = tape.output(n.array().rowwise() * g.value().row(0).array(), {X, g});
  tape.on_backward(Y, [X, g, Y, d, centering, n = std::move(n), r] {
    const Mat<S>& dY = Y.grad();
    if (g.requires_grad()) g.grad() += (dY.array() * n.array()).colwise().sum().matrix();
    if (!X.requires_grad()) return;
    Eigen::Array<S, Eigen::Dynamic, Eigen::Dynamic> dn = dY.array().rowwise() * g.value().row(0).array();
    const Eigen::Array<S, Eigen::Dynamic, 1> dn_dot_n = (dn * n.array()).rowwise().sum() / d;
    if (centering == Centering::mean) dn.colwise() -= dn.rowwise().sum() / d;
    dn -= n.array().colwise() * dn_dot_n;
    X.grad().array() += dn.colwise() * r;
  });
  return Y;
}

template <class S>
Var<S> layer_norm(Var<S> X, Var<S> g, std::type_identity_t<S> eps = S(1e-5)) {
  return normalize_rows(X, g, eps, Centering::mean);
}

template <class S>
Var<S> rms_norm(Var<S> X, Var<S> g, std::type_identity_t<S> eps = S(1e-5)) {
  return normalize_rows(X, g, eps, Centering::none);
}

}  // namespace qkvlab::engine
