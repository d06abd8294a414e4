// A weight matrix as a model's products read it: float values of the backend's type S, or 16-bit
// values (bf16 or f16, engine/weight_type.hpp) held as stored, 2 bytes per weight. A product with a
// 16-bit weight is the float product over its widened values, a panel at a time:
//   C = A op(W) + β C,  op(W) k×n:  for each panel of kPanel columns of op(W),
//                                   widen it (exactly) into `scratch`, then the backend's float gemm
// so the product is the float32 path's over the weights the 16 bits stand for: the same
// accumulation in float, on the CPU the same tiles of C (kPanel is a multiple of the CPU's 256
// columns), bit for bit. The scratch holds one panel, k·kPanel values: O(tile), not O(weight).
// Both backends run this one definition through Backend::widen and Backend::gemm.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "engine/backend.hpp"

namespace qkvlab::engine {

constexpr int kPanel = 1024;  // columns of op(W) widened at a time

template <class S>
struct Weight {
  const S* f = nullptr;              // float values, or
  const std::uint16_t* h = nullptr;  // 16-bit values of `type`, widened through `scratch`
  WeightType type = WeightType::f32;
  S* scratch = nullptr;              // room for inner · kPanel values (the largest inner dimension)
  Weight() = default;
  Weight(const S* values) : f(values) {}  // implicit: float weights are the common case
  Weight(const std::uint16_t* values, WeightType t, S* panel) : h(values), type(t), scratch(panel) {}
  bool empty() const { return !f && !h; }
};

// C = A op(W) + β C with A m×k (lda), op(W) k×n, W row-major with leading dimension ldw (W is k×n,
// or n×k when tw = transpose), C m×n (ldc).
template <class S>
void weight_product(Backend<S>& be, Trans tw, int m, int n, int k, const S* A, int lda, const Weight<S>& W, int ldw,
                    S beta, S* C, int ldc) {
  if (W.f) return be.gemm(Trans::none, tw, m, n, k, S(1), A, lda, 0, W.f, ldw, 0, beta, C, ldc, 0, 1);
  if (!W.h || !W.scratch) throw std::logic_error("weight_product: no weight or no scratch");
  for (int j0 = 0; j0 < n; j0 += kPanel) {
    const int nj = std::min(kPanel, n - j0);
    if (tw == Trans::none)  // columns j0 … of W (k×n): a k×nj panel
      be.widen(k, nj, W.h + j0, ldw, nullptr, W.type, W.scratch, nj);
    else  // rows j0 … of W (n×k): an nj×k panel
      be.widen(nj, k, W.h + std::size_t(j0) * ldw, ldw, nullptr, W.type, W.scratch, k);
    be.gemm(Trans::none, tw, m, nj, k, S(1), A, lda, 0, W.scratch, tw == Trans::none ? nj : k, 0, beta, C + j0, ldc, 0,
            1);
  }
}

// out[n, :] = E[ids[n], :] + (P ? P[n mod T, :] : 0) for n < B·T (Backend::embedding_forward's
// formula, with E float or 16-bit; the position table P is float).
template <class S>
void embedding_lookup(Backend<S>& be, int B, int T, int C, const std::int32_t* ids, const Weight<S>& E, const S* P,
                      S* out) {
  if (E.f) return be.embedding_forward(B, T, C, ids, E.f, P, out);
  be.widen(B * T, C, E.h, C, ids, E.type, out, C);
  if (P)
    for (int b = 0; b < B; ++b) be.axpby(T, C, S(1), P, C, S(1), out + std::size_t(b) * T * C, C);
}

}  // namespace qkvlab::engine
