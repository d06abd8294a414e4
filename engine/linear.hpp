// A linear map on a backend, row-vector convention: Y = X W + b with X (N, in),
// W (in, out; float or 16-bit: engine/weight.hpp), b (out), Y (N, out), each a row-major view with its own leading
// dimension (engine/kernel_types.hpp's View: so a head slice or a column block can be an operand).
//   forward   Y = X W + b                    (accumulate: Y += X W + b)
//   backward  dX = dY Wᵀ (or +=),  dW += Xᵀ dY,  db += Σ_rows dY
// Built from the backend's gemm and bias kernels; the skip MLP of qwe.exp8.4
// and every projection of the language models use these two functions.
#pragma once

#include "engine/backend.hpp"
#include "engine/weight.hpp"

namespace qkvlab::engine {

template <class S>
void linear_forward(Backend<S>& be, int N, int in, int out, View<const S> X, const Weight<S>& W, const S* b,
                    View<S> Y, bool accumulate = false) {
  weight_product(be, Trans::none, N, out, in, X.data, X.ld, W, out, accumulate ? S(1) : S(0), Y.data, Y.ld);
  if (b) be.add_bias(N, out, b, Y.data, Y.ld);
}

// dX may be null (no input gradient wanted); dW, db accumulate; dX is
// overwritten unless accumulate_dx.
template <class S>
void linear_backward(Backend<S>& be, int N, int in, int out, View<const S> X, const S* W, View<const S> dY,
                     View<S> dX, S* dW, S* db, bool accumulate_dx = false) {
  if (dX.data)
    be.gemm(Trans::none, Trans::transpose, N, in, out, S(1), dY.data, dY.ld, 0, W, out, 0,
            accumulate_dx ? S(1) : S(0), dX.data, dX.ld, 0, 1);
  be.gemm(Trans::transpose, Trans::none, in, out, N, S(1), X.data, X.ld, 0, dY.data, dY.ld, 0, S(1), dW, out, 0, 1);
  if (db) be.bias_backward(N, out, dY.data, dY.ld, db);
}

}  // namespace qkvlab::engine
