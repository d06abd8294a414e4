// Elementwise kernels of the CPU backend, over a range of rows or entries
// (the backend splits the work into fixed ranges and runs them on its threads).
//   axpby      Y[r, 0:cols] = α X[r, 0:cols] + β Y[r, 0:cols]   (β = 0: Y is overwritten)
//   add_bias   Y[r, :] += b;  its backward db += Σ_r dY[r, :] (bias_backward, over a column block)
//   GELU       Y = GELU(X);   dX += dY ⊙ GELU'(X)                (math.hpp, both forms)
//   ReLU       Y = max(X, 0);  dX += dY ⊙ [X > 0]                 (ReLU'(0) taken as 0)
//   SwiGLU     Y = silu(G) ⊙ U;  dG += dY ⊙ U ⊙ silu'(G),  dU += dY ⊙ silu(G)
#pragma once

#include <cstddef>

#include "engine/kernel_types.hpp"
#include "engine/kernels/math.hpp"

namespace qkvlab::engine::kernels {

template <class S>
void axpby_rows(int r0, int r1, int cols, S alpha, const S* X, int ldx, S beta, S* Y, int ldy) {
  for (int r = r0; r < r1; ++r) {
    const S* x = X + std::size_t(r) * ldx;
    S* y = Y + std::size_t(r) * ldy;
    if (beta == S(0) && alpha == S(0))
      for (int c = 0; c < cols; ++c) y[c] = S(0);
    else if (beta == S(0))
      for (int c = 0; c < cols; ++c) y[c] = alpha * x[c];
    else
      for (int c = 0; c < cols; ++c) y[c] = alpha * x[c] + beta * y[c];
  }
}

template <class S>
void add_bias_rows(int r0, int r1, int cols, const S* b, S* Y, int ldy) {
  for (int r = r0; r < r1; ++r) {
    S* y = Y + std::size_t(r) * ldy;
    for (int c = 0; c < cols; ++c) y[c] += b[c];
  }
}

// db[c0:c1] += Σ_r dY[r, c0:c1] (row stride ld), rows summed in order (in double).
template <class S>
void bias_backward_cols(int rows, int ld, int c0, int c1, const S* dY, S* db) {
  double acc[64];
  for (int c = c0; c < c1; c += 64) {
    const int w = c1 - c < 64 ? c1 - c : 64;
    for (int j = 0; j < w; ++j) acc[j] = 0;
    for (int r = 0; r < rows; ++r) {
      const S* row = dY + std::size_t(r) * ld + c;
      for (int j = 0; j < w; ++j) acc[j] += double(row[j]);
    }
    for (int j = 0; j < w; ++j) db[c + j] += S(acc[j]);
  }
}

template <class S>
void gelu_forward_range(std::size_t i0, std::size_t i1, GeluForm form, const S* X, S* Y) {
  if (form == GeluForm::tanh)
    for (std::size_t i = i0; i < i1; ++i) Y[i] = gelu_tanh(X[i]);
  else
    for (std::size_t i = i0; i < i1; ++i) Y[i] = gelu_erf(X[i]);
}

template <class S>
void gelu_backward_range(std::size_t i0, std::size_t i1, GeluForm form, const S* X, const S* dY, S* dX) {
  if (form == GeluForm::tanh)
    for (std::size_t i = i0; i < i1; ++i) dX[i] += dY[i] * gelu_tanh_grad(X[i]);
  else
    for (std::size_t i = i0; i < i1; ++i) dX[i] += dY[i] * gelu_erf_grad(X[i]);
}

template <class S>
void relu_forward_range(std::size_t i0, std::size_t i1, const S* X, S* Y) {
  for (std::size_t i = i0; i < i1; ++i) Y[i] = X[i] > S(0) ? X[i] : S(0);
}

template <class S>
void relu_backward_range(std::size_t i0, std::size_t i1, const S* X, const S* dY, S* dX) {
  for (std::size_t i = i0; i < i1; ++i)
    if (X[i] > S(0)) dX[i] += dY[i];
}

template <class S>
void swiglu_forward_range(std::size_t i0, std::size_t i1, const S* G, const S* U, S* Y) {
  for (std::size_t i = i0; i < i1; ++i) Y[i] = silu(G[i]) * U[i];
}

template <class S>
void swiglu_backward_range(std::size_t i0, std::size_t i1, const S* G, const S* U, const S* dY, S* dG, S* dU) {
  for (std::size_t i = i0; i < i1; ++i) {
    dG[i] += dY[i] * U[i] * silu_grad(G[i]);
    dU[i] += dY[i] * silu(G[i]);
  }
}

}  // namespace qkvlab::engine::kernels
