// A matrix named on the command line: "FILE.npy" (core/npy.hpp) or "FILE.h5:DATASET"
// (results/hdf5_matrix.hpp), with the dtype it was stored in. Shared by
// `qkvlab absorb` and `qkvlab absorb fit`; malformed input is a UsageError naming the file.
#pragma once

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

}  // namespace qkvlab::cli
