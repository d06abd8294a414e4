// libFuzzer target: the .npy reader, both entries. parse_npy reads bytes in memory;
// read_npy reads a file (here a memfd holding the same bytes) header first, checking
// the declared size against the file's size and the memory budget before it allocates.
// Both must agree: the same matrix, or both a UsageError. An accepted matrix must
// survive a round trip through npy_bytes bit for bit. Anything else (another
// exception, a disagreement, a sanitizer report, a leak) is a finding.
// Built and run by scripts/fuzz_readers.sh (docs/robustness.md).
#include "core/errors.hpp"
#include "core/npy.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>

namespace {

int memfd_with(const std::string& bytes) {
  const int fd = ::memfd_create("npy", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) std::abort();
    done += std::size_t(n);
  }
  return fd;
}

// The same shape and entries (a flat comparison: Eigen's == loops over the columns of
// an empty matrix, billions of them for a declared shape (0, 2^31 - 1)).
bool same(const qkvlab::MatD& a, const qkvlab::MatD& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() && std::equal(a.data(), a.data() + a.size(), b.data());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  std::optional<qkvlab::NpyMatrix> parsed, read;
  try {
    parsed = qkvlab::parse_npy(bytes, "fuzz");
  } catch (const qkvlab::UsageError&) {
  }
  const int fd = memfd_with(bytes);
  try {
    read = qkvlab::read_npy("/proc/self/fd/" + std::to_string(fd));
  } catch (const qkvlab::UsageError&) {
  }
  ::close(fd);
  if (parsed.has_value() != read.has_value()) std::abort();
  if (!parsed) return 0;
  if (!(same(parsed->data, read->data) && parsed->dtype == read->dtype)) std::abort();
  const qkvlab::NpyMatrix again =
      qkvlab::parse_npy(qkvlab::npy_bytes(parsed->data, parsed->dtype, parsed->fortran_order), "round trip");
  if (!same(again.data, parsed->data)) std::abort();
  return 0;
}
