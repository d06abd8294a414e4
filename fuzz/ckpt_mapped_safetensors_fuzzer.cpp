// libFuzzer target: the memory-mapped reader (engine::MappedSafeTensors) on a
// real file descriptor: each input is written to a memfd and mapped through
// /proc/self/fd, so the mmap path (empty files, sizes, the header checked
// against the file's size) runs as the loader runs it. Built and run by
// scripts/fuzz_checkpoints.sh.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "engine/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const int fd = memfd_create("qkvlab-fuzz", 0);
  if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != ssize_t(size)) __builtin_trap();
  try {
    const qkvlab::engine::MappedSafeTensors file("/proc/self/fd/" + std::to_string(fd));
    float x = 0;
    for (const auto& [name, e] : file.view().tensors)
      if (qkvlab::engine::is_float(e.dtype) && e.elements() > 0)  // the last element of each: the far end of the mapping
        qkvlab::engine::decode_floats(e.dtype, file.view().bytes(e).data() + (e.elements() - 1) * qkvlab::engine::dtype_size(e.dtype), 1, &x);
  } catch (const std::runtime_error&) {
  }
  return 0;
}
