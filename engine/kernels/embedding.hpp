// Token and position embedding (GPT-2: wte and wpe; Llama: wte only).
//   forward   out[b·S + t, :] = wte[ids[b·S + t], :] + wpe[t, :]
//   backward  dwte[id, :] += Σ_{n: ids[n] = id} dout[n, :],  dwpe[t, :] += Σ_b dout[b·S + t, :]
// The backward is a scatter: the backend splits it over column blocks, and
// within a block adds the rows in order, so the sums do not depend on threads.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qkvlab::engine::kernels {

template <class S>
void embedding_forward_rows(int n0, int n1, int T_, int C, const std::int32_t* ids, const S* wte, const S* wpe,
                            S* out) {
  for (int n = n0; n < n1; ++n) {
    const S* e = wte + std::size_t(ids[n]) * C;
    S* o = out + std::size_t(n) * C;
    if (wpe) {
      const S* p = wpe + std::size_t(n % T_) * C;
      for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
    } else {
      for (int c = 0; c < C; ++c) o[c] = e[c];
    }
  }
}

template <class S>
void embedding_backward_cols(int N, int T_, int C, int c0, int c1, const std::int32_t* ids, const S* dout, S* dwte,
                             S* dwpe) {
  for (int n = 0; n < N; ++n) {
    const S* d = dout + std::size_t(n) * C;
    S* e = dwte + std::size_t(ids[n]) * C;
    for (int c = c0; c < c1; ++c) e[c] += d[c];
    if (dwpe) {
      S* p = dwpe + std::size_t(n % T_) * C;
      for (int c = c0; c < c1; ++c) p[c] += d[c];
    }
  }
}

}  // namespace qkvlab::engine::kernels
