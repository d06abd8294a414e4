// LayerNorm and RMSNorm over the C features of each row, with a gain g and
// an optional bias (engine/backend.hpp states the contract):
//   n = (x − μ) r (LayerNorm) or x r (RMSNorm),  r = 1/sqrt(σ² + ε) resp. 1/sqrt(‖x‖²/C + ε),
//   out = g ⊙ n + bias.
// Backward, per row, dn = dout ⊙ g:
//   dx += r (dn − [mean(dn)] − n mean(dn ⊙ n)),  dg += Σ_rows dout ⊙ n,  dbias += Σ_rows dout.
// Row statistics are summed in double.
#pragma once

#include <cmath>
#include <cstddef>

#include "engine/kernel_types.hpp"

namespace qkvlab::engine::kernels {

template <class S>
void norm_forward_rows(int r0, int r1, int C, Centering centering, S eps, const S* X, const S* gain, const S* bias,
                       S* out, S* mean, S* rstd) {
  for (int r = r0; r < r1; ++r) {
    const S* x = X + std::size_t(r) * C;
    double mu = 0;
    if (centering == Centering::mean) {
#pragma omp simd reduction(+ : mu)
      for (int c = 0; c < C; ++c) mu += double(x[c]);
      mu /= C;
    }
    double var = 0;
#pragma omp simd reduction(+ : var)
    for (int c = 0; c < C; ++c) {
      const double e = double(x[c]) - mu;
      var += e * e;
    }
    const S s = S(1 / std::sqrt(var / C + double(eps)));
    const S m = S(mu);
    S* o = out + std::size_t(r) * C;
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * gain[c] + (bias ? bias[c] : S(0));
    mean[r] = m;
    rstd[r] = s;
  }
}

template <class S>
void norm_backward_rows(int r0, int r1, int C, Centering centering, const S* X, const S* gain, const S* mean,
                        const S* rstd, const S* dout, S* dX) {
  for (int r = r0; r < r1; ++r) {
    const S* x = X + std::size_t(r) * C;
    const S* dy = dout + std::size_t(r) * C;
    const S m = mean[r], s = rstd[r];
    double dn_mean = 0, dn_n_mean = 0;
#pragma omp simd reduction(+ : dn_mean, dn_n_mean)
    for (int c = 0; c < C; ++c) {
      const double dn = double(dy[c]) * double(gain[c]);
      dn_mean += dn;
      dn_n_mean += dn * double((x[c] - m) * s);
    }
    dn_mean /= C;
    dn_n_mean /= C;
    const S a = centering == Centering::mean ? S(dn_mean) : S(0), b = S(dn_n_mean);
    S* dx = dX + std::size_t(r) * C;
    for (int c = 0; c < C; ++c) dx[c] += s * (dy[c] * gain[c] - a - (x[c] - m) * s * b);
  }
}

// dgain[c0:c1] += Σ_r dout ⊙ n and dbias[c0:c1] += Σ_r dout, rows in order, in double.
template <class S>
void norm_backward_cols(int N, int C, int c0, int c1, const S* X, const S* mean, const S* rstd, const S* dout,
                        S* dgain, S* dbias) {
  double g[64], b[64];
  for (int c = c0; c < c1; c += 64) {
    const int w = c1 - c < 64 ? c1 - c : 64;
    for (int j = 0; j < w; ++j) g[j] = b[j] = 0;
    for (int r = 0; r < N; ++r) {
      const S* x = X + std::size_t(r) * C + c;
      const S* dy = dout + std::size_t(r) * C + c;
      const S m = mean[r], s = rstd[r];
      for (int j = 0; j < w; ++j) {
        g[j] += double(dy[j] * ((x[j] - m) * s));
        b[j] += double(dy[j]);
      }
    }
    for (int j = 0; j < w; ++j) {
      dgain[c + j] += S(g[j]);
      if (dbias) dbias[c + j] += S(b[j]);
    }
  }
}

}  // namespace qkvlab::engine::kernels
