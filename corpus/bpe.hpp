// Byte-level BPE in GPT-2's file formats.
//
// Pre-tokens: every corpus word, always with a leading space (" word", GPT-2's
// "Ġword"), at a sentence or file start too, so a word has one tokenization
// wherever it stands; a word is never split further (GPT-2's regex would cut
// "Atlanta's" into "Atlanta" and "'s"; here the Brown word is the unit, so
// every token comes from exactly one word).
//
// Vocabulary: the 256 byte tokens (numbered as GPT-2 numbers them,
// corpus/byte_unicode.hpp), the merged tokens in the order learned (256, 257,
// …), and last the special token <|endoftext|> (put between files, never
// produced by encoding). Learning merges, over the frequency table of the
// distinct pre-tokens, the most frequent adjacent pair, ties going to the
// lexicographically smallest (left bytes, right bytes), until the vocabulary
// holds vocab_size tokens or no pair is left. Pair counts are updated only in
// the words that hold the merged pair, with a lazily invalidated max-heap. When
// a merge yields the bytes of an existing token (possible: "a"+"bc", "ab"+"c")
// it maps to that token, as in GPT-2's files; merges.txt then holds more lines
// than vocab_size − 257.
//
// Files: vocab.json (a JSON object, token string → id, one entry a line) and
// merges.txt ("#version: 0.2", then one merge "LEFT RIGHT" a line, in rank
// order), token strings in GPT-2's byte-to-character mapping. load() reads
// these and GPT-2's own (\u escapes, any entry order).
//
// Encoding a pre-token: its bytes, then repeatedly the adjacent pair of lowest
// merge rank is merged (every occurrence, left to right) until none has a rank:
// the same tokens learning gave its training words.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace qkvlab::corpus {

struct Merge {
  std::int32_t left = 0, right = 0, result = 0;
};

inline constexpr std::string_view kEndOfText = "<|endoftext|>";

// The key of the adjacent pair (left, right) in the merge tables: left in the high 32 bits.
inline std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
  return std::uint64_t(std::uint32_t(left)) << 32 | std::uint32_t(right);
}

class Bpe {
 public:
  // pretoken_counts: each distinct pre-token's number of occurrences; none may hold the text
  // <|endoftext|> (a UsageError: a merge would learn the special token's bytes as a second token).
  // vocab_size ≥ 257 (UsageError otherwise).
  static Bpe learn(const std::unordered_map<std::string, std::int64_t>& pretoken_counts, int vocab_size);
  // Malformed files are a UsageError naming the file (and the line or entry).
  static Bpe load(const std::filesystem::path& vocab_json, const std::filesystem::path& merges_txt);
  // Writes both files atomically.
  void save(const std::filesystem::path& vocab_json, const std::filesystem::path& merges_txt) const;
  std::string vocab_json() const;
  std::string merges_txt() const;

  std::vector<std::int32_t> encode_pretoken(std::string_view bytes) const;
  // The bytes of the tokens, <|endoftext|> as its text.
  std::string decode(std::span<const std::int32_t> ids) const;

  int size() const { return int(bytes_.size()); }
  std::int32_t end_of_text() const { return end_of_text_; }
  const std::vector<Merge>& merges() const { return merges_; }
  const std::string& token_bytes(std::int32_t id) const { return bytes_[std::size_t(id)]; }
  std::int32_t byte_token(unsigned char b) const { return byte_token_[b]; }

 private:
  struct Rank {
    std::int32_t rank, result;
  };
  // bytes: each id's bytes (<|endoftext|>'s text for it); the byte tokens are
  // the ids whose bytes are one byte.
  Bpe(std::vector<std::string> bytes, std::vector<Merge> merges, std::int32_t end_of_text);

  std::vector<std::string> bytes_;
  std::vector<Merge> merges_;
  std::int32_t end_of_text_ = 0;
  std::int32_t byte_token_[256] = {};
  std::unordered_map<std::uint64_t, Rank> rank_;  // (left, right) → rank and result
};

// The pre-token of a corpus word: " " + word.
std::string pretoken(std::string_view word);

// Replaces every occurrence of (left, right), left to right and not
// overlapping, by result; true when there was one. The step of learning and
// of encoding.
bool apply_merge(std::vector<std::int32_t>& symbols, const Merge& m);

// Encodes words (as pre-tokens) through a cache of each distinct word's tokens.
class WordEncoder {
 public:
  explicit WordEncoder(const Bpe& bpe) : bpe_(bpe) {}
  const std::vector<std::int32_t>& operator()(const std::string& word);

 private:
  const Bpe& bpe_;
  std::unordered_map<std::string, std::vector<std::int32_t>> cache_;
};

// Tokens of a word sequence, each with the index of the word it came from.
struct Encoded {
  std::vector<std::int32_t> ids;
  std::vector<std::int64_t> word;
};
Encoded encode_words(const Bpe& bpe, const std::vector<std::string>& words);

}  // namespace qkvlab::corpus
