#include "core/npy.hpp"

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/limits.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace qkvlab {

static_assert(std::endian::native == std::endian::little, "the .npy reader assumes a little-endian host");

namespace {

constexpr char kMagic[] = "\x93NUMPY";

[[noreturn]] void bad(const std::string& name, const std::string& why) {
  throw UsageError(name + ": not a 2-D float64/float32 .npy matrix: " + why);
}

std::size_t skip_space(const std::string& h, std::size_t at) {
  while (at < h.size() && (h[at] == ' ' || h[at] == '\t')) ++at;
  return at;
}

// The text of the value of 'key' in the header dict, up to the next top-level ',' or '}'.
std::string dict_value(const std::string& h, const std::string& key, const std::string& name) {
  std::size_t at = std::string::npos;
  for (const char* q : {"'", "\""}) {
    const auto k = h.find(q + key + q);
    if (k != std::string::npos) at = k + key.size() + 2;
  }
  if (at == std::string::npos) bad(name, "header lacks '" + key + "'");
  at = skip_space(h, at);
  if (at >= h.size() || h[at] != ':') bad(name, "malformed header near '" + key + "'");
  at = skip_space(h, at + 1);
  std::size_t end = at;
  int depth = 0;
  while (end < h.size() && (depth > 0 || (h[end] != ',' && h[end] != '}'))) {
    if (h[end] == '(') ++depth;
    if (h[end] == ')') --depth;
    ++end;
  }
  if (end >= h.size()) bad(name, "malformed header near '" + key + "'");
  std::string v = h.substr(at, end - at);
  while (!v.empty() && v.back() == ' ') v.pop_back();
  return v;
}

std::vector<long long> parse_shape(const std::string& v, const std::string& name) {
  if (v.size() < 2 || v.front() != '(' || v.back() != ')') bad(name, "malformed shape " + v);
  std::vector<long long> dims;
  std::string inner = v.substr(1, v.size() - 2);
  std::istringstream in(inner);
  for (std::string part; std::getline(in, part, ',');) {
    const auto b = part.find_first_not_of(' ');
    if (b == std::string::npos) continue;  // the trailing comma of a 1-tuple
    const auto e = part.find_last_not_of(' ');
    const std::string digits = part.substr(b, e - b + 1);
    if (digits.empty() || digits.size() > 12 || digits.find_first_not_of("0123456789") != std::string::npos)
      bad(name, "malformed shape " + v);
    dims.push_back(std::stoll(digits));
  }
  return dims;
}

// Everything before the data: the layout the header declares.
struct Header {
  NpyDtype dtype = NpyDtype::f8;
  bool fortran_order = false;
  long long rows = 0, cols = 0;
  std::size_t data_at = 0;  // offset of the data
  std::size_t item() const { return dtype == NpyDtype::f8 ? 8 : 4; }
};

constexpr std::size_t kMaxHeader = 1 << 20;  // numpy writes a few hundred bytes; it reads at most 10000 by default

// The bytes before the header text (10 for version 1.0, 12 for 2.0) and the header's length.
std::pair<std::size_t, std::size_t> header_extent(std::string_view bytes, const std::string& name) {
  if (bytes.size() < 10 || bytes.compare(0, 6, std::string_view(kMagic, 6)) != 0) bad(name, "bad magic (not an .npy file)");
  const int major = static_cast<unsigned char>(bytes[6]);
  std::size_t header_len = 0;
  if (major == 1) {
    header_len = std::size_t(static_cast<unsigned char>(bytes[8])) | std::size_t(static_cast<unsigned char>(bytes[9])) << 8;
    return {10, header_len};
  }
  if (major != 2) bad(name, "unsupported format version " + std::to_string(major) + " (1.0 and 2.0 are read)");
  if (bytes.size() < 12) bad(name, "truncated header");
  for (int i = 0; i < 4; ++i) header_len |= std::size_t(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  if (header_len > kMaxHeader) bad(name, "header of " + std::to_string(header_len) + " bytes (at most 1 MiB is read)");
  return {12, header_len};
}

// Parses the header from `bytes`, which must hold at least the whole header.
Header parse_header(std::string_view bytes, const std::string& name) {
  const auto [header_at, header_len] = header_extent(bytes, name);
  if (bytes.size() < header_at + header_len) bad(name, "truncated header");
  const std::string h(bytes.substr(header_at, header_len));
  const auto open = h.find('{');
  if (open == std::string::npos || h.find('}') == std::string::npos) bad(name, "malformed header");

  Header out;
  const std::string descr = dict_value(h, "descr", name);
  if (descr == "'<f8'" || descr == "\"<f8\"") out.dtype = NpyDtype::f8;
  else if (descr == "'<f4'" || descr == "\"<f4\"") out.dtype = NpyDtype::f4;
  else bad(name, "dtype " + descr + " (only '<f8' and '<f4' are read)");
  const std::string order = dict_value(h, "fortran_order", name);
  if (order == "True") out.fortran_order = true;
  else if (order == "False") out.fortran_order = false;
  else bad(name, "malformed fortran_order " + order);
  const auto shape = parse_shape(dict_value(h, "shape", name), name);
  if (shape.size() != 2) bad(name, std::to_string(shape.size()) + "-D array (a 2-D matrix is needed)");
  if (shape[0] > INT32_MAX || shape[1] > INT32_MAX)
    bad(name, "shape (" + std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + ") has a dimension past 2^31 - 1");
  out.rows = shape[0];
  out.cols = shape[1];
  out.data_at = header_at + header_len;
  return out;
}

// The data's size in bytes, checked against the `available` bytes after the header
// (truncated or trailing data is an error) before anything is allocated.
std::size_t data_bytes(const Header& h, std::size_t available, const std::string& name) {
  const unsigned __int128 need = static_cast<unsigned __int128>(h.rows) * static_cast<unsigned __int128>(h.cols) * h.item();
  if (need > available)
    bad(name, "truncated data (" + std::to_string(available) + " bytes for a " + std::to_string(h.rows) + "x" +
                  std::to_string(h.cols) + " matrix of " + std::to_string(h.item()) + "-byte entries)");
  if (need < available) bad(name, "trailing bytes after the data");
  return std::size_t(need);
}

NpyMatrix convert(const Header& h, const char* data, const std::string& name) {
  NpyMatrix out;
  out.dtype = h.dtype;
  out.fortran_order = h.fortran_order;
  const long long rows = h.rows, cols = h.cols;
  const std::size_t item = h.item();
  out.data.resize(rows, cols);
  for (long long k = 0; k < rows * cols; ++k) {
    const char* p = data + std::size_t(k) * item;
    double v;
    if (item == 8) {
      std::memcpy(&v, p, 8);
    } else {
      float f;
      std::memcpy(&f, p, 4);
      v = f;
    }
    const long long r = out.fortran_order ? k % std::max(rows, 1LL) : k / std::max(cols, 1LL);
    const long long c = out.fortran_order ? k / std::max(rows, 1LL) : k % std::max(cols, 1LL);
    if (!std::isfinite(v))
      bad(name, "non-finite entry at (" + std::to_string(r) + ", " + std::to_string(c) + ")");
    out.data(r, c) = v;
  }
  return out;
}

// Reads exactly n bytes at the descriptor's position.
void read_exactly(int fd, char* into, std::size_t n, const std::string& name) {
  while (n > 0) {
    const ssize_t got = ::read(fd, into, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) bad(name, got == 0 ? "truncated (the file shrank while read)" : "read error (" + std::string(std::strerror(errno)) + ")");
    into += got;
    n -= std::size_t(got);
  }
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

NpyMatrix parse_npy(const std::string& bytes, const std::string& name) {
  const Header h = parse_header(bytes, name);
  data_bytes(h, bytes.size() - h.data_at, name);
  return convert(h, bytes.data() + h.data_at, name);
}

NpyMatrix read_npy(const std::filesystem::path& path) {
  const std::string name = path.string();
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) throw UsageError(name + ": cannot open for reading (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw UsageError(name + ": cannot open for reading (" + std::strerror(errno) + ")");
  if (!S_ISREG(st.st_mode)) throw UsageError(name + ": not a regular file");
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags >= 0) ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  const std::size_t size = std::size_t(st.st_size);
  // The header first: the fixed prefix, then the header text, then the declared data size
  // against the file's size and the memory budget, and only then the data.
  std::string head(std::min<std::size_t>(size, 12), '\0');
  read_exactly(fd.get(), head.data(), head.size(), name);
  const auto [header_at, header_len] = header_extent(head, name);
  if (size < header_at + header_len) bad(name, "truncated header");
  head.resize(header_at + header_len);
  if (head.size() > 12) read_exactly(fd.get(), head.data() + 12, head.size() - 12, name);
  else if (head.size() < 12 && ::lseek(fd.get(), off_t(head.size()), SEEK_SET) < 0) bad(name, "cannot seek");
  const Header h = parse_header(head, name);
  const std::size_t need = data_bytes(h, size - h.data_at, name);
  require_memory(name + " (a " + std::to_string(h.rows) + "x" + std::to_string(h.cols) + " matrix)",
                 double(need) + 8.0 * double(h.rows) * double(h.cols));
  std::string data(need, '\0');
  read_exactly(fd.get(), data.data(), need, name);
  return convert(h, data.data(), name);
}

std::string npy_bytes(const MatD& m, NpyDtype dtype, bool fortran_order) {
  std::string header = std::string("{'descr': '") + (dtype == NpyDtype::f8 ? "<f8" : "<f4") +
                       "', 'fortran_order': " + (fortran_order ? "True" : "False") + ", 'shape': (" +
                       std::to_string(m.rows()) + ", " + std::to_string(m.cols()) + "), }";
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string out(kMagic, 6);
  out += '\x01';
  out += '\x00';
  out += char(header.size() & 0xff);
  out += char(header.size() >> 8 & 0xff);
  out += header;
  const std::size_t item = dtype == NpyDtype::f8 ? 8 : 4;
  const std::size_t at = out.size();
  out.resize(at + std::size_t(m.size()) * item);
  for (Eigen::Index k = 0; k < m.size(); ++k) {
    const Eigen::Index r = fortran_order ? k % m.rows() : k / m.cols();
    const Eigen::Index c = fortran_order ? k / m.rows() : k % m.cols();
    char* p = out.data() + at + std::size_t(k) * item;
    if (item == 8) {
      const double v = m(r, c);
      std::memcpy(p, &v, 8);
    } else {
      const float v = float(m(r, c));
      std::memcpy(p, &v, 4);
    }
  }
  return out;
}

void write_npy(const std::filesystem::path& path, const MatD& m, NpyDtype dtype, bool fortran_order) {
  write_bytes_atomically(path, ".npy", npy_bytes(m, dtype, fortran_order));
}

}  // namespace qkvlab
