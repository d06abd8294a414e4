// The errors qkvlab reports. A UsageError is the user's to fix (exit 2); a
// NumericalError means a computation could not be trusted (singular basis,
// non-finite value) and is reported as such, never as a number.
#pragma once

#include <stdexcept>
#include <string>

namespace qkvlab {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct NumericalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace qkvlab
