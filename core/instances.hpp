// Core's costliest templates at one scalar S: the attention, blocks, models, changes of basis and
// normalizers that every claim and experiment calls at each precision. Each core/instances_*.cpp
// instantiates them for one scalar of the ladder, and their headers declare the same instances
// extern (QKVLAB_FOR_EACH_SCALAR, core/types.hpp), so each is compiled once, in its own file, and
// the four files compile side by side (docs/benchmarks.md, "Build time").
#pragma once

#include "core/attention.hpp"
#include "core/block.hpp"
#include "core/linalg.hpp"
#include "core/model.hpp"
#include "core/normalize.hpp"
#include "core/reparametrize.hpp"

#define QKVLAB_CORE_INSTANCES(S)                                                                      \
  namespace qkvlab {                                                                                  \
  QKVLAB_LINALG_INSTANCES(, S) QKVLAB_NORMALIZE_INSTANCES(, S) QKVLAB_ATTENTION_INSTANCES(, S)       \
  QKVLAB_BLOCK_INSTANCES(, S) QKVLAB_MODEL_INSTANCES(, S) QKVLAB_REPARAMETRIZE_INSTANCES(, S)         \
  }
