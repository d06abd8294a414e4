#include "results/hdf5_matrix.hpp"

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "results/hdf5_handle.hpp"

#include <cmath>

namespace qkvlab::results {

using namespace hdf5;

std::optional<Hdf5Location> parse_hdf5_location(const std::string& argument) {
  const auto colon = argument.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  const std::string file = argument.substr(0, colon);
  if (!(file.ends_with(".h5") || file.ends_with(".hdf5"))) return std::nullopt;
  std::string dataset = argument.substr(colon + 1);
  if (dataset.empty()) throw UsageError(argument + ": no dataset named after ':'");
  if (dataset.front() != '/') dataset = "/" + dataset;
  return Hdf5Location{file, dataset};
}

Hdf5Matrix read_hdf5_matrix(const Hdf5Location& where) {
  const std::string name = where.file + ":" + where.dataset;
  try {
    const QuietErrors quiet;
    Handle file(H5Fopen(where.file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "cannot open file");
    Handle dataset(H5Dopen2(file.get(), where.dataset.c_str(), H5P_DEFAULT), H5Dclose, "no such dataset");
    Handle type(H5Dget_type(dataset.get()), H5Tclose, "cannot read its type");
    const H5T_class_t type_class = H5Tget_class(type.get());
    if (type_class != H5T_FLOAT && type_class != H5T_INTEGER)
      throw std::runtime_error("not a numeric dataset");
    Handle space(H5Dget_space(dataset.get()), H5Sclose, "cannot read its shape");
    if (H5Sget_simple_extent_ndims(space.get()) != 2) throw std::runtime_error("not a 2-D dataset");
    hsize_t dims[2];
    H5Sget_simple_extent_dims(space.get(), dims, nullptr);
    // HDF5 stores row-major: read into a row-major buffer, then copy.
    Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rows(dims[0], dims[1]);
    check(H5Dread(dataset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()), "cannot read data");
    if (!rows.allFinite()) throw std::runtime_error("non-finite entry");
    return {rows, type_class == H5T_FLOAT && H5Tget_size(type.get()) <= 4};
  } catch (const std::runtime_error& e) {
    throw UsageError(name + ": " + e.what());
  }
}

void write_hdf5_matrices(const std::string& path, const std::vector<std::pair<std::string, MatD>>& matrices) {
  write_atomically(path, "HDF5", [&](const std::filesystem::path& temporary) {
    const QuietErrors quiet;
    Handle file(H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose,
                "cannot create file");
    for (const auto& [name, m] : matrices) {
      const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rows = m;
      const hsize_t dims[2] = {hsize_t(m.rows()), hsize_t(m.cols())};
      Handle space(H5Screate_simple(2, dims, nullptr), H5Sclose, "cannot create dataspace");
      Handle dataset(H5Dcreate2(file.get(), name.c_str(), H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                                H5P_DEFAULT),
                     H5Dclose, "cannot create dataset " + name);
      check(H5Dwrite(dataset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()),
            "cannot write dataset " + name);
    }
    file.close("cannot close file");
  });
}

}  // namespace qkvlab::results
