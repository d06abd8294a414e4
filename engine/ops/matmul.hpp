// Matrix products: C = A B and C = A Bᵀ (scores Q Kᵀ, tied read-out X Eᵀ).
// Backward of C = A B: dA += dC Bᵀ, dB += Aᵀ dC.
// Every product goes through engine/blas.hpp (OpenBLAS for float and double
// where the engine is built with it, Eigen otherwise).
#pragma once

#include "engine/blas.hpp"
#include "engine/tape.hpp"

namespace qkvlab::engine {

template <class S>
Var<S> matmul(Var<S> A, Var<S> B) {
  require(A.cols() == B.rows(), "matmul: A is " + std::to_string(A.rows()) + "x" + std::to_string(A.cols()) +
                                    ", B is " + std::to_string(B.rows()) + "x" + std::to_string(B.cols()));
  Tape<S>& tape = A.tape();
  Var<S> C = tape.output(product(A.value(), Op::none, B.value(), Op::none), {A, B});
  tape.on_backward(C, [A, B, C] {
    if (A.requires_grad()) add_product(A.grad(), C.grad(), Op::none, B.value(), Op::transpose);
    if (B.requires_grad()) add_product(B.grad(), A.value(), Op::transpose, C.grad(), Op::none);
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
  Var<S> C = tape.output(product(A.value(), Op::none, B.value(), Op::transpose), {A, B});
  tape.on_backward(C, [A, B, C] {
    if (A.requires_grad()) add_product(A.grad(), C.grad(), Op::none, B.value(), Op::none);
    if (B.requires_grad()) add_product(B.grad(), C.grad(), Op::transpose, A.value(), Op::none);
  });
  return C;
}

template <class S>
Var<S> operator*(Var<S> A, Var<S> B) {
  return matmul(A, B);
}

}  // namespace qkvlab::engine
