// libFuzzer target: config.json (lm::parse_hf_config), then what the loader
// derives from an accepted configuration: the plan, the parameter layout and
// the Hugging Face tensor table (lm/hf.hpp). Built and run by
// scripts/fuzz_checkpoints.sh.
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "lm/hf.hpp"
#include "lm/hf_config.hpp"
#include "lm/parameters.hpp"
#include "lm/plan.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto hf = qkvlab::lm::parse_hf_config(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    const auto layout = qkvlab::lm::parameter_layout(hf.config, qkvlab::lm::make_plan(hf.config));
    const auto table = qkvlab::lm::hf_tensors(hf.config);
    std::size_t parts = 0;
    for (const auto& t : table) parts += t.parts.size();
    if (parts != layout.specs().size()) __builtin_trap();  // the table covers the layout exactly
  } catch (const std::runtime_error&) {
  }
  return 0;
}
