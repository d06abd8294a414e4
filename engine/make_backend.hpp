// The backend a model runs on, chosen at run time (`--device cpu|cuda`), with no gpu/ header:
// Device::cpu gives the CPU backend (engine/cpu_backend.hpp); Device::cuda the CUDA backend of the
// source gpu/ registers when it is linked into the program (gpu/backend.cpp, at static
// initialization; built without nvcc, its source says so). Commands include this header, so a
// command that runs only on the CPU includes nothing of gpu/.
#pragma once

#include <memory>
#include <string>

#include "engine/backend.hpp"

namespace qkvlab::engine {

// Where CUDA backends come from: what gpu/ registers.
struct CudaSource {
  bool (*available)();                          // whether a CUDA device can be used
  const std::string& (*description)();          // the device in words, or why none can be used (one line)
  std::unique_ptr<Backend<float>> (*make)();    // the backend (std::runtime_error when none can be used)
};

// gpu/'s registration; returns true (so that a static initializer can call it).
bool register_cuda_source(const CudaSource& source);

// Whether --device cuda can be used, and the device in words or why not. Without a registered
// source: not available, "this program was built without gpu/".
bool cuda_available();
std::string cuda_description();

// threads: the CPU backend's threads (≤ 0: all cores); the CUDA backend's host side ignores it.
// cuda where none can be used: std::runtime_error, one line with the reason.
std::unique_ptr<Backend<float>> make_backend(Device device, int threads);

}  // namespace qkvlab::engine
