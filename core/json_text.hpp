// Writing JSON text: one string literal and one number formatter, used by
// every JSON writer (results/, engine/ safetensors headers, the cli/ reports).
#pragma once

#include <string>
#include <string_view>

namespace qkvlab {

// s as a JSON string literal: quotes, backslashes and control characters
// escaped (so it is also safe to put in a one-line message).
std::string json_quote(std::string_view s);

// x with 17 significant digits (round-trips a double), independent of the
// locale; null when x is NaN or infinite, so no non-number passes as one.
std::string json_number(double x);

}  // namespace qkvlab
