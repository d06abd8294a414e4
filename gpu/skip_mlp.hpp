// Training the skip MLP of qwe.exp8.4 on a CUDA device: f(X) = X + GELU(X W1) W2
// fitted to f*(X) = X R + GELU(X U) V. Row-vector convention: X is batch×d,
// W1 and U are d×r, W2 and V are r×d, R is d×d. float throughout.
//
// The CPU path (synthetic/transfer.hpp) trains the same model with the same
// data, the same loss and the same AdamW; this class is its GPU counterpart:
// cuBLAS products and CUDA kernels, weights and optimizer state resident on
// the device. Without a CUDA device (or without nvcc) the constructor throws
// std::runtime_error with gpu::device_status().description.
#pragma once

#include "core/types.hpp"

#include <memory>

namespace qkvlab::gpu {

using MatF = Mat<float>;

struct SkipMlpOptions {
  int batch = 4096;
  // AdamW as engine/optim.hpp defines it (bias-corrected moments, decoupled decay).
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  float clip_norm = 3.0f;  // clipping by global gradient norm; <= 0 disables
};

// Sums over a batch, from which the caller forms relative errors and means.
struct SkipMlpSums {
  double squared_error = 0;   // Σ ‖f(x) − f*(x)‖²
  double squared_target = 0;  // Σ ‖f*(x)‖²
  double cosine = 0;          // Σ cos(f(x), f*(x))
};

class SkipMlpTrainer {
 public:
  SkipMlpTrainer(const MatF& W1, const MatF& W2, const MatF& R, const MatF& U, const MatF& V,
                 const SkipMlpOptions& options);
  ~SkipMlpTrainer();
  SkipMlpTrainer(const SkipMlpTrainer&) = delete;
  SkipMlpTrainer& operator=(const SkipMlpTrainer&) = delete;

  // One step on X (options.batch × d, host memory): forward, the loss
  // Σ‖f − f*‖² / Σ‖f*‖² over the batch (returned, measured before the update),
  // backward, clipping, AdamW at learning rate lr.
  float step(const MatF& X, float lr);

  // Evaluation without training, on any number of rows.
  SkipMlpSums evaluate(const MatF& X) const;

  void weights(MatF& W1, MatF& W2) const;  // copies the current weights to the host

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qkvlab::gpu
