#include "core/npy.hpp"

#include "core/atomic_file.hpp"
#include "core/errors.hpp"

#include <bit>
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

}  // namespace

NpyMatrix parse_npy(const std::string& bytes, const std::string& name) {
  if (bytes.size() < 10 || bytes.compare(0, 6, kMagic, 6) != 0) bad(name, "bad magic (not an .npy file)");
  const int major = static_cast<unsigned char>(bytes[6]);
  std::size_t header_len = 0, header_at = 0;
  if (major == 1) {
    header_len = std::size_t(static_cast<unsigned char>(bytes[8])) | std::size_t(static_cast<unsigned char>(bytes[9])) << 8;
    header_at = 10;
  } else if (major == 2) {
    if (bytes.size() < 12) bad(name, "truncated header");
    for (int i = 0; i < 4; ++i) header_len |= std::size_t(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    header_at = 12;
  } else {
    bad(name, "unsupported format version " + std::to_string(major) + " (1.0 and 2.0 are read)");
  }
  if (bytes.size() < header_at + header_len) bad(name, "truncated header");
  const std::string h = bytes.substr(header_at, header_len);
  const auto open = h.find('{');
  if (open == std::string::npos || h.find('}') == std::string::npos) bad(name, "malformed header");

  const std::string descr = dict_value(h, "descr", name);
  NpyMatrix out;
  if (descr == "'<f8'" || descr == "\"<f8\"") out.dtype = NpyDtype::f8;
  else if (descr == "'<f4'" || descr == "\"<f4\"") out.dtype = NpyDtype::f4;
  else bad(name, "dtype " + descr + " (only '<f8' and '<f4' are read)");
  const std::string order = dict_value(h, "fortran_order", name);
  if (order == "True") out.fortran_order = true;
  else if (order == "False") out.fortran_order = false;
  else bad(name, "malformed fortran_order " + order);
  const auto shape = parse_shape(dict_value(h, "shape", name), name);
  if (shape.size() != 2) bad(name, std::to_string(shape.size()) + "-D array (a 2-D matrix is needed)");

  const long long rows = shape[0], cols = shape[1];
  const std::size_t item = out.dtype == NpyDtype::f8 ? 8 : 4;
  const std::size_t data_at = header_at + header_len;
  const std::size_t available = bytes.size() - data_at;
  if (rows > 0 && std::size_t(cols) > available / item / std::size_t(rows))
    bad(name, "truncated data (" + std::to_string(available) + " bytes for a " + std::to_string(rows) + "x" +
                  std::to_string(cols) + " matrix)");
  const std::size_t need = std::size_t(rows) * std::size_t(cols) * item;
  if (bytes.size() - data_at < need)
    bad(name, "truncated data (" + std::to_string(bytes.size() - data_at) + " of " + std::to_string(need) + " bytes)");
  if (bytes.size() - data_at > need) bad(name, "trailing bytes after the data");

  out.data.resize(rows, cols);
  for (long long k = 0; k < rows * cols; ++k) {
    const char* p = bytes.data() + data_at + std::size_t(k) * item;
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

NpyMatrix read_npy(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(path.string() + ": cannot open for reading");
  std::ostringstream s;
  s << in.rdbuf();
  return parse_npy(s.str(), path.string());
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
