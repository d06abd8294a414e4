// CLI11 validators shared by the subcommands, with plain one-line messages
// (CLI11's PositiveNumber prints its range as 0 to 1.8e308 in full, and its range
// checks let NaN through), and add_list_option, the one way a subcommand takes a
// comma-separated list (--d, --d-list, --layers, --models, ...).
// Every real-valued option takes one of the real validators: NaN and ±Inf are
// refused where the option enters. Seeds take `seed_value` (0 to 2^64 − 1; a
// sign or an overflow is refused, not wrapped), thread counts `thread_count`.
#pragma once

#include "core/errors.hpp"
#include "core/parallel.hpp"

#include <CLI/CLI.hpp>

#include <charconv>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace qkvlab::cli {

// The message for `value`, which must be an integer in [lo, hi] (`range` in words); empty when it is one.
// A whole number above hi, however many digits (past 2^63 too), is called too large, with the bound.
inline std::string integer_message(const std::string& value, long long lo, long long hi, const std::string& range) {
  long long n = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  const bool whole = !value.empty() && end == value.data() + value.size();
  if (whole && ec == std::errc() && n >= lo && n <= hi) return "";
  const bool above = whole && value[0] != '-' && (ec == std::errc::result_out_of_range || (ec == std::errc() && n > hi));
  if (above) return "must be " + range + ", got '" + value + "' (too large: at most " + std::to_string(hi) + ")";
  return "must be " + range + ", got '" + value + "'";
}

// An integer in [lo, hi]; the message names the range and the offending value.
inline CLI::Validator integer_in(int lo, int hi) {
  const std::string range = hi != INT_MAX ? "an integer from " + std::to_string(lo) + " to " + std::to_string(hi)
                           : lo == 1      ? "a positive integer"
                                          : "an integer of at least " + std::to_string(lo);
  return CLI::Validator([lo, hi, range](std::string& value) { return integer_message(value, lo, hi, range); },
                        hi != INT_MAX ? std::to_string(lo) + ".." + std::to_string(hi)
                        : lo == 1     ? "POSITIVE"
                                      : ">=" + std::to_string(lo));
}

inline const CLI::Validator positive_integer = integer_in(1, INT_MAX);

// A 64-bit integer in [lo, hi] (for options stored as long or int64).
inline CLI::Validator integer64_in(long long lo, long long hi) {
  const std::string range = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator([lo, hi, range](std::string& value) { return integer_message(value, lo, hi, range); },
                        std::to_string(lo) + ".." + std::to_string(hi));
}

// A seed: a decimal integer from 0 to 2^64 − 1, nothing else (no sign, no wrap-around).
inline const CLI::Validator seed_value(
    [](std::string& value) -> std::string {
      std::uint64_t n = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (value.empty() || ec != std::errc() || end != value.data() + value.size())
        return "must be an integer from 0 to 18446744073709551615, got '" + value + "'";
      return "";
    },
    "0..2^64-1");

// A path option's value: not empty (an empty path names no file, and "" must not read as "not given").
inline const CLI::Validator path_value(
    [](std::string& value) -> std::string { return value.empty() ? "must be a path, got ''" : ""; }, "PATH");

// --threads: 0 (one per hardware thread) up to qkvlab::max_threads.
inline const CLI::Validator thread_count = integer_in(0, max_threads);
inline const CLI::Validator positive_thread_count = integer_in(1, max_threads);

// A finite real number satisfying `ok`, described by `must` ("a positive number", ...).
template <class Ok>
CLI::Validator real_where(std::string must, Ok ok, std::string name) {
  return CLI::Validator(
      [must, ok](std::string& value) -> std::string {
        double x = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), x);
        const bool whole = !value.empty() && end == value.data() + value.size();
        if (whole && ec == std::errc::result_out_of_range)  // 1e-400 and 1e400: no double holds them
          return "must be " + must + ", got '" + value + "', beyond a double's range (nonzero magnitudes 4.9e-324 to 1.8e308)";
        if (!whole || ec != std::errc() || !std::isfinite(x) || !ok(x)) return "must be " + must + ", got '" + value + "'";
        return "";
      },
      std::move(name));
}

