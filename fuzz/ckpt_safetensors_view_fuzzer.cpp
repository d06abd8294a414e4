// libFuzzer target: the in-place safetensors reader under Hugging Face
// directories (engine::view_safetensors), and the float decoding the loader
// does on every F64/F32/F16/BF16 tensor it finds. Built and run by
// scripts/fuzz_checkpoints.sh.
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "engine/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto view = qkvlab::engine::view_safetensors({data, size}, "fuzz");
    std::vector<float> out;
    for (const auto& [name, e] : view.tensors)
      if (qkvlab::engine::is_float(e.dtype)) {
        out.resize(e.elements());
        qkvlab::engine::decode_floats(e.dtype, view.bytes(e).data(), out.size(), out.data());
      }
  } catch (const std::runtime_error&) {
  }
  return 0;
}
