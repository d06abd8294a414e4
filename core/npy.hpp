// NumPy .npy files of 2-D float matrices (format versions 1.0 and 2.0): dtype
// '<f8' or '<f4', C or Fortran order. Anything else — bad magic, another version,
// a truncated header or data, trailing bytes, another dtype, not 2-D, a non-finite
// entry — is a UsageError whose one-line message starts with the file's name.
// Writing is atomic (core/atomic_file.hpp): a temporary file beside the target, then rename.
#pragma once

#include "core/types.hpp"

#include <filesystem>
#include <string>

namespace qkvlab {

enum class NpyDtype { f8, f4 };

struct NpyMatrix {
  MatD data;  // f4 entries converted exactly to double
  NpyDtype dtype = NpyDtype::f8;
  bool fortran_order = false;
};

NpyMatrix read_npy(const std::filesystem::path& path);
// Parses the bytes of an .npy file; `name` is used in error messages.
NpyMatrix parse_npy(const std::string& bytes, const std::string& name);

// The bytes of an .npy file (version 1.0; the header padded to a multiple of 64).
// With f4 the entries are rounded to float.
std::string npy_bytes(const MatD& m, NpyDtype dtype = NpyDtype::f8, bool fortran_order = false);
void write_npy(const std::filesystem::path& path, const MatD& m, NpyDtype dtype = NpyDtype::f8,
               bool fortran_order = false);

}  // namespace qkvlab
