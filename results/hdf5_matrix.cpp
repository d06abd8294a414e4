#include "results/hdf5_matrix.hpp"

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/limits.hpp"
#include "results/hdf5_handle.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

namespace qkvlab::results {

using namespace hdf5;

namespace {

using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

std::string shape_text(hsize_t rows, hsize_t cols) { return std::to_string(rows) + "x" + std::to_string(cols); }

// True when |v| has at most 53 significant bits: double holds it exactly.
bool exact_in_double(std::uint64_t magnitude) {
  if (magnitude == 0) return true;
  return (magnitude >> std::countr_zero(magnitude)) < (std::uint64_t(1) << 53);
}

std::string entry_text(std::size_t k, hsize_t cols) {
  return "(" + std::to_string(k / cols) + ", " + std::to_string(k % cols) + ")";
}

// Whether every value of a float type converts to double exactly: a mantissa of
// at most 52 stored bits and an exponent range inside double's.
bool float_type_fits_double(hid_t type) {
  std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  if (H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0) return false;
  const std::size_t ebias = H5Tget_ebias(type);
  if (msize > 52 || esize > 11 || esize == 0) return false;
  const double max_exponent = std::ldexp(1.0, int(esize)) - 2 - double(ebias);
  const double min_exponent = 1 - double(ebias) - double(msize);  // the smallest subnormal
  return max_exponent <= 1023 && min_exponent >= -1074;
}

// The dataset's values as double, row-major, each checked to be exactly what the file holds.
RowMajor read_values(hid_t dataset, hid_t type, H5T_class_t type_class, hsize_t rows, hsize_t cols) {
  const std::size_t count = std::size_t(rows * cols);
  RowMajor out(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
  if (count == 0) return out;
  if (type_class == H5T_INTEGER && H5Tget_size(type) > 4) {
    // 64-bit integers: double holds only those with at most 53 significant bits.
    if (H5Tget_size(type) > 8) throw std::runtime_error("integers wider than 64 bits are not read");
    const bool is_signed = H5Tget_sign(type) != H5T_SGN_NONE;
    std::vector<std::uint64_t> raw(count);
    check(H5Dread(dataset, is_signed ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()),
          "cannot read data");
    for (std::size_t k = 0; k < count; ++k) {
      const std::int64_t s = std::int64_t(raw[k]);
      const std::uint64_t magnitude = !is_signed ? raw[k] : s < 0 ? ~raw[k] + 1 : raw[k];
      if (!exact_in_double(magnitude))
        throw std::runtime_error("entry " + entry_text(k, cols) + " = " +
                                 (is_signed ? std::to_string(s) : std::to_string(raw[k])) +
                                 " is not exactly representable as a double");
      out.data()[k] = is_signed ? double(s) : double(raw[k]);
    }
    return out;
  }
  if (type_class == H5T_FLOAT && !float_type_fits_double(type)) {
    // Wider floats (long double, as numpy's float128 is on x86): each value must convert exactly.
    std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
    H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize);
    if (msize > std::size_t(std::numeric_limits<long double>::digits))
      throw std::runtime_error("a float type of " + std::to_string(msize) + "-bit mantissa is not read");
    std::vector<long double> raw(count);
    check(H5Dread(dataset, H5T_NATIVE_LDOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()), "cannot read data");
    for (std::size_t k = 0; k < count; ++k) {
      const double v = double(raw[k]);
      if (std::isfinite(raw[k]) && (long double)v != raw[k])
        throw std::runtime_error("entry " + entry_text(k, cols) + " is not exactly representable as a double");
      out.data()[k] = v;
    }
    return out;
  }
  check(H5Dread(dataset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), "cannot read data");
  return out;
}

// The declared size against what the file stores and the memory budget, before any allocation.
void check_storage(hid_t dataset, hid_t type, hsize_t rows, hsize_t cols, std::uint64_t file_size,
                   const std::string& name) {
  const unsigned __int128 count = static_cast<unsigned __int128>(rows) * cols;
  const unsigned __int128 declared = count * H5Tget_size(type);
  const std::string shape = shape_text(rows, cols);
  if (count == 0) return;
  Handle plist(H5Dget_create_plist(dataset), H5Pclose, "cannot read its storage properties");
  const H5D_layout_t layout = H5Pget_layout(plist.get());
  if (layout == H5D_VIRTUAL) throw std::runtime_error("a virtual dataset (its data lives in other files) is not read");
  if (H5Pget_external_count(plist.get()) > 0)
    throw std::runtime_error("data stored in external files is not read");
  H5D_space_status_t status = H5D_SPACE_STATUS_ERROR;
  check(H5Dget_space_status(dataset, &status), "cannot read its storage status");
  if (status == H5D_SPACE_STATUS_NOT_ALLOCATED)
    throw std::runtime_error("declares " + shape + " but stores no data");
  const unsigned __int128 stored = H5Dget_storage_size(dataset);
  if (stored > file_size)
    throw std::runtime_error("declares " + std::to_string(std::uint64_t(stored)) + " bytes of storage in a file of " +
                             std::to_string(file_size) + " bytes");
  const bool filtered = layout == H5D_CHUNKED && H5Pget_nfilters(plist.get()) > 0;
  if (!filtered && stored < declared)
    throw std::runtime_error("declares " + shape + " (" + format_bytes(double(declared)) + ") but stores " +
                             format_bytes(double(stored)));
  if (layout == H5D_CONTIGUOUS) {
    const haddr_t offset = H5Dget_offset(dataset);
    if (offset == HADDR_UNDEF || static_cast<unsigned __int128>(offset) + declared > file_size)
      throw std::runtime_error("declares " + shape + " beyond the end of the file");
  }
  // The row-major buffer and the matrix it is copied into.
  require_memory(name + " (a " + shape + " dataset)", 16.0 * double(count));
}

// The file's size; refuses what is not a regular file (a device, a FIFO, a directory).
std::uint64_t regular_file_size(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw std::runtime_error(std::string("cannot open file (") + std::strerror(errno) + ")");
  struct stat st {};
  const int r = ::fstat(fd, &st);
  ::close(fd);
  if (r != 0) throw std::runtime_error("cannot open file");
  if (!S_ISREG(st.st_mode)) throw std::runtime_error("not a regular file");
  return std::uint64_t(st.st_size);
}

Hdf5Matrix read_from(hid_t file, const std::string& dataset_path, std::uint64_t file_size, const std::string& name) {
  Handle dataset(H5Dopen2(file, dataset_path.c_str(), H5P_DEFAULT), H5Dclose, "no such dataset");
  Handle type(H5Dget_type(dataset.get()), H5Tclose, "cannot read its type");
  const H5T_class_t type_class = H5Tget_class(type.get());
  if (type_class != H5T_FLOAT && type_class != H5T_INTEGER) throw std::runtime_error("not a numeric dataset");
  Handle space(H5Dget_space(dataset.get()), H5Sclose, "cannot read its shape");
  if (H5Sget_simple_extent_ndims(space.get()) != 2) throw std::runtime_error("not a 2-D dataset");
  hsize_t dims[2];
  check(H5Sget_simple_extent_dims(space.get(), dims, nullptr), "cannot read its shape");
  if (dims[0] > hsize_t(INT32_MAX) || dims[1] > hsize_t(INT32_MAX))
    throw std::runtime_error("declares " + shape_text(dims[0], dims[1]) + " (too large)");
  check_storage(dataset.get(), type.get(), dims[0], dims[1], file_size, name);
  RowMajor rows = read_values(dataset.get(), type.get(), type_class, dims[0], dims[1]);
  for (Eigen::Index k = 0; k < rows.size(); ++k)
    if (!std::isfinite(rows.data()[k])) throw std::runtime_error("non-finite entry " + entry_text(std::size_t(k), dims[1]));
  return {MatD(std::move(rows)), type_class == H5T_FLOAT && H5Tget_size(type.get()) <= 4};
}

}  // namespace

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

namespace {

Hdf5Matrix read_in_this_process(const Hdf5Location& where, const std::string& name) {
  try {
    const QuietErrors quiet;
    const std::uint64_t size = regular_file_size(where.file);
    Handle file(H5Fopen(where.file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "cannot open file");
    return read_from(file.get(), where.dataset, size, name);
  } catch (const std::runtime_error& e) {
    if (dynamic_cast<const UsageError*>(&e)) throw;
    throw UsageError(name + ": " + e.what());
  }
}

// Writes all of `n` bytes to fd (core/atomic_file's write_all); false on failure.
bool put(int fd, const void* data, std::size_t n) {
  try {
    write_all(fd, std::string_view(static_cast<const char*>(data), n));
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

bool get(int fd, void* data, std::size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r, n -= std::size_t(r);
  }
  return true;
}

// The process's address space now, in bytes (/proc/self/statm's first field); 0 if unknown.
std::uint64_t address_space_bytes() {
  unsigned long long pages = 0;
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  const int n = std::fscanf(f, "%llu", &pages);
  std::fclose(f);
  return n == 1 ? pages * std::uint64_t(::sysconf(_SC_PAGESIZE)) : 0;
}

// Seconds the reading process may take: 30 s plus 1 s per 10 MB of file.
unsigned read_seconds(const std::string& path) {
  struct stat st {};
  const std::uint64_t size = ::stat(path.c_str(), &st) == 0 ? std::uint64_t(st.st_size) : 0;
  return unsigned(std::min<std::uint64_t>(30 + size / 10'000'000, 86'400));
}

// In the reading process: a crash is the signal's default action (not a handler inherited
// from a sanitizer or fuzzer), a hang ends at SIGALRM, and libhdf5's own allocations are
// bounded by the memory budget (an absurd size declared in the file fails as it should).
void bound_the_reading_process(unsigned seconds) {
  for (const int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGALRM}) std::signal(sig, SIG_DFL);
  if (const std::uint64_t now = address_space_bytes(); now > 0) {
    const rlim_t limit = rlim_t(now + memory_budget());
    struct rlimit current {};
    if (::getrlimit(RLIMIT_AS, &current) == 0 && (current.rlim_cur == RLIM_INFINITY || limit < current.rlim_cur)) {
      const struct rlimit bounded {limit, current.rlim_max};
      ::setrlimit(RLIMIT_AS, &bounded);
    }
  }
  ::alarm(seconds);
}

}  // namespace

// libhdf5 (1.10.8, Debian's) dereferences failed allocations, overflows buffers and
// runs for minutes on some malformed files (docs/robustness.md, found by fuzzing): the
// file is opened and read in a child process, bounded in time and memory, which sends
// the matrix or the error message back through a pipe, so that a crash or a hang in
// the library is a one-line error here, not the end of qkvlab.
Hdf5Matrix read_hdf5_matrix(const Hdf5Location& where) {
  const std::string name = where.file + ":" + where.dataset;
  const unsigned seconds = read_seconds(where.file);
  H5open();  // initialized once here, not in every reading process
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return read_in_this_process(where, name);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]), ::close(fds[1]);
    return read_in_this_process(where, name);
  }
  if (pid == 0) {  // the child: one message, then _exit (no destructors, no atexit handlers)
    ::close(fds[0]);
    bound_the_reading_process(seconds);
    int code = 0;
    try {
      const Hdf5Matrix m = read_in_this_process(where, name);
      const std::uint64_t header[3] = {0, std::uint64_t(m.data.rows()), std::uint64_t(m.data.cols())};
      const std::uint8_t f32 = m.single_precision ? 1 : 0;
      const RowMajor rows = m.data;
      code = put(fds[1], header, sizeof header) && put(fds[1], &f32, 1) &&
                     put(fds[1], rows.data(), sizeof(double) * std::size_t(rows.size()))
                 ? 0
                 : 1;
    } catch (const std::exception& e) {
      const std::string what = e.what();
      const std::uint64_t header[3] = {1, what.size(), 0};
      code = put(fds[1], header, sizeof header) && put(fds[1], what.data(), what.size()) ? 0 : 1;
    }
    ::_exit(code);
  }
  ::close(fds[1]);
  std::uint64_t header[3] = {2, 0, 0};
  std::optional<Hdf5Matrix> result;
  std::string error;
  if (get(fds[0], header, sizeof header)) {
    if (header[0] == 0) {
      std::uint8_t f32 = 0;
      RowMajor rows(static_cast<Eigen::Index>(header[1]), static_cast<Eigen::Index>(header[2]));
      if (get(fds[0], &f32, 1) && get(fds[0], rows.data(), sizeof(double) * std::size_t(rows.size())))
        result = Hdf5Matrix{MatD(std::move(rows)), f32 != 0};
    } else if (header[0] == 1 && header[1] < (1u << 20)) {
      error.resize(std::size_t(header[1]));
      if (!get(fds[0], error.data(), error.size())) error.clear();
    }
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (result) return *result;
  if (!error.empty()) throw UsageError(error);
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
    throw UsageError(name + ": the HDF5 library did not finish reading it in " + std::to_string(seconds) +
                     " s: a malformed file");
  if (WIFSIGNALED(status))
    throw UsageError(name + ": the HDF5 library crashed reading it (signal " + std::to_string(WTERMSIG(status)) +
                     "): a malformed file");
  throw UsageError(name + ": cannot read it (the reading process exited with status " +
                   std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")");
}

Hdf5Matrix read_hdf5_matrix_image(std::string_view image, const std::string& dataset, const std::string& name) {
  try {
    const QuietErrors quiet;
    Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "cannot create file access properties");
    check(H5Pset_fapl_core(fapl.get(), 1 << 16, 0), "cannot use the core driver");
    // HDF5 may keep the buffer; it is copied (the default callbacks), and the image is read-only.
    check(H5Pset_file_image(fapl.get(), const_cast<char*>(image.data()), image.size()), "cannot use the file image");
    static unsigned long counter = 0;  // each image its own name
    Handle file(H5Fopen(("qkvlab-image-" + std::to_string(++counter)).c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose,
                "cannot open file");
    return read_from(file.get(), dataset.empty() || dataset.front() != '/' ? "/" + dataset : dataset, image.size(), name);
  } catch (const std::runtime_error& e) {
    if (dynamic_cast<const UsageError*>(&e)) throw;
    throw UsageError(name + ": " + e.what());
  }
}

std::string hdf5_matrices_image(const std::vector<std::pair<std::string, MatD>>& matrices) {
  const QuietErrors quiet;
  MemoryFile file;
  for (const auto& [name, m] : matrices) {
    const RowMajor rows = m;
    const hsize_t dims[2] = {hsize_t(m.rows()), hsize_t(m.cols())};
    Handle space(H5Screate_simple(2, dims, nullptr), H5Sclose, "cannot create dataspace");
    const Handle dataset = create_dataset(file.get(), name, H5T_IEEE_F64LE, space.get(), "cannot create dataset " + name);
    check(H5Dwrite(dataset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()),
          "cannot write dataset " + name);
  }
  return file.image();
}

void stage_hdf5_matrices(StagedFiles& files, const std::string& path,
                         const std::vector<std::pair<std::string, MatD>>& matrices) {
  try {
    files.add_bytes(path, "HDF5", hdf5_matrices_image(matrices));
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (what.rfind("cannot write ", 0) == 0) throw;
    throw std::runtime_error("cannot write HDF5 file " + path + ": " + what);
  }
}

void write_hdf5_matrices(const std::string& path, const std::vector<std::pair<std::string, MatD>>& matrices) {
  StagedFiles files;
  stage_hdf5_matrices(files, path, matrices);
  files.commit();
}

}  // namespace qkvlab::results
