// libFuzzer target: the toolkit's own safetensors reader (engine::parse_safetensors),
// which copies every tensor. Any input must parse or throw std::runtime_error;
// anything else (another exception, a sanitizer report, a leak) is a finding.
// Built and run by scripts/fuzz_checkpoints.sh.
#include <cstdint>
#include <stdexcept>

#include "engine/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto file = qkvlab::engine::parse_safetensors({data, size}, "fuzz");
    (void)file;
  } catch (const std::runtime_error&) {
  }
  return 0;
}
