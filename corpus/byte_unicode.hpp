// GPT-2's bytes_to_unicode: in vocab.json and merges.txt every byte of a token
// is written as one printable character, so that token strings hold no space or
// control character. The bytes '!'…'~', '¡'…'¬', '®'…'ÿ' (188 of them) stand for
// the characters of the same code; the other 68 (0–32, 127–160, 173), in order,
// for U+0100, U+0101, … (space, the 33rd, is 'Ġ' U+0120). GPT-2's vocabulary
// numbers the 256 byte tokens in the same order: the 188 first ('!' = 0,
// 't' = 83), then the others (byte 0 = 188, space = 220).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace qkvlab::corpus {

// The token string (UTF-8) of a byte sequence.
std::string bytes_to_token_text(std::string_view bytes);
// The bytes of a token string; nullopt when it is not valid UTF-8 or holds a
// character outside the 256 of the mapping.
std::optional<std::string> token_text_to_bytes(std::string_view text);
// GPT-2's id of the one-byte token of b (0 … 255).
int gpt2_byte_rank(unsigned char b);

}  // namespace qkvlab::corpus
