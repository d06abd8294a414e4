// Matrix products: C = A B and C = A Bᵀ (scores Q Kᵀ, tied read-out X Eᵀ).
// Backward of C = A B: dA += dC Bᵀ, dB += Aᵀ dC.
#pragma once

#include "engine/tape.hpp"

namespace qkvlab::engine {

template <class S>
Var<S> matmul(Var<S> A, Var<S> B) {
  require(A.cols() == B.rows(), "matmul: A is " + std::to_string(A.rows()) + "x" + std::to_string(A.cols()) +
                                    ", B is " + std::to_string(B.rows()) + "x" + std::to_string(B.cols()));
  Tape<S>& tape = A.tape();
  Var<S> C = tape.output(A.value() * B.value(), {A, B});
  tape.on_backward(C, [A, B, C] {
    if (A.requires_grad()) A.grad().noalias() += C.grad() * B.value().transpose();
    if (B.requires_grad()) B.grad().noalias() += A.value().transpose() * C.grad();
  });
  return C;
}

// C = A Bᵀ. Backward: dA += dC B, dB += dCᵀ A.
template <class S>
Var<S> matmul_nt(Var<S> A, Var<S> B) {
  require(A.cols() == B.cols(), "matmul_nt: A is " + std::to_string(A.rows()) + "x" +
                                    std::to_string(A.cols()) + ", B is " + std::to_string(B.rows()) + "x" +
                                    std::to_string(B.cols()) + " (need equal column counts)");
  Tape<S>& tape = A.tape();
  Var<S> C = tape.output(A.value() * B.value().transpose(), {A, B});
  tape.on_backward(C, [A, B, C] {
    if (A.requires_grad()) A.grad().noalias() += C.grad() * B.value();
    if (B.requires_grad()) B.grad().noalias() += C.grad().transpose() * A.value();
  });
  return C;
}

template <class S>
Var<S> operator*(Var<S> A, Var<S> B) {
  return matmul(A, B);
}

}  // namespace qkvlab::engine
