// AdamW with decoupled weight decay (Loshchilov & Hutter), step t ≥ 1:
//   m ← β1 m + (1 − β1) g,   v ← β2 v + (1 − β2) g²,
//   θ ← θ − η λ θ (where decayed),   θ ← θ − η (m / (1 − β1^t)) / (sqrt(v / (1 − β2^t)) + ε),
// entry by entry (m̂ = m / (1 − β1^t) and v̂ = v / (1 − β2^t): Adam's bias corrections). The one AdamW
// of the toolkit: engine/optimizer.hpp steps it over a ParameterSet, and gpu/kernels/elementwise.cuh
// repeats these formulas for CUDA.
#pragma once

#include <cmath>
#include <cstddef>

namespace qkvlab::engine::kernels {

template <class S>
void adamw_range(std::size_t i0, std::size_t i1, S lr, S beta1, S beta2, S eps, S decay, S m_scale, S v_scale,
                 S* theta, const S* grad, S* m, S* v) {
  for (std::size_t i = i0; i < i1; ++i) {
    const S g = grad[i];
    m[i] = beta1 * m[i] + (S(1) - beta1) * g;
    v[i] = beta2 * v[i] + (S(1) - beta2) * g * g;
    theta[i] -= decay * theta[i];
    theta[i] -= lr * (m_scale * m[i]) / (std::sqrt(v_scale * v[i]) + eps);
  }
}

}  // namespace qkvlab::engine::kernels
