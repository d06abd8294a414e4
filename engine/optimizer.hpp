// The training step shared by every model on a backend: gradients clipped by
// their global norm, then AdamW (decoupled weight decay, applied to the
// tensors whose ParameterSpec says so), at a learning rate from a schedule
// (engine/schedule.hpp: linear warmup, cosine decay to a floor).
//
//   ‖g‖ = sqrt(Σ g²) over every parameter (summed in double, in a fixed order);
//   when ‖g‖ > clip > 0 every gradient is scaled by clip/‖g‖.
//
// TrainStep::run() takes the micro-batches of one step: it zeroes the
// gradients, calls micro(i) for i < accum (each runs a forward and backward
// pass that adds its gradient, already divided by the step's number of
// predicted positions), clips, and updates. The moments m, v and the step
// count are the optimizer's whole state (checkpointed with the parameters).
#pragma once

#include <cstdint>
#include <functional>

#include "engine/adamw_config.hpp"
#include "engine/parameters.hpp"

namespace qkvlab::engine {

template <class S>
class AdamWState {
 public:
  AdamWState(Backend<S>& backend, std::size_t count) : m(backend, count), v(backend, count) {}
  // One AdamW update of every tensor of `set` at learning rate lr (t advances by one).
  void step(Backend<S>& backend, ParameterSet<S>& set, const AdamWConfig& config, double lr);

  Buffer<S> m, v;
  std::int64_t t = 0;  // updates taken
};

// ‖g‖ before clipping; scales the gradients when it is finite and above max_norm > 0.
template <class S>
double clip_gradients(Backend<S>& backend, ParameterSet<S>& set, double max_norm);

}  // namespace qkvlab::engine
