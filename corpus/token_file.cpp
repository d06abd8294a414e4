#include "corpus/token_file.hpp"

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/limits.hpp"

#include <array>
#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <utility>

namespace qkvlab::corpus {

static_assert(std::endian::native == std::endian::little, "the token-file reader assumes a little-endian host");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::uint64_t kMaxHeader = 1 << 16;  // NumPy writes a few hundred bytes
constexpr std::int64_t kMaxId = std::numeric_limits<std::int32_t>::max();

[[noreturn]] void bad(const std::filesystem::path& path, const std::string& why) {
  throw UsageError(path.string() + ": " + why);
}

struct Dtype {
  std::string_view name;
  int size;
  bool is_signed;
};
constexpr std::array<Dtype, 8> kDtypes{{{"|i1", 1, true}, {"|u1", 1, false}, {"<i2", 2, true}, {"<u2", 2, false},
                                        {"<i4", 4, true}, {"<u4", 4, false}, {"<i8", 8, true}, {"<u8", 8, false}}};

struct NpyHeader {
  Dtype dtype{};
  bool fortran_order = false;
  std::vector<std::int64_t> shape;
};

// The header's Python dict literal: {'descr': …, 'fortran_order': …, 'shape': (…), }.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::filesystem::path& path) : s_(text), path_(path) {}

  NpyHeader parse() {
    NpyHeader h;
    bool descr = false, order = false, shape = false;
    expect('{');
    while (peek() != '}') {
      const std::string key = quoted();
      expect(':');
      if (key == "descr") h.dtype = dtype(quoted()), descr = true;
      else if (key == "fortran_order") h.fortran_order = boolean(), order = true;
      else if (key == "shape") h.shape = tuple(), shape = true;
      else malformed("unknown key '" + key + "'");
      if (peek() != ',') break;
      ++at_;
    }
    expect('}');
    if (s_.find_first_not_of(" \n", at_) != std::string_view::npos) malformed("text after the dict");
    if (!descr || !order || !shape) malformed("'descr', 'fortran_order' and 'shape' are needed");
    return h;
  }

 private:
  [[noreturn]] void malformed(const std::string& why) const { bad(path_, "malformed .npy header: " + why); }
  char peek() {
    while (at_ < s_.size() && s_[at_] == ' ') ++at_;
    return at_ < s_.size() ? s_[at_] : '\0';
  }
  void expect(char c) {
    if (peek() != c) malformed(std::string("expected '") + c + "'");
    ++at_;
  }
  std::string quoted() {
    const char q = peek();
    if (q != '\'' && q != '"') malformed("expected a quoted string");
    const std::size_t end = s_.find(q, ++at_);
    if (end == std::string_view::npos) malformed("unterminated string");
    std::string out(s_.substr(at_, end - at_));
    at_ = end + 1;
    return out;
  }
  bool boolean() {
    peek();
    for (const auto& [word, value] : {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}})
      if (s_.substr(at_, word.size()) == word) return at_ += word.size(), value;
    malformed("fortran_order is neither True nor False");
  }
  std::vector<std::int64_t> tuple() {
    std::vector<std::int64_t> dims;
    expect('(');
    while (peek() != ')') {
      std::int64_t d = 0;
      const std::size_t from = at_;
      while (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9' && at_ - from < 18) d = d * 10 + (s_[at_++] - '0');
      if (at_ == from || (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9')) malformed("a shape entry is not a size");
      dims.push_back(d);
      if (peek() != ',') break;
      ++at_;
    }
    expect(')');
    return dims;
  }
  Dtype dtype(const std::string& name) const {
    for (const Dtype& d : kDtypes)
      if (d.name == name) return d;
    bad(path_, "dtype '" + name + "' (integer token ids: |i1 |u1 <i2 <u2 <i4 <u4 <i8 <u8)");
  }

  std::string_view s_;
  const std::filesystem::path& path_;
  std::size_t at_ = 0;
};

// The rows (2-D, cols > 0) or ids (1-D) of a file of `rows` that hold the prefix's sequences; all when it asks for all.
std::int64_t rows_read(std::int64_t rows, std::int64_t cols, const TokenPrefix& prefix) {
  if (prefix.sequences <= 0) return rows;
  const std::int64_t wanted = cols > 0 ? prefix.sequences
                              : prefix.sequences > std::numeric_limits<std::int64_t>::max() / std::max(prefix.seq_len, 1)
                                  ? rows
                                  : prefix.sequences * std::max(prefix.seq_len, 1);
  return std::min(rows, wanted);
}

// The ids are held as int32: the file's declared count is checked against the memory budget before allocating.
void require_id_memory(const std::filesystem::path& path, std::uint64_t count) {
  const double bytes = 4.0 * double(count);
  if (bytes > double(memory_budget()))
    bad(path, "declares " + std::to_string(count) + " token ids, " + format_bytes(bytes) + " as int32, more than the memory budget of " +
                  format_bytes(double(memory_budget())));
}

std::uint64_t regular_file_size(const std::filesystem::path& path) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error || !std::filesystem::exists(status)) bad(path, "no such file");
  if (!std::filesystem::is_regular_file(status)) bad(path, "not a regular file");
  return std::filesystem::file_size(path);
}

