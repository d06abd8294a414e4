// The engine draws from core's generator (core/rng.hpp): xoshiro256** seeded
// through splitmix64, numbered or named streams, Box–Muller normals drawn in
// double. Work split across threads gives each tensor or batch its own stream,
// so every draw is the same however the work is scheduled.
#pragma once

#include "core/rng.hpp"
#include "core/types.hpp"

namespace qkvlab::engine {

using qkvlab::Mat;

using qkvlab::Rng;

// A rows×cols matrix of N(0, stddev²) entries drawn in double, then rounded to
// S, so float and double draws agree to float precision.
template <class S> Mat<S> normal_matrix(Eigen::Index rows, Eigen::Index cols, double stddev, Rng& rng) {
  return rng.gaussian(rows, cols, stddev).template cast<S>();
}

}  // namespace qkvlab::engine
