#include "corpus/byte_unicode.hpp"

#include <array>

namespace qkvlab::corpus {

namespace {

bool stands_for_itself(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

constexpr std::size_t kCodes = 256 + 68;  // the characters used: below U+0144

struct Tables {
  std::array<char32_t, 256> code{};  // byte → character
  std::array<int, 256> rank{};       // byte → GPT-2's id
  std::array<int, kCodes> byte{};    // character → byte, -1 for none
  Tables() {
    byte.fill(-1);
    int printable = 0, other = 0;
    for (int b = 0; b < 256; ++b)
      if (stands_for_itself(b)) rank[std::size_t(b)] = printable++, code[std::size_t(b)] = char32_t(b);
    for (int b = 0; b < 256; ++b)
      if (!stands_for_itself(b)) rank[std::size_t(b)] = printable + other, code[std::size_t(b)] = char32_t(256 + other++);
    for (int b = 0; b < 256; ++b) byte[code[std::size_t(b)]] = b;
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

// The byte a character stands for, or -1.
int byte_of(char32_t c) { return c < kCodes ? tables().byte[c] : -1; }

}  // namespace

std::string bytes_to_token_text(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    const char32_t c = tables().code[b];
    if (c < 0x80) {
      out += char(c);
    } else {  // all codes are below U+0800: two UTF-8 bytes
      out += char(0xC0 | (c >> 6));
      out += char(0x80 | (c & 0x3F));
    }
  }
  return out;
}

std::optional<std::string> token_text_to_bytes(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    char32_t c = lead;
    if (lead >= 0x80) {  // only two-byte sequences can map to a byte
      if ((lead & 0xE0) != 0xC0 || i + 1 >= text.size()) return std::nullopt;
      const auto next = static_cast<unsigned char>(text[i + 1]);
      if ((next & 0xC0) != 0x80) return std::nullopt;
      c = char32_t(lead & 0x1F) << 6 | char32_t(next & 0x3F);
      if (c < 0x80) return std::nullopt;  // overlong
      ++i;
    }
    ++i;
    const int b = byte_of(c);
    if (b < 0) return std::nullopt;
    out += char(b);
  }
  return out;
}

int gpt2_byte_rank(unsigned char b) { return tables().rank[b]; }

}  // namespace qkvlab::corpus
