// The paper's SkipV1 construction (Appendix A, proof of Theorem 2) on the
// coordinate copying layer A = [I_a 0], B = [0 I_{d−a}]. Column convention.
//
// With W^1 = −½Λ, W^2 = Λ and W_Kᵀ W_Q = I (so M^h = [A; 0] = diag(I_a, 0) =: P_a)
// the SkipV1 map is U_2 = Λ K_a, K_a = (G_2^2 − ½ G_{1,D}) P_a. With z_i = [A x_i; B y_i]
// (the first a rows of x_i over the last d − a rows of y_i), only K_a's first a
// columns are non-zero:
//   K_a[:, :a] = (½ X Xᵀ + Y Zᵀ − ½ Z Zᵀ)[:, :a]
//             = (Y Xᵀ)[:, :a] + ½ [0_{a×a}; (X Xᵀ − Y Xᵀ)[a:, :a]],
// so at a = d, K_d = Y Xᵀ and U_2 = Λ Y Xᵀ (N_1' = N_2' = 0, N_3' = Λ Y Xᵀ).
// Equal to models.hpp's reduced_map at these weights (tests/icl_theory_test.cpp).
#pragma once

#include "core/types.hpp"

namespace qkvlab::icl {

inline MatD skipv1_construction_map(const MatD& XXt, const MatD& YXt, int a) {
  const Eigen::Index d = XXt.rows();
  MatD K = MatD::Zero(d, d);
  K.leftCols(a) = YXt.leftCols(a);
  K.bottomLeftCorner(d - a, a) += 0.5 * (XXt.bottomLeftCorner(d - a, a) - YXt.bottomLeftCorner(d - a, a));
  return K;
}

}  // namespace qkvlab::icl
