// --device cpu|cuda. Asking for cuda where no CUDA device can be used is a
// usage error naming the reason; so is asking for it of a command that has no
// GPU path yet (it never computes on the CPU in cuda's name).
#pragma once

#include "core/errors.hpp"
#include "engine/kernel_types.hpp"
#include "engine/make_backend.hpp"

#include <CLI/CLI.hpp>

#include <string>

namespace qkvlab::cli {

using Device = engine::Device;

// gpu_path: whether the command has GPU code behind --device cuda.
inline CLI::Option* add_device_option(CLI::App* cmd, Device& device, bool gpu_path = true) {
  return cmd
      ->add_option_function<std::string>(
          "--device", [&device](const std::string& name) { device = name == "cuda" ? Device::cuda : Device::cpu; },
          gpu_path ? "Where to compute: cpu, or cuda (a CUDA device through cuBLAS)"
                   : "Where to compute: cpu (cuda is refused: this command has no GPU path yet)")
      ->transform(CLI::IsMember({"cpu", "cuda"}, CLI::ignore_case))  // CUDA -> cuda
      ->option_text("cpu|cuda [cpu]");
}

// Throws UsageError when cuda is asked for of a command with no GPU path
// (gpu_path false), or where no CUDA device can be used.
inline void require_device(Device device, bool gpu_path = true) {
  if (device != Device::cuda) return;
  if (!gpu_path) throw UsageError("--device cuda: this command has no GPU path yet; run it with --device cpu");
  if (!engine::cuda_available())
    throw UsageError("--device cuda: no CUDA device can be used (" + engine::cuda_description() + ")");
}

}  // namespace qkvlab::cli
