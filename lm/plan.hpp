// A language model's variant as data: core/qkv_plan.hpp's plan of its layers
// (which key and value heads of which layers each attention uses, and with what
// weights), with Q-identity on the layers the configuration names. The model
// (lm/model.hpp) reads only this description; it has no per-variant code.
#pragma once

#include <vector>

#include "core/qkv_plan.hpp"
#include "lm/config.hpp"

namespace qkvlab::lm {

using qkv::is_own;
using qkv::LayerPlan;
using qkv::Mix;
using qkv::selects;
using qkv::Source;

// validate(config) first, then the plan of config.variant, with identity_query
// on config.identity_query's layers (the q-identity variant's and q_identity_layers).
inline std::vector<LayerPlan> make_plan(const Config& config) {
  validate(config);
  std::vector<LayerPlan> plan = qkv::make_plan(config.variant, config.layers, config.heads, config.kv_heads);
  for (int n = 0; n < config.layers; ++n) plan[std::size_t(n)].identity_query = config.identity_query(n);
  return plan;
}

}  // namespace qkvlab::lm
