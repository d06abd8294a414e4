// The hint a usage error gets at the command line: which command or option helps.
#pragma once

#include "core/errors.hpp"

#include <string>

namespace qkvlab::cli {

// Runs check(); a UsageError it throws leaves with `hint` appended. Libraries describe the
// value ("unknown figure \"x\" (known: ...)"); the command line adds which command or option helps.
template <class F> decltype(auto) with_hint(F&& check, const std::string& hint) {
  try {
    return check();
  } catch (const UsageError& e) {
    throw UsageError(std::string(e.what()) + " (" + hint + ")");
  }
}

}  // namespace qkvlab::cli
