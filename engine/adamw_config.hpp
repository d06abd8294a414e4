// AdamW's hyperparameters (engine/optimizer.hpp; the update is engine/kernels/adamw.hpp's).
#pragma once

namespace qkvlab::engine {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // applied only to parameters that take decay
};

}  // namespace qkvlab::engine
