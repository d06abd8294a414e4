// libFuzzer target: model.safetensors.index.json (lm::parse_safetensors_index).
// Built and run by scripts/fuzz_checkpoints.sh.
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "lm/hf_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto map = qkvlab::lm::parse_safetensors_index(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    for (const auto& [name, file] : map)
      if (file.find('/') != std::string::npos || file == "..") __builtin_trap();  // a name that leaves the directory
  } catch (const std::runtime_error&) {
  }
  return 0;
}
