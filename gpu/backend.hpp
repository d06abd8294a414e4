// The CUDA backend for engine/make_backend.hpp, which commands use: gpu/backend.cpp registers
// make_cuda_backend there. No CUDA in this header.
#pragma once

#include <memory>

#include "engine/backend.hpp"

namespace qkvlab::gpu {

// The CUDA backend, or std::runtime_error naming why there is none (built
// without nvcc, no device). Defined in cuda_backend.cu, or device_none.cpp.
std::unique_ptr<engine::Backend<float>> make_cuda_backend();

}  // namespace qkvlab::gpu
