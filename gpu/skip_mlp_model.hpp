// The device-side model behind SkipMlpTrainer (gpu/skip_mlp.hpp), exposed so
// bench/gpu_bench.cpp can time each phase of a step. Row-vector convention,
// float, column-major device buffers (gpu/device_buffer.hpp):
//   f(X)  = X + GELU(X W1) W2            Z = X W1 (n×r), H = GELU(Z), F = X + H W2
//   f*(X) = X R + GELU(X U) V            Z* = X U (n×r*), H* = GELU(Z*), F* = X R + H* V
//   loss  = Σ‖f − f*‖² / Σ‖f*‖² over the batch (the target is data: no gradient flows into it)
// Backward, with S* = Σ‖f*‖²:
//   dF = 2 (F − F*) / S*,  dW2 = Hᵀ dF,  dH = dF W2ᵀ,  dZ = dH ⊙ GELU'(Z),  dW1 = Xᵀ dZ,
// then clipping by the global norm of (dW1, dW2) and AdamW on W1 and W2 (both decayed).
#pragma once

#include "gpu/device_buffer.hpp"
#include "gpu/skip_mlp.hpp"
#include "gpu/timer.hpp"

#include <cstdint>

namespace qkvlab::gpu {

class SkipMlpModel {
 public:
  SkipMlpModel(const MatF& W1, const MatF& W2, const MatF& R, const MatF& U, const MatF& V,
               const SkipMlpOptions& options);

  // SkipMlpTrainer::step; with a timer, marks "upload", "target", "forward",
  // "loss", "backward", "clip" and "adamw" as each phase is queued.
  float step(const MatF& X, float lr, PhaseTimer* timer = nullptr);
  SkipMlpSums evaluate(const MatF& X);
  void weights(MatF& W1, MatF& W2) const;

 private:
  void upload_rows(const MatF& X, Eigen::Index begin, int rows);
  void target(int rows);   // F* of the first `rows` rows of X
  void forward(int rows);  // F of the first `rows` rows of X

  SkipMlpOptions options_;
  int d_, r_, r_star_;
  std::int64_t t_ = 0;  // AdamW steps taken
  DeviceBuffer<float> W1_, W2_, R_, U_, V_;        // weights and the fixed target
  DeviceBuffer<float> dW1_, dW2_, mW1_, vW1_, mW2_, vW2_;
  DeviceBuffer<float> X_, Z_, H_, F_, Zs_, Hs_, Fs_, dF_, dH_, dZ_;  // activations, batch rows each
};

}  // namespace qkvlab::gpu
