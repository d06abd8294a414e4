// CLI11 validators shared by the subcommands, with plain one-line messages
// (CLI11's PositiveNumber prints its range as 0 to 1.8e308 in full), and the
// checks of list options (--d-list, --sigma-list, ...) made after parsing,
// which throw UsageError naming the option.
#pragma once

#include "core/errors.hpp"

#include <CLI/CLI.hpp>

#include <charconv>
#include <climits>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace qkvlab::cli {

// An integer in [lo, hi]; the message names the range and the offending value.
inline CLI::Validator integer_in(int lo, int hi) {
  const std::string range = hi == INT_MAX && lo == 1 ? "a positive integer"
                                                     : "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& value) -> std::string {
        int n = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
        if (ec != std::errc() || end != value.data() + value.size() || n < lo || n > hi)
          return "must be " + range + ", got '" + value + "'";
        return "";
      },
      lo == 1 && hi == INT_MAX ? "POSITIVE" : std::to_string(lo) + ".." + std::to_string(hi));
}

inline const CLI::Validator positive_integer = integer_in(1, INT_MAX);

// A list option's values: at least one, each satisfying `ok` (described by `must`).
template <class T, class Ok>
void require_each(const std::string& option, const std::vector<T>& values, Ok ok, const std::string& must) {
  if (values.empty()) throw UsageError(option + ": needs at least one value");
  for (const T& v : values)
    if (!ok(v)) {
      std::ostringstream got;
      got << v;
      throw UsageError(option + ": each value must be " + must + ", got " + got.str());
    }
}

inline void require_each_integer_in(const std::string& option, const std::vector<int>& values, int lo, int hi) {
  require_each(option, values, [lo, hi](int v) { return v >= lo && v <= hi; },
               "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

inline void require_each_non_negative(const std::string& option, const std::vector<double>& values) {
  require_each(option, values, [](double v) { return v >= 0 && std::isfinite(v); }, "a non-negative number");
}

inline void require_each_finite(const std::string& option, const std::vector<double>& values) {
  require_each(option, values, [](double v) { return std::isfinite(v); }, "a finite number");
}

}  // namespace qkvlab::cli
