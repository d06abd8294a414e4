// The language model's head, shared by the model (lm/model.hpp) and the layerwise probes
// (probes/probe.hpp): a norm N (the family's: LayerNorm for gpt2, RMSNorm for llama; none: the
// identity), then logits = N(x) Uᵀ and the cross-entropy against targets,
//   loss_n = −log softmax(logits_n)[t_n]  (t_n < 0: not predicted, loss 0),
// and their backward
//   dlogits = scale (softmax(logits) − onehot(t)),  dN(x) = dlogits U,  dU += dlogitsᵀ N(x),
//   dx += (∂N(x)/∂x)ᵀ dN(x),  dg, db += the norm's gradients.
// The logits are computed kHeadRows rows at a time, so they never take N·V values.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "engine/backend.hpp"
#include "engine/buffer.hpp"
#include "engine/weight.hpp"
#include "lm/config.hpp"

namespace qkvlab::lm {

constexpr int kHeadRows = 512;  // rows of logits computed at a time

// A norm's gain and bias and their gradients; no gain: the identity (--norm none).
template <class S>
struct NormWeights {
  const S* g = nullptr;
  const S* b = nullptr;
  S* dg = nullptr;
  S* db = nullptr;
};

inline engine::Centering centering(const Config& c) {
  return c.family == Family::gpt2 ? engine::Centering::mean : engine::Centering::none;
}

// out = N(x) over N rows of width d, keeping the row statistics for the backward.
template <class S>
void normalize(engine::Backend<S>& be, const Config& c, int N, const S* x, const NormWeights<S>& w, S* out, S* mean,
               S* rstd) {
  if (!w.g) return be.axpby(N, c.d, S(1), x, c.d, S(0), out, c.d);
  be.norm_forward(N, c.d, centering(c), S(c.norm_eps), x, w.g, w.b, out, mean, rstd);
}

// dx += (∂N(x)/∂x)ᵀ dn, and w's gradients.
template <class S>
void normalize_backward(engine::Backend<S>& be, const Config& c, int N, const S* x, const NormWeights<S>& w,
                        const S* mean, const S* rstd, const S* dn, S* dx) {
  if (!w.g) return be.axpby(N, c.d, S(1), dn, c.d, S(1), dx, c.d);
  be.norm_backward(N, c.d, centering(c), x, w.g, mean, rstd, dn, dx, w.dg, w.db);
}

// The head's workspace for up to `rows` rows of width d and V outputs: the logits of one block of
// rows, the per-row losses and (train) the gradient of the head's input.
template <class S>
class Head {
 public:
  Head() = default;
  Head(engine::Backend<S>& be, int rows, int d, int V, bool train)
      : be_(&be), d_(d), V_(V), logits_(be, std::size_t(std::min(rows, kHeadRows)) * V), losses_(be, std::size_t(rows)),
        dx_(train ? engine::Buffer<S>(be, std::size_t(rows) * d) : engine::Buffer<S>()) {}

  // Per-row losses of the N rows of x (N, d; normalized) against targets (device, N entries) into
  // losses(). With dU (training): dx() = ∂(scale·Σ loss)/∂x and dU += its gradient.
  void loss(int N, const S* x, const engine::Weight<S>& U, const std::int32_t* targets, S scale, S* dU) {
    const bool train = dU != nullptr;
    for (int r0 = 0; r0 < N; r0 += kHeadRows) {
      const int rows = std::min(kHeadRows, N - r0);
      const S* x_rows = x + std::size_t(r0) * d_;
      logits_of(rows, x_rows, d_, U);
      be_->cross_entropy(rows, V_, logits_.data(), targets + r0, losses_.data() + r0, scale,
                         train ? logits_.data() : nullptr);
      if (!train) continue;
      be_->gemm(engine::Trans::none, engine::Trans::none, rows, d_, V_, S(1), logits_.data(), V_, 0, U.f, d_, 0, S(0),
                dx_.data() + std::size_t(r0) * d_, d_, 0, 1);
      be_->gemm(engine::Trans::transpose, engine::Trans::none, V_, d_, rows, S(1), logits_.data(), V_, 0, x_rows, d_,
                0, S(1), dU, d_, 0, 1);
    }
  }

  // The logits (host, rows·V) of `rows` rows of x, row i at x + i·ldx.
  void logits(int rows, const S* x, int ldx, const engine::Weight<S>& U, S* host) {
    for (int r0 = 0; r0 < rows; r0 += kHeadRows) {
      const int n = std::min(kHeadRows, rows - r0);
      logits_of(n, x + std::size_t(r0) * ldx, ldx, U);
      logits_.download(host + std::size_t(r0) * V_, std::size_t(n) * V_);
    }
  }

  const engine::Buffer<S>& losses() const { return losses_; }
  S* dx() { return dx_.data(); }

 private:
  void logits_of(int rows, const S* x, int ldx, const engine::Weight<S>& U) {  // logits_ = x Uᵀ
    engine::weight_product(*be_, engine::Trans::transpose, rows, V_, d_, x, ldx, U, d_, S(0), logits_.data(), V_);
  }

  engine::Backend<S>* be_ = nullptr;
  int d_ = 0, V_ = 0;
  engine::Buffer<S> logits_, losses_, dx_;
};

}  // namespace qkvlab::lm
