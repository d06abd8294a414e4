// 2-D matrices in HDF5 files, as h5py writes them: a dataset of any float or
// integer type (read converted to double), stored row-major. A matrix argument
// is named "FILE.h5:DATASET" (the dataset path may omit its leading '/').
// Errors are UsageErrors whose one-line message names the file and dataset.
//
// Reading checks before it allocates: the file must be a regular file; the
// dataset must store what it declares (contiguous data inside the file; unfiltered
// chunks all allocated; no external or virtual storage) and fit the memory
// budget (core/limits.hpp). Every value must be exactly what the file holds:
// a 64-bit integer beyond 2^53 that double cannot represent, or a wider float
// that does not round-trip, is refused, as is a non-finite entry. The file is read in
// a child process: libhdf5 1.10 crashes on some malformed files (docs/robustness.md),
// and there that is a UsageError naming the file, not the end of qkvlab.
#pragma once

#include "core/atomic_file.hpp"
#include "core/types.hpp"

#include <optional>
#include <string>
#include <string_view>
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
// The same from a file's bytes in memory (the fuzz target's entry); `name` labels errors.
Hdf5Matrix read_hdf5_matrix_image(std::string_view image, const std::string& dataset, const std::string& name);

// Writes the named matrices as datasets of one new file (atomically: a
// temporary file, then rename), as float64 row-major.
void write_hdf5_matrices(const std::string& path, const std::vector<std::pair<std::string, MatD>>& matrices);
// The same staged into a set of files committed together (core/atomic_file.hpp).
void stage_hdf5_matrices(StagedFiles& files, const std::string& path,
                         const std::vector<std::pair<std::string, MatD>>& matrices);
// The bytes of such a file.
std::string hdf5_matrices_image(const std::vector<std::pair<std::string, MatD>>& matrices);

}  // namespace qkvlab::results