void read_exactly(std::ifstream& in, char* to, std::uint64_t n, const std::filesystem::path& path) {
  in.read(to, std::streamsize(n));
  if (std::uint64_t(in.gcount()) != n) bad(path, "read failed (the file changed while it was read?)");
}

// Calls f with a value of the C++ type of dtype d.
template <class F> void with_type(const Dtype& d, F&& f) {
  switch (d.size * (d.is_signed ? -1 : 1)) {
    case -1: return f(std::int8_t{});
    case 1: return f(std::uint8_t{});
    case -2: return f(std::int16_t{});
    case 2: return f(std::uint16_t{});
    case -4: return f(std::int32_t{});
    case 4: return f(std::uint32_t{});
    case -8: return f(std::int64_t{});
    default: return f(std::uint64_t{});
  }
}

// Reads array.ids.size() elements of dtype d, stored in C or Fortran order,
// into row order.
void read_elements(std::ifstream& in, const Dtype& d, bool fortran_order, std::int32_t lowest, TokenArray& array,
                   const std::filesystem::path& path) {
  const std::uint64_t n = array.ids.size(), item = std::uint64_t(d.size);
  const std::uint64_t rows = std::uint64_t(array.rows), cols = std::uint64_t(std::max<std::int64_t>(array.cols, 1));
  std::vector<char> buffer(std::size_t(1) << 20);
  const std::uint64_t per_chunk = buffer.size() / item;
  with_type(d, [&]<class T>(T) {
    for (std::uint64_t k0 = 0; k0 < n; k0 += per_chunk) {
      const std::uint64_t m = std::min(per_chunk, n - k0);
      read_exactly(in, buffer.data(), m * item, path);
      for (std::uint64_t j = 0; j < m; ++j) {
        T v;
        std::memcpy(&v, buffer.data() + j * item, sizeof v);
        const std::uint64_t k = k0 + j;
        const std::uint64_t r = fortran_order ? k % rows : k / cols, c = fortran_order ? k / rows : k % cols;
        if (std::cmp_less(v, lowest) || std::cmp_greater(v, kMaxId)) {
          const std::string at = array.cols == 0 ? std::to_string(r) : "(" + std::to_string(r) + ", " + std::to_string(c) + ")";
          bad(path, "element " + at + " is " + std::to_string(v) + ", not " + (lowest == 0 ? "a token id" : "a tag") + " (" +
                        std::to_string(lowest) + " … 2147483647)");
        }
        array.ids[r * cols + c] = std::int32_t(v);
      }
    }
  });
}

