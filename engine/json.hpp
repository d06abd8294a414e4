// A small JSON parser, enough for a safetensors header: objects (member
// order kept, duplicate keys rejected), arrays, strings (all escapes, \u
// surrogate pairs decoded to UTF-8), numbers and true/false/null (kept as
// their text). Nesting deeper than 64 levels is rejected, so hostile input
// cannot exhaust the stack. Errors throw std::runtime_error("JSON: <what> at
// offset <k>").
#pragma once

#include "core/json_text.hpp"  // json_quote, the writer's half

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qkvlab::engine {

struct Json {
  enum class Kind { literal, number, string, array, object };

  Kind kind = Kind::literal;
  std::string text;               // a string's value; a number's or literal's (true, false, null) text
  std::vector<Json> items;        // an array's elements, or an object's values in order
  std::vector<std::string> keys;  // an object's keys: keys[i] names items[i]
};

// Parses one JSON value; only whitespace may follow it.
Json parse_json(std::string_view text);

// A number that is a plain non-negative integer (digits only) fitting in
// 64 bits; throws std::runtime_error naming `what` otherwise.
std::uint64_t json_to_u64(const Json& value, const std::string& what);

}  // namespace qkvlab::engine
