#include "core/json_text.hpp"

#include <charconv>
#include <cmath>

namespace qkvlab {

std::string json_quote(std::string_view s) {
  static const char hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
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
