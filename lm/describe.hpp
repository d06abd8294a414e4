// A model's configuration and size as a result value (results/value.hpp),
// shared by every command that reports a model: the configuration's fields,
// the variant's options and the parameter counts.
#pragma once

#include "engine/parameters.hpp"
#include "lm/config.hpp"
#include "results/value.hpp"

namespace qkvlab::lm {

// {"family", "variant", ..., "parameters": total count} — every field of to_metadata, typed.
results::Value config_value(const Config& config);

}  // namespace qkvlab::lm
