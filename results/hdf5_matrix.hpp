// 2-D matrices in HDF5 files, as h5py writes them: a dataset of any float or
// integer type (read converted to double), stored row-major. A matrix argument
// is named "FILE.h5:DATASET" (the dataset path may omit its leading '/').
// Errors are UsageErrors whose one-line message names the file and dataset.
#pragma once

#include "core/types.hpp"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace qkvlab::results {

struct Hdf5Location {
  std::string file, dataset;
};

// Splits "FILE.h5:DATASET"; absent when the argument names no HDF5 dataset.
std::optional<Hdf5Location> parse_hdf5_location(const std::string& argument);

struct Hdf5Matrix {
  MatD data;
  bool single_precision = false;  // stored as a 4-byte float (or narrower)
};

Hdf5Matrix read_hdf5_matrix(const Hdf5Location& where);

// Writes the named matrices as datasets of one new file (atomically: a
// temporary file, then rename), as float64 row-major.
void write_hdf5_matrices(const std::string& path, const std::vector<std::pair<std::string, MatD>>& matrices);

}  // namespace qkvlab::results
