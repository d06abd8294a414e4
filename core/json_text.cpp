#include "core/json_text.hpp"

#include <charconv>
#include <cmath>

namespace qkvlab {

namespace {
const char hex[] = "0123456789abcdef";
}

std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  const unsigned c = byte(0);
  if (c < 0x80) return 1;
  // The lead byte fixes the length and the range of the second byte; later bytes are 0x80-0xBF.
  std::size_t n = 0;
  unsigned low = 0x80, high = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, low = c == 0xE0 ? 0xA0 : 0x80, high = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, low = c == 0xF0 ? 0x90 : 0x80, high = c == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (i + n > s.size() || byte(1) < low || byte(1) > high) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (byte(k) < 0x80 || byte(k) > 0xBF) return 0;
  return n;
}

std::string escape_invalid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence_length(s, i);
    if (n > 0) {
      out.append(s.substr(i, n)), i += n;
      continue;
    }
    const auto u = static_cast<unsigned char>(s[i++]);
    out += {'\\', 'x', hex[u >> 4], hex[u & 15]};
  }
  return out;
}

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : escape_invalid_utf8(s)) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\')
      out += {'\\', c};
    else if (u < 0x20)
      out += {'\\', 'u', '0', '0', hex[u >> 4], hex[u & 15]};
    else
      out += c;
  }
  return out + "\"";
}

std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[32];
  const auto result = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::general, 17);
  return std::string(buf, result.ptr);
}

}  // namespace qkvlab
