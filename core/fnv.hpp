// FNV-1a, 64 bits: a checksum that tells files and token streams apart (not a
// cryptographic hash). Each byte in turn: h = (h XOR byte) * 1099511628211,
// from 14695981039346656037.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace qkvlab {

inline constexpr std::uint64_t kFnvOffset = 14695981039346656037ull;

inline std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t h = kFnvOffset) {
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The checksum of a file's bytes and its size; std::runtime_error naming the file when it cannot be read.
struct FileSum {
  std::uint64_t bytes = 0, fnv1a64 = 0;
};
inline FileSum file_sum(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open for reading");
  FileSum sum{0, kFnvOffset};
  std::string chunk(1 << 20, '\0');
  while (in) {
    in.read(chunk.data(), std::streamsize(chunk.size()));
    const auto n = std::size_t(in.gcount());
    sum.fnv1a64 = fnv1a64(std::string_view(chunk.data(), n), sum.fnv1a64);
    sum.bytes += n;
  }
  if (in.bad()) throw std::runtime_error(path.string() + ": read error");
  return sum;
}

// 16 lower-case hexadecimal digits.
inline std::string hex64(std::uint64_t x) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(x));
  return text;
}

}  // namespace qkvlab
