// A matrix named on the command line: "FILE.npy" (core/npy.hpp) or "FILE.h5:DATASET"
// (results/hdf5_matrix.hpp), with the dtype it was stored in. Shared by
// `qkvlab absorb` and `qkvlab absorb fit`; malformed input is a UsageError naming the file.
#pragma once

#include "core/linalg.hpp"
#include "core/npy.hpp"
#include "results/hdf5_matrix.hpp"

#include <string>

namespace qkvlab::cli {

inline NpyMatrix read_matrix_argument(const std::string& argument) {
  if (const auto where = results::parse_hdf5_location(argument)) {
    const auto m = results::read_hdf5_matrix(*where);
    return {m.data, m.single_precision ? NpyDtype::f4 : NpyDtype::f8, false};
  }
  return read_npy(argument);
}

// The file a matrix argument is read from: FILE of FILE.h5:DATASET, else the argument.
inline std::string matrix_file(const std::string& argument) {
  const auto where = results::parse_hdf5_location(argument);
  return where ? where->file : argument;
}

// The unit roundoff of a pair's data, what absorb's decision is tolerant to: float's when either
// matrix was stored in float32, else double's.
inline double data_unit_roundoff(const NpyMatrix& a, const NpyMatrix& b) {
  return a.dtype == NpyDtype::f4 || b.dtype == NpyDtype::f4 ? unit_roundoff<float>() : unit_roundoff<double>();
}

}  // namespace qkvlab::cli
