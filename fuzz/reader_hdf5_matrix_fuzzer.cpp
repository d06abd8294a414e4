// libFuzzer target: the HDF5 matrix reader as qkvlab runs it (results::read_hdf5_matrix
// on a file, here a memfd holding the bytes, dataset "/W"): libhdf5 opens and reads the
// file in a child process bounded in time and memory, which checks the dataset's declared
// size against what the file stores and the memory budget before allocating, refuses
// integers double cannot represent and non-finite entries, and sends back the matrix or
// a one-line message. Any input must yield a finite matrix or a one-line UsageError in
// this process; anything else (another exception, a sanitizer report or a leak here) is
// a finding. A crash or hang of libhdf5 in the child is the UsageError it should be (the
// child's own sanitizer reports are counted apart by scripts/fuzz_readers.sh).
// The child's coverage does not reach libFuzzer: the corpus grown by earlier in-process
// runs of read_hdf5_matrix_image is the seed set (docs/robustness.md).
#include "core/errors.hpp"
#include "results/hdf5_matrix.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const int fd = ::memfd_create("h5", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  for (std::size_t done = 0; done < size;) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) std::abort();
    done += std::size_t(n);
  }
  try {
    const auto m = qkvlab::results::read_hdf5_matrix({"/proc/self/fd/" + std::to_string(fd), "/W"});
    if (!std::all_of(m.data.data(), m.data.data() + m.data.size(), [](double v) { return std::isfinite(v); }))
      std::abort();
  } catch (const qkvlab::UsageError& e) {
    if (std::string(e.what()).find('\n') != std::string::npos) std::abort();
  }
  ::close(fd);
  return 0;
}