TokenArray read_npy_tokens(const std::filesystem::path& path, std::uint64_t size, std::int32_t lowest,
                           const TokenPrefix& prefix) {
  std::ifstream in(path, std::ios::binary);
  if (!in) bad(path, "cannot open for reading");
  char lead[12] = {};
  in.read(lead, std::min<std::uint64_t>(size, sizeof lead));
  if (size < 10 || std::memcmp(lead, kMagic, 6) != 0) bad(path, "not an .npy file (bad magic or shorter than its header)");
  const int major = static_cast<unsigned char>(lead[6]);
  if (major < 1 || major > 3) bad(path, ".npy format version " + std::to_string(major) + " (1, 2 and 3 are read)");
  const std::uint64_t length_bytes = major == 1 ? 2 : 4;
  std::uint64_t header_len = 0;
  for (std::uint64_t i = 0; i < length_bytes; ++i) header_len |= std::uint64_t(static_cast<unsigned char>(lead[8 + i])) << (8 * i);
  const std::uint64_t data_at = 8 + length_bytes + header_len;
  if (header_len > kMaxHeader) bad(path, "an .npy header of " + std::to_string(header_len) + " bytes (at most 65536 are read)");
  if (data_at > size) bad(path, "truncated .npy header (" + std::to_string(size) + " bytes, the header ends at " + std::to_string(data_at) + ")");
  std::string text(header_len, '\0');
  in.seekg(std::streamoff(8 + length_bytes));
  read_exactly(in, text.data(), header_len, path);
  const NpyHeader h = HeaderParser(text, path).parse();
  if (h.shape.empty() || h.shape.size() > 2)
    bad(path, "a " + std::to_string(h.shape.size()) + "-D array (token ids are 1-D or 2-D)");
  const std::uint64_t data = size - data_at, item = std::uint64_t(h.dtype.size);
  std::uint64_t count = 1;
  for (std::int64_t dim : h.shape) {
    if (dim != 0 && count > std::numeric_limits<std::uint64_t>::max() / item / std::uint64_t(dim))
      bad(path, "the header declares a shape of more than 2^64 bytes (" + std::to_string(data) + " bytes of data follow it)");
    count *= std::uint64_t(dim);
  }
  if (count * item != data)
    bad(path, "the header declares " + std::to_string(count) + " elements of " + std::to_string(item) + " bytes, but " +
                  std::to_string(data) + " bytes of data follow it");
  if (h.shape.size() == 2 && h.shape[1] > kMaxId)
    bad(path, "rows of " + std::to_string(h.shape[1]) + " token ids (a sequence holds at most 2147483647)");
  const bool fortran = h.fortran_order && h.shape.size() == 2;
  const std::int64_t cols = h.shape.size() == 2 ? h.shape[1] : 0;
  const std::int64_t rows = fortran ? h.shape[0] : rows_read(h.shape[0], cols, prefix);
  const std::uint64_t n = std::uint64_t(rows) * std::uint64_t(std::max<std::int64_t>(cols, 1));
  require_id_memory(path, n);
  TokenArray array{std::vector<std::int32_t>(n), rows, cols};
  read_elements(in, h.dtype, fortran, lowest, array, path);
  return array;
}

TokenArray read_bin_tokens(const std::filesystem::path& path, std::uint64_t size, std::int32_t lowest,
                           const TokenPrefix& prefix) {
  if (size % 2 != 0) bad(path, "odd size " + std::to_string(size) + " (a flat uint16 .bin has an even number of bytes)");
  std::ifstream in(path, std::ios::binary);
  if (!in) bad(path, "cannot open for reading");
  const std::int64_t n = rows_read(std::int64_t(size / 2), 0, prefix);
  require_id_memory(path, std::uint64_t(n));
  TokenArray array{std::vector<std::int32_t>(std::size_t(n)), n, 0};
  read_elements(in, kDtypes[3], false, lowest, array, path);
  return array;
}

}  // namespace

namespace {

TokenArray read_integer_file(const std::filesystem::path& path, std::int32_t lowest, const TokenPrefix& prefix = {}) {
  const std::uint64_t size = regular_file_size(path);  // a device or a directory is refused first
  const auto ext = path.extension();
  if (ext == ".npy") return read_npy_tokens(path, size, lowest, prefix);
  if (ext == ".bin") return read_bin_tokens(path, size, lowest, prefix);
  bad(path, "unknown token file type '" + ext.string() + "' (.npy of integers, or nanoGPT's flat uint16 .bin)");
}

}  // namespace

TokenArray read_token_file(const std::filesystem::path& path, const TokenPrefix& prefix) {
  return read_integer_file(path, 0, prefix);
}

TokenArray read_tag_file(const std::filesystem::path& path) { return read_integer_file(path, -1); }

std::string tokens_npy_bytes(const std::vector<std::int32_t>& ids, std::int64_t rows, std::int64_t cols) {
  if (rows < 0 || cols < 0 || std::uint64_t(rows) * std::uint64_t(std::max<std::int64_t>(cols, 1)) != ids.size())
    throw std::invalid_argument("write_tokens_npy: " + std::to_string(ids.size()) + " ids for the shape " +
                                std::to_string(rows) + "x" + std::to_string(cols));
  std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (" + std::to_string(rows) +
                       (cols == 0 ? "," : ", " + std::to_string(cols)) + "), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string bytes(kMagic, 6);
  bytes += {'\x01', '\x00', char(header.size() & 0xff), char(header.size() >> 8)};
  bytes += header;
  const std::size_t at = bytes.size();
  bytes.resize(at + ids.size() * 4);
  if (!ids.empty()) std::memcpy(bytes.data() + at, ids.data(), ids.size() * 4);  // no ids: data() may be null
  return bytes;
}

void write_tokens_npy(const std::filesystem::path& path, const std::vector<std::int32_t>& ids, std::int64_t rows,
                      std::int64_t cols) {
  write_bytes_atomically(path, ".npy", tokens_npy_bytes(ids, rows, cols));
}

}  // namespace qkvlab::corpus
