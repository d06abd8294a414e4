// Tokenizer::Impl, lm/tokenizer.hpp's private half, and the types it holds; defined by concern in
//   tokenizer.cpp          the interface: loading GPT-2's files, encode (added tokens cut out), decode
//   tokenizer_pattern.cpp  PCRE2 patterns (Regex), the pre-tokenizer's steps, the added tokens' pattern
//   tokenizer_bpe.cpp      the vocabulary and merges, a piece's symbols, Hugging Face's BPE merge
//   tokenizer_json.cpp     tokenizer.json, read (every part checked to be implemented) and written
// Included by those four files only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "corpus/bpe.hpp"
#include "lm/tokenizer.hpp"

struct pcre2_real_code_8;  // pcre2.h's pcre2_code, included by tokenizer_pattern.cpp only

namespace qkvlab::lm {

// Named (not anonymous): Tokenizer::Impl holds these types, and the unity build puts these files in
// one translation unit with others.
namespace tokenizer_detail {

// GPT-2's pre-tokenizer pattern (ByteLevel's use_regex), as tokenizers writes it.
constexpr std::string_view kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// A PCRE2 pattern in UTF mode with Unicode properties (a literal: its characters as they are); bytes that are
// not UTF-8 match nothing.
class Regex {
 public:
  Regex(std::string_view pattern, bool literal, const std::string& where);
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex();

  // The [begin, end) byte ranges of the non-empty matches in s, left to right.
  std::vector<std::pair<std::size_t, std::size_t>> matches(std::string_view s) const;

 private:
  pcre2_real_code_8* code_ = nullptr;  // PCRE2's pcre2_code (8-bit code units)
};

enum class Behavior { isolated, removed };

// One pre-tokenizer step: a Split (pattern and behavior), or ByteLevel (prefix space; GPT-2's pattern).
struct PreStep {
  std::shared_ptr<const Regex> regex;  // null: ByteLevel without use_regex
  Behavior behavior = Behavior::isolated;
  bool byte_level = false, add_prefix_space = false;
};

// ByteLevel: a space put before a piece that does not start with one; GPT-2's pattern when use_regex.
PreStep byte_level(bool add_prefix_space, bool use_regex, const std::string& where);

struct MergeRank {
  std::int32_t rank, result;
};

// The bytes of a token string under GPT-2's map, or its own UTF-8 bytes when a character is outside it.
std::string token_bytes(const std::string& token);

// The string of a corpus::Bpe token in GPT-2's files.
std::string token_text(const corpus::Bpe& bpe, std::int32_t id);

}  // namespace tokenizer_detail

struct Tokenizer::Impl {
  std::string source;
  std::unordered_map<std::string, std::int32_t> vocab;  // model vocabulary and added tokens
  std::vector<std::string> bytes;                        // each id's decoded bytes
  std::vector<bool> assigned;                            // ids that name a token
  std::unordered_map<std::uint64_t, tokenizer_detail::MergeRank> merges;  // (left, right) → rank, result
  std::vector<tokenizer_detail::PreStep> steps;
  std::unique_ptr<tokenizer_detail::Regex> added;  // the added tokens' contents, longest first; null when none
  std::vector<std::int32_t> prefix, suffix;  // the post-processor's special tokens
  std::optional<std::int32_t> unk;
  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  std::size_t id_limit = 0;  // the entries of the files: ids beyond are refused before anything is sized by them

  void add_token(const std::string& text, std::int32_t id, const std::string& where);
  // A merge of rank `rank` (its place in the list); a pair listed again takes the later rank, as
  // tokenizers' BpeBuilder (a HashMap collected in order) and GPT-2's encoder.py (a dict) do.
  void add_merge(const std::string& left, const std::string& right, std::int32_t rank, const std::string& where);
  // `id` when the tokenizer assigns it to a token; a UsageError naming `where` otherwise.
  std::int32_t assigned_id(std::int32_t id, const std::string& where) const;
  void set_added(const std::vector<std::string>& contents);
  // The pieces of one segment (no added token in it), through every pre-tokenizer step.
  std::vector<std::string> pieces(std::string_view segment) const;
  // The initial symbols of a piece (already in GPT-2's characters): one per character.
  std::vector<std::int32_t> symbols(const std::string& piece) const;
  // Hugging Face's BPE merge of one word: the lowest-ranked adjacent pair, leftmost first.
  std::vector<std::int32_t> merge(std::vector<std::int32_t> ids) const;
  void encode_segment(std::string_view segment, std::vector<std::int32_t>& out,
                      std::unordered_map<std::string, std::vector<std::int32_t>>& cache) const;
};

}  // namespace qkvlab::lm
