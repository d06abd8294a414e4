// Linear attention over a batch of prompts stacked by rows, as one tape
// operation (engine/tape.hpp). Row-vector convention: a prompt is a block of T
// consecutive rows (tokens), prompt b occupies rows b T … b T + T − 1.
//
// Within prompt b only its first `keys` rows are key/value sources (the mask
// P = diag(I_keys, 0) of docs/math/icl.md: the query token is not a source), so,
// with K_b, V_b those rows and Q_b the prompt's query rows,
//   G_b = K_bᵀ V_b                 (d_k × d_v, the linear-attention state)
//   out_b = c Q_b G_b             (c a fixed scale)
// which is c (Q_b K_bᵀ) V_b computed in the associative order, O(T d_k d_v)
// per prompt. Q_b is every row of the prompt (`all_queries`) or only its last
// row (`last_query`, one output row per prompt). Backward, with dO_b the
// gradient of out_b:
//   dG_b = c Q_bᵀ dO_b,  dQ_b += c dO_b G_bᵀ,  dK_b += V_b dG_bᵀ,  dV_b += K_b dG_b.
// engine::linear_attention computes the same thing for one prompt (tested
// equal in tests/icl_train_test.cpp); this operation batches prompts without
// one tape node per prompt. last_token_rows gathers each prompt's query row.
#pragma once

#include "engine/tape.hpp"

#include <vector>

namespace qkvlab::icl {

enum class Queries { all_queries, last_query };

inline engine::Var<double> batched_linear_attention(engine::Var<double> Q, engine::Var<double> K,
                                                    engine::Var<double> V, Eigen::Index tokens,
                                                    Eigen::Index keys, Queries queries, double c = 1.0) {
  using engine::require;
  require(tokens >= 1 && keys >= 1 && keys <= tokens, "batched_linear_attention: need 1 <= keys <= tokens");
  require(K.rows() % tokens == 0, "batched_linear_attention: rows are not a whole number of prompts");
  const Eigen::Index B = K.rows() / tokens;
  require(V.rows() == K.rows() && Q.rows() == K.rows(), "batched_linear_attention: Q, K, V row counts differ");
  require(Q.cols() == K.cols(), "batched_linear_attention: Q and K have different widths");
  const bool last = queries == Queries::last_query;
  const Eigen::Index q_rows = last ? 1 : tokens, q_first = last ? tokens - 1 : 0;
  const Eigen::Index dk = K.cols(), dv = V.cols();
  std::vector<MatD> G(static_cast<std::size_t>(B));
  MatD out(B * q_rows, dv);
  for (Eigen::Index b = 0; b < B; ++b) {
    MatD& g = G[std::size_t(b)];
    g.noalias() = K.value().middleRows(b * tokens, keys).transpose() * V.value().middleRows(b * tokens, keys);
    out.middleRows(b * q_rows, q_rows).noalias() = c * Q.value().middleRows(b * tokens + q_first, q_rows) * g;
  }
  engine::Tape<double>& tape = Q.tape();
  engine::Var<double> y = tape.output(std::move(out), {Q, K, V});
  tape.on_backward(y, [=, G = std::move(G)] {
    const MatD& dO = y.grad();
    MatD dG(dk, dv);
    for (Eigen::Index b = 0; b < B; ++b) {
      const auto dOb = dO.middleRows(b * q_rows, q_rows);
      const auto Qb = Q.value().middleRows(b * tokens + q_first, q_rows);
      if (Q.requires_grad()) Q.grad().middleRows(b * tokens + q_first, q_rows).noalias() += c * dOb * G[std::size_t(b)].transpose();
      if (!K.requires_grad() && !V.requires_grad()) continue;
      dG.noalias() = c * Qb.transpose() * dOb;
      if (K.requires_grad())
        K.grad().middleRows(b * tokens, keys).noalias() += V.value().middleRows(b * tokens, keys) * dG.transpose();
      if (V.requires_grad())
        V.grad().middleRows(b * tokens, keys).noalias() += K.value().middleRows(b * tokens, keys) * dG;
    }
  });
  return y;
}

// The last row of every prompt (its query token): rows b T + T − 1, b = 0 … B−1.
// Backward scatters each row's gradient back to its place.
inline engine::Var<double> last_token_rows(engine::Var<double> X, Eigen::Index tokens) {
  engine::require(tokens >= 1 && X.rows() % tokens == 0, "last_token_rows: rows are not a whole number of prompts");
  const Eigen::Index B = X.rows() / tokens;
  MatD out(B, X.cols());
  for (Eigen::Index b = 0; b < B; ++b) out.row(b) = X.value().row(b * tokens + tokens - 1);
  engine::Tape<double>& tape = X.tape();
  engine::Var<double> y = tape.output(std::move(out), {X});
  tape.on_backward(y, [X, y, B, tokens] {
    for (Eigen::Index b = 0; b < B; ++b) X.grad().row(b * tokens + tokens - 1) += y.grad().row(b);
  });
  return y;
}

}  // namespace qkvlab::icl
