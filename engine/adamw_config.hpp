// AdamW's hyperparameters (engine/optimizer.hpp; the update is engine/kernels/adamw.hpp's).
#pragma once

namespace qkvlab::engine {

// torch: PyTorch's AdamW (engine/kernels/adamw.hpp): θ ← θ − ηλθ, then θ ← θ − η m̂ / (sqrt(v̂) + ε).
// transformers: transformers.optimization.AdamW, the released probe's optimizer (SkipV1Former's
//   dense_skip): ε is added to sqrt(v) before the bias correction, and the decay comes after the
//   update: θ ← (1 − ηλ)(θ − η m̂ / (sqrt(v̂) + ε / sqrt(1 − β2^t))). engine/optimizer.cpp runs it
//   through the same kernel with η' = η(1 − ηλ), λ' = λ/(1 − ηλ) and that ε (needs ηλ < 1).
enum class AdamWForm { torch, transformers };

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // applied only to parameters that take decay
  AdamWForm form = AdamWForm::torch;
};

}  // namespace qkvlab::engine
