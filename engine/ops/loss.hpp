// Losses, each a 1×1 Var to call backward() on.
//   mse_loss(P, T)           = (1/N) Σ (P − T)²  over all N entries;  dP += 2 (P − T) / N
//   cross_entropy(Z, t)      = (1/n) Σ_i [ logsumexp(z_i) − z_{i,t_i} ]  for logits Z ∈ R^{n×V}
//                               and class indices t_i ∈ [0, V);  dZ += (softmax(Z) − onehot(t)) / n
// Cross-entropy works from logits: logsumexp subtracts each row's maximum, so
// large logits neither overflow nor lose the loss to cancellation.
#pragma once

#include <vector>

#include "engine/tape.hpp"

namespace qkvlab::engine {

template <class S>
Var<S> mse_loss(Var<S> P, Var<S> T) {
  require(P.rows() == T.rows() && P.cols() == T.cols(), "mse_loss: prediction and target shapes differ");
  require(P.value().size() > 0, "mse_loss: empty prediction");
  const S N = S(P.value().size());
  Mat<S> residual = P.value() - T.value();
  Tape<S>& tape = P.tape();
  Var<S> L = tape.output(Mat<S>::Constant(1, 1, residual.squaredNorm() / N), {P, T});
  tape.on_backward(L, [P, T, L, N, residual = std::move(residual)] {
    const S dL = L.grad()(0, 0);
    if (P.requires_grad()) P.grad() += (S(2) * dL / N) * residual;
    if (T.requires_grad()) T.grad() -= (S(2) * dL / N) * residual;
  });
  return L;
}

template <class S>
Var<S> cross_entropy(Var<S> Z, const std::vector<int>& targets) {
  const Eigen::Index n = Z.rows(), V = Z.cols();
  require(Eigen::Index(targets.size()) == n, "cross_entropy: need one target per row of logits");
  require(n > 0 && V > 0, "cross_entropy: empty logits");
  for (int t : targets)
    require(t >= 0 && t < V,
            "cross_entropy: target " + std::to_string(t) + " outside [0, " + std::to_string(V) + ")");
  Mat<S> softmax = Z.value();
  S loss = 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    auto row = softmax.row(i);
    const S max = row.maxCoeff();
    row.array() = (row.array() - max).exp();
    const S sum = row.sum();
    loss += (max - Z.value()(i, targets[i])) + std::log(sum);
    row /= sum;
  }
  Tape<S>& tape = Z.tape();
  Var<S> L = tape.output(Mat<S>::Constant(1, 1, loss / S(n)), {Z});
  tape.on_backward(L, [Z, L, targets, softmax = std::move(softmax)] {
    const S dL = L.grad()(0, 0) / S(Z.rows());
    Mat<S>& dZ = Z.grad();
    dZ += dL * softmax;
    for (Eigen::Index i = 0; i < Z.rows(); ++i) dZ(i, targets[i]) -= dL;
  });
  return L;
}

}  // namespace qkvlab::engine
