// The process's peak resident memory so far (getrusage's ru_maxrss; Linux reports KiB).
#pragma once

#include <sys/resource.h>

#include <cstdint>

namespace qkvlab {

inline std::uint64_t peak_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return std::uint64_t(usage.ru_maxrss) * 1024;
}

}  // namespace qkvlab
