// Sums and scalings: A + B, c A, and the bias add X + 1 bᵀ (b a 1×d row
// added to every row of X). Backward of the bias add sums dY over rows.
#pragma once

#include <type_traits>

#include "engine/tape.hpp"

namespace qkvlab::engine {

template <class S>
Var<S> add(Var<S> A, Var<S> B) {
  require(A.rows() == B.rows() && A.cols() == B.cols(), "add: shapes differ");
  Tape<S>& tape = A.tape();
  Var<S> C = tape.output(A.value() + B.value(), {A, B});
  tape.on_backward(C, [A, B, C] {
    if (A.requires_grad()) A.grad() += C.grad();
    if (B.requires_grad()) B.grad() += C.grad();
  });
  return C;
}

template <class S>
Var<S> operator+(Var<S> A, Var<S> B) {
  return add(A, B);
}

template <class S>
Var<S> scale(Var<S> A, std::type_identity_t<S> c) {
  Tape<S>& tape = A.tape();
  Var<S> C = tape.output(c * A.value(), {A});
  tape.on_backward(C, [A, C, c] { A.grad() += c * C.grad(); });
  return C;
}

template <class S>
Var<S> add_bias(Var<S> X, Var<S> b) {
  require(b.rows() == 1 && b.cols() == X.cols(), "add_bias: b must be 1 x X.cols()");
  Tape<S>& tape = X.tape();
  Var<S> Y = tape.output(X.value().rowwise() + b.value().row(0), {X, b});
  tape.on_backward(Y, [X, b, Y] {
    if (X.requires_grad()) X.grad() += Y.grad();
    if (b.requires_grad()) b.grad() += Y.grad().colwise().sum();
  });
  return Y;
}

}  // namespace qkvlab::engine
