// The digits contract of every JSON document qkvlab writes: a number carries 17
// significant digits (it is exactly what core/json_text.hpp's json_number writes
// for the double it denotes, so it round-trips), and nothing that is not a JSON
// number (nan, inf) stands in for one: non-finite values are null.
#pragma once

#include "core/json_text.hpp"

#include <cctype>
#include <cstdlib>
#include <string>
#include <vector>

namespace qkvlab::test_support {

// The number tokens of `json` (outside strings) that a 17-digit writer would not
// have written for the value they denote, and any bare nan/inf words. A token
// from a shorter writer passes only when its value prints the same at 17 digits
// (0.5, 0.123457); most do not (0.1 is 0.10000000000000001), so a document of
// measured values from a 6-digit writer fails.
inline std::vector<std::string> short_json_numbers(const std::string& json) {
  std::vector<std::string> bad;
  bool in_string = false;
  for (std::size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (std::isdigit(static_cast<unsigned char>(c)) ||
               (c == '-' && i + 1 < json.size() && std::isdigit(static_cast<unsigned char>(json[i + 1])))) {
      std::size_t j = i + 1;
      while (j < json.size() && (std::isdigit(static_cast<unsigned char>(json[j])) || std::string("+-.eE").find(json[j]) != std::string::npos)) ++j;
      const std::string token = json.substr(i, j - i);
      if (json_number(std::strtod(token.c_str(), nullptr)) != token) bad.push_back(token);
      i = j - 1;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '-') {
      std::size_t j = i + 1;
      while (j < json.size() && std::isalpha(static_cast<unsigned char>(json[j]))) ++j;
      const std::string word = json.substr(i, j - i);
      if (word != "true" && word != "false" && word != "null") bad.push_back(word);
      i = j - 1;
    }
  }
  return bad;
}

}  // namespace qkvlab::test_support
