// Softmax cross-entropy from logits, one row (position) at a time:
//   loss[n] = logsumexp(z_n) − z_n[y_n],   dz_n = scale (softmax(z_n) − onehot(y_n)),
// with rows whose target is negative skipped (loss 0, gradient 0). The
// maximum is subtracted before exponentiating, and the loss is (m − z_y) + log Σ e^{z−m}, so logits far
// from 0 (m ≫ the loss) lose nothing to m's rounding; sums are in double, in an order fixed by the
// build (vectorized: `omp simd` reductions).
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/kernels/math.hpp"

namespace qkvlab::engine::kernels {

template <class S>
void cross_entropy_rows(int n0, int n1, int V, const S* logits, const std::int32_t* targets, S* loss, S scale,
                        S* dlogits) {
  for (int n = n0; n < n1; ++n) {
    const S* z = logits + std::size_t(n) * V;
    S* dz = dlogits ? dlogits + std::size_t(n) * V : nullptr;
    const std::int32_t y = targets[n];
    if (y < 0) {
      loss[n] = S(0);
      if (dz)
        for (int v = 0; v < V; ++v) dz[v] = S(0);
      continue;
    }
    const S zy = z[y];  // read first: dlogits may be logits itself
    S m = z[0];
#pragma omp simd reduction(max : m)
    for (int v = 1; v < V; ++v) m = z[v] > m ? z[v] : m;
    double sum = 0;
    if (dz) {
#pragma omp simd reduction(+ : sum)
      for (int v = 0; v < V; ++v) {
        const S e = exp_of(z[v] - m);
        dz[v] = e;
        sum += double(e);
      }
    } else {
#pragma omp simd reduction(+ : sum)
      for (int v = 0; v < V; ++v) sum += double(exp_of(z[v] - m));
    }
    loss[n] = S((double(m) - double(zy)) + std::log(sum));  // m − z_y first: exact at logits far from 0
    if (dz) {
      const S inv = S(double(scale) / sum);
      for (int v = 0; v < V; ++v) dz[v] *= inv;
      dz[y] -= scale;
    }
  }
}

}  // namespace qkvlab::engine::kernels
