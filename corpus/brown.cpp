#include "corpus/brown.hpp"

#include "corpus/bpe.hpp"

#include "core/errors.hpp"
#include "core/fnv.hpp"
#include "core/limits.hpp"

#include <algorithm>
#include <fstream>

namespace qkvlab::corpus {

namespace {

constexpr std::string_view kGenres = "abcdefghjklmnpr";

bool is_digit(char c) { return c >= '0' && c <= '9'; }

int file_number(std::string_view id) { return (id[2] - '0') * 10 + (id[3] - '0'); }

// The whitespace-separated fields of a line.
std::vector<std::string_view> fields(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t at = 0;
  while (true) {
    at = line.find_first_not_of(" \t\r\f\v", at);
    if (at == std::string_view::npos) return out;
    const std::size_t end = std::min(line.find_first_of(" \t\r\f\v", at), line.size());
    out.push_back(line.substr(at, end - at));
    at = end;
  }
}


}  // namespace

bool is_brown_file_name(std::string_view name) {
  return name.size() == 4 && name[0] == 'c' && kGenres.find(name[1]) != std::string_view::npos &&
         is_digit(name[2]) && is_digit(name[3]) && name.substr(2) != "00";
}

Split split_of(std::string_view file_id) {
  return file_number(file_id) % 10 == 0 ? Split::validation : Split::train;
}

std::string coarse_tag(std::string_view tag) {
  const std::size_t cut = tag.find('-', tag.starts_with("--") ? 2 : 1);
  return std::string(tag.substr(0, cut));
}

BrownFile parse_brown_file(std::string_view text, const std::string& id, const std::string& where) {
  BrownFile f{id, id.size() > 1 ? id[1] : char(0), id.size() == 4 ? file_number(id) : 0, {}, {}, {}};
  const auto refuse = [&](std::size_t line_no, const std::string& why) {
    throw UsageError((where.empty() ? id : where) + " line " + std::to_string(line_no + 1) + ": " + why);
  };
  std::size_t line_no = 0;
  for (std::size_t at = 0; at < text.size(); ++line_no) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const auto tokens = fields(text.substr(at, end - at));
    at = end + 1;
    if (tokens.empty()) continue;
    f.sentence_starts.push_back(std::int64_t(f.words.size()));
    for (std::string_view token : tokens) {
      const std::size_t slash = token.rfind('/');
      if (slash == std::string_view::npos || slash == 0 || slash + 1 == token.size())
        refuse(line_no, "token '" + std::string(token) + "' is not word/tag");
      if (token.substr(0, slash).find(kEndOfText) != std::string_view::npos)
        refuse(line_no, "the word '" + std::string(token.substr(0, slash)) + "' holds " + std::string(kEndOfText) +
                            ", the special token that joins files (never a word's text)");
      f.words.emplace_back(token.substr(0, slash));
      f.tags.emplace_back(token.substr(slash + 1));
    }
  }
  return f;
}

namespace {

std::string file_kind(std::filesystem::file_type type) {
  using T = std::filesystem::file_type;
  switch (type) {
    case T::directory: return "a directory";
    case T::fifo: return "a FIFO";
    case T::character: return "a character device";
    case T::block: return "a block device";
    case T::socket: return "a socket";
    default: return "not a file";
  }
}

// The size of the Brown file at path, refused when it is not a regular file or is too large to be one.
std::uint64_t brown_file_size(const std::filesystem::path& path) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);  // follows a link to what it names
  if (error) throw UsageError(path.string() + ": cannot be read (" + error.message() + ")");
  if (!std::filesystem::is_regular_file(status))
    throw UsageError(path.string() + ": not a regular file (" + file_kind(status.type()) +
                     "); a Brown file c<genre><NN> must be a text file");
  const std::uint64_t size = std::filesystem::file_size(path);
  if (size > kMaxBrownFileBytes)
    throw UsageError(path.string() + ": " + std::to_string(size) + " bytes, more than a Brown file holds (at most " +
                     std::to_string(kMaxBrownFileBytes) + " bytes are read)");
  return size;
}

// The bytes of the Brown file at path, at most kMaxBrownFileBytes (a file that grew past them since
// its size was checked is refused, not read whole).
std::string read_brown_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(path.string() + ": cannot open for reading");
  std::string bytes(kMaxBrownFileBytes + 1, '\0');
  in.read(bytes.data(), std::streamsize(bytes.size()));
  if (in.bad()) throw UsageError(path.string() + ": read error");
  bytes.resize(std::size_t(in.gcount()));
  if (bytes.size() > kMaxBrownFileBytes)
    throw UsageError(path.string() + ": more than " + std::to_string(kMaxBrownFileBytes) +
                     " bytes, more than a Brown file holds (it grew while being read)");
  return bytes;
}

}  // namespace

BrownDirectory read_brown_directory(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) throw UsageError(dir.string() + ": not a directory");
  std::vector<std::string> names;
  BrownDirectory out;
  double bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!is_brown_file_name(entry.path().filename().string())) {
      ++out.ignored;
      continue;
    }
    bytes += double(brown_file_size(entry.path()));
    names.push_back(entry.path().filename().string());
  }
  require_memory("the Brown files of " + dir.string() + " (" + format_bytes(bytes) + ", parsed)", 8 * bytes);
  std::sort(names.begin(), names.end());
  bool train = false, validation = false;
  std::uint64_t checksum = kFnvOffset;
  for (const auto& name : names) {
    const std::string text = read_brown_file(dir / name);
    checksum = fnv1a64(name + " " + std::to_string(text.size()) + " " + hex64(fnv1a64(text)) + "\n", checksum);
    out.files.push_back(parse_brown_file(text, name, (dir / name).string()));
    if (out.files.back().words.empty())
      throw UsageError((dir / name).string() + ": no word/tag tokens (an empty Brown file)");
    (split_of(name) == Split::train ? train : validation) = true;
  }
  if (!train || !validation)
    throw UsageError(dir.string() + ": no Brown " + (train ? "validation" : "training") +
                     " files (names c<genre><NN>, validation NN = 10, 20, ...)");
  out.checksum = hex64(checksum);
  return out;
}

}  // namespace qkvlab::corpus
