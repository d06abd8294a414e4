// Writing JSON text: one string literal and one number formatter, used by
// every JSON writer (results/, engine/ safetensors headers, the cli/ reports);
// and the UTF-8 rule of every text output (JSON, JUnit XML, HDF5 strings, messages).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace qkvlab {

// The length of the well-formed UTF-8 sequence that starts s[i] (1 to 4; no overlong forms,
// surrogates or code points above U+10FFFF), 0 when s[i] starts none.
std::size_t utf8_sequence_length(std::string_view s, std::size_t i);

// s with each byte that starts no well-formed UTF-8 sequence written as the four characters
// \xNN (a file name's stray byte, say), so the text is valid UTF-8 and the byte still named.
std::string escape_invalid_utf8(std::string_view s);

// s as a JSON string literal: quotes, backslashes and control characters
// escaped (so it is also safe to put in a one-line message), and bytes that are
// not UTF-8 written as \xNN (escape_invalid_utf8): always valid JSON.
std::string json_quote(std::string_view s);

// x with 17 significant digits (round-trips a double), independent of the
// locale; null when x is NaN or infinite, so no non-number passes as one.
std::string json_number(double x);

}  // namespace qkvlab
