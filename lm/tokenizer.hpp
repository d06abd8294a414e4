// Text in and out with a checkpoint's own tokenizer: the Hugging Face files of a byte-level BPE.
//
// Tokenizer::load(DIR) reads, in this order of preference:
//   tokenizer.json           "model" BPE (vocab; merges as "A B" or ["A", "B"]; byte_fallback; unk_token;
//                            fuse_unk; ignore_merges); "pre_tokenizer" ByteLevel (add_prefix_space; use_regex:
//                            GPT-2's pattern), Split (a Regex or String pattern, behavior Isolated or Removed,
//                            not inverted), WhitespaceSplit, or a Sequence of these with ByteLevel last;
//                            "normalizer" null; "decoder" ByteLevel; "post_processor" null, ByteLevel,
//                            TemplateProcessing (its "single" template) or a Sequence of these; "added_tokens"
//                            (cut out of the text first, leftmost and then longest).
//   vocab.json + merges.txt  GPT-2's files (corpus/bpe.hpp reads them): ByteLevel with GPT-2's pattern,
//                            <|endoftext|> an added token.
// Anything else (another model type, a normalizer, a Metaspace or other pre-tokenizer, another decoder
// or post-processor, BPE dropout, a subword prefix or suffix, an added token that strips spaces or
// must be a single word) is a UsageError of one line naming the file and the field: never approximated.
//
// Encoding, as Hugging Face's tokenizers: the added tokens are cut out; each remaining segment is
// pre-tokenized into pieces, each piece's bytes mapped to GPT-2's printable characters
// (corpus/byte_unicode.hpp), and each piece merged as tokenizers' BPE merges a word: repeatedly the
// adjacent pair of lowest merge rank, leftmost first (a heap: O(n log n) in the piece's length; on
// files whose merges only join tokens made by earlier merges, such as GPT-2's, the same tokens as
// GPT-2's encoder.py). A character without a token becomes the <0xXX> tokens of its UTF-8 bytes under
// byte_fallback, else unk_token, else a UsageError. Then the post-processor's special tokens (Llama 3's
// <|begin_of_text|>) go around the ids. Patterns run under PCRE2 in UTF mode with Unicode properties
// (\p{L}, \p{N}, \s); a byte that is not part of valid UTF-8 matches no pattern item, so it stays in
// the text between matches and is encoded as its byte: through a pre-tokenizer that removes nothing,
// decode(encode(s)) = s for every byte string s.
//
// Decoding: each id's token string, its characters mapped back to bytes (a token with a character
// outside GPT-2's map, such as an added token, gives its own UTF-8 bytes, as tokenizers' ByteLevel
// decoder does), concatenated. The result is raw bytes: where tokenizers would replace invalid UTF-8
// by U+FFFD, they are returned as they are. An id outside the vocabulary is a UsageError.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "corpus/bpe.hpp"

namespace qkvlab::lm {

class Tokenizer {
 public:
  // DIR's tokenizer.json, else its vocab.json + merges.txt; a UsageError when it has neither, or when
  // DIR is a checkpoint whose manifest.json does not match its files (lm/checkpoint.hpp).
  static Tokenizer load(const std::filesystem::path& dir);
  // The contents of a tokenizer.json; `name` names it in errors.
  static Tokenizer from_json(std::string_view text, const std::string& name);
  // GPT-2's files as corpus::Bpe holds them.
  static Tokenizer from_bpe(const corpus::Bpe& bpe, const std::string& name);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<std::int32_t> encode(std::string_view text) const;
  // `text` encoded as one stream and cut into pieces of `length` ids, each wrapped in the
  // post-processor's special tokens as encoding it on its own would wrap it (Llama 3's
  // <|begin_of_text|> at position 0 of every piece): length − (the special tokens) ids of text a
  // piece, row after row; the last partial piece is dropped (no piece: empty). UsageError when the
  // special tokens leave no room for text.
  std::vector<std::int32_t> encode_pieces(std::string_view text, int length) const;
  std::string decode(std::span<const std::int32_t> ids) const;
  // One more than the largest id (vocabulary and added tokens).
  int vocab_size() const;
  // The file(s) it was read from.
  const std::string& source() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// True when DIR holds tokenizer.json or vocab.json (Tokenizer::load would try to read it).
bool has_tokenizer(const std::filesystem::path& dir);

// bytes with each maximal ill-formed part of UTF-8 replaced by U+FFFD (as Python's
// bytes.decode("utf-8", errors="replace") and tokenizers' decode do): for JSON output of decoded text.
std::string replace_invalid_utf8(std::string_view bytes);

// The tokenizer.json of the toolkit's own BPE (corpus/bpe.hpp): its vocabulary and merges,
// <|endoftext|> an added special token, and the pre-tokenizer the corpus was encoded with:
// WhitespaceSplit, then ByteLevel with add_prefix_space (each word " word") and no regex; decoder
// ByteLevel. Encoding the words of a text joined by whitespace gives the corpus's token ids.
std::string tokenizer_json(const corpus::Bpe& bpe);

}  // namespace qkvlab::lm