inline const CLI::Validator finite_real = real_where("a finite number", [](double) { return true; }, "REAL");
inline const CLI::Validator positive_real = real_where("a positive number", [](double x) { return x > 0; }, "POSITIVE");
inline const CLI::Validator non_negative_real =
    real_where("a non-negative number", [](double x) { return x >= 0; }, "NON-NEGATIVE");
// A real in [lo, hi] (bounds printed with %g, in the help as lo..hi).
inline CLI::Validator real_in(double lo, double hi) {
  char range[96], name[64];
  std::snprintf(range, sizeof range, "a number from %g to %g", lo, hi);
  std::snprintf(name, sizeof name, "%g..%g", lo, hi);
  return real_where(range, [lo, hi](double x) { return x >= lo && x <= hi; }, name);
}

// A list option's values, none given twice (a repeated value would repeat its runs and their reports' names):
// the message naming the first repeated one, empty when there is none.
template <class T>
std::string repeated_value_message(const std::string& option, const std::vector<T>& values) {
  for (std::size_t i = 0; i < values.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (values[j] == values[i]) {
        std::ostringstream got;
        got << values[i];
        return option + ": " + got.str() + " is given twice";
      }
  return "";
}

template <class T>
void require_distinct(const std::string& option, const std::vector<T>& values) {
  if (const std::string message = repeated_value_message(option, values); !message.empty()) throw UsageError(message);
}

// A list option, comma-separated values (--d 16,32,64; space-separated ones too unless the command turns
// allow_extra_args off), given once or more (its values add up), each
// checked by `each` where given and read as a T. CLI11's own splitting drops empty elements, so the
// text is read here: an empty list (""), an empty element ("2,,4", "4,", ",4") and a value given twice
// (repeated_value_message) are refused naming the option. The help shows TYPE:EACH,... and `values`
// (the default) where it holds any.
template <class T>
CLI::Option* add_list_option(CLI::App* cmd, const std::string& name, std::vector<T>& values, const std::string& description,
                             const CLI::Validator& each = {}) {
  const auto elements = [](const std::string& text) {
    std::vector<std::string> parts;
    for (std::size_t start = 0;;) {
      const std::size_t comma = text.find(',', start);
      parts.push_back(text.substr(start, comma - start));
      if (comma == std::string::npos) return parts;
      start = comma + 1;
    }
  };
  const CLI::Validator text_check(
      [elements, each](std::string& text) -> std::string {
        if (text.empty()) return "the list is empty: give at least one value";
        for (std::string& e : elements(text)) {
          if (e.empty()) return "the list '" + text + "' has an empty element";
          T value{};
          if (const std::string message = each(e); !message.empty()) return message;
          if (!CLI::detail::lexical_cast(e, value)) return "'" + e + "' is not a " + CLI::detail::type_name<T>();
        }
        return "";
      },
      each.get_description().empty() ? "" : each.get_description() + ",...");
  auto* option = cmd->add_option(
      name,
      [&values, name, elements](const CLI::results_t& texts) {
        values.clear();
        for (const std::string& text : texts)
          for (const std::string& e : elements(text)) CLI::detail::lexical_cast(e, values.emplace_back());
        // A parse error, as the elements' (parsing happens before the command's own try).
        if (const std::string message = repeated_value_message(name, values); !message.empty())
          throw CLI::ValidationError(message);
        return true;
      },
      description);
  std::ostringstream shown;
  for (std::size_t i = 0; i < values.size(); ++i) shown << (i ? "," : "") << values[i];
  option->type_name(std::string(CLI::detail::type_name<T>()) + (each.get_description().empty() ? ",..." : ""))
      ->expected(1, CLI::detail::expected_max_vector_size)  // as CLI11's vector options: "--layers 1 2" too
      ->allow_extra_args(true)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(text_check)
      ->default_str(shown.str());
  return option;
}

}  // namespace qkvlab::cli
