// --device cpu|cuda for the commands that can run on a GPU. Asking for cuda
// where no CUDA device can be used is a usage error naming the reason.
#pragma once

#include "core/errors.hpp"
#include "gpu/device.hpp"

#include <CLI/CLI.hpp>

#include <string>

namespace qkvlab::cli {

enum class Device { cpu, cuda };

inline CLI::Option* add_device_option(CLI::App* cmd, Device& device) {
  return cmd
      ->add_option_function<std::string>(
          "--device", [&device](const std::string& name) { device = name == "cuda" ? Device::cuda : Device::cpu; },
          "Where to compute: cpu, or cuda (a CUDA device through cuBLAS)")
      ->transform(CLI::IsMember({"cpu", "cuda"}, CLI::ignore_case))  // CUDA -> cuda
      ->option_text("cpu|cuda [cpu]");
}

// Throws UsageError when cuda is asked for and none can be used.
inline void require_device(Device device) {
  if (device == Device::cuda && !gpu::device_status().available)
    throw UsageError("--device cuda: no CUDA device can be used (" + gpu::device_status().description + ")");
}

}  // namespace qkvlab::cli
