// libFuzzer target: the HDF5 matrix reader (results::read_hdf5_matrix_image, the
// same checks as read_hdf5_matrix on a file: the dataset's declared size against
// what the file stores and the memory budget before allocating, integers double
// cannot represent refused, non-finite entries refused), on an HDF5 file image,
// dataset "W". Any input must yield a matrix or a UsageError; an accepted matrix
// must be finite and of the declared shape. Anything else (another exception, a
// sanitizer report in qkvlab's code, a leak, a crash in libhdf5) is a finding.
// Built and run by scripts/fuzz_readers.sh (docs/robustness.md).
#include "core/errors.hpp"
#include "results/hdf5_matrix.hpp"

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto m = qkvlab::results::read_hdf5_matrix_image(
        std::string_view(reinterpret_cast<const char*>(data), size), "W", "fuzz");
    if (!m.data.allFinite()) std::abort();
  } catch (const qkvlab::UsageError&) {
  }
  return 0;
}
