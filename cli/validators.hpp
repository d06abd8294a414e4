// CLI11 validators shared by the subcommands, with plain one-line messages
// (CLI11's PositiveNumber prints its range as 0 to 1.8e308 in full).
#pragma once

#include <CLI/CLI.hpp>

#include <charconv>
#include <climits>
#include <string>

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

}  // namespace qkvlab::cli
