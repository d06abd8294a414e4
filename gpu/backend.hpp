// The backend a model runs on, chosen at run time: `--device cpu` gives the
// CPU backend (engine/cpu_backend.hpp), `--device cuda` the CUDA backend
// (gpu/cuda_backend.hpp) when device_status() says a device can be used, and
// otherwise std::runtime_error, one line with device_status().description. No CUDA in
// this header.
#pragma once

#include <memory>

#include "engine/backend.hpp"

namespace qkvlab::gpu {

// threads: the CPU backend's threads (≤ 0: all cores); the CUDA backend's host side ignores it.
std::unique_ptr<engine::Backend<float>> make_backend(engine::Device device, int threads);

// The CUDA backend, or std::runtime_error naming why there is none (built
// without nvcc, no device). Defined in cuda_backend.cu, or device_none.cpp.
std::unique_ptr<engine::Backend<float>> make_cuda_backend();

}  // namespace qkvlab::gpu
