// gpu/'s registration of the CUDA backend with engine/make_backend.hpp, run at static
// initialization. Compiled into every target that links qkvlab_gpu (an interface source,
// gpu/CMakeLists.txt), so that it is part of the program even where nothing names gpu/.
#include "engine/make_backend.hpp"
#include "gpu/backend.hpp"
#include "gpu/device.hpp"

namespace {

const bool qkvlab_cuda_registered = qkvlab::engine::register_cuda_source(
    {[] { return qkvlab::gpu::device_status().available; },
     []() -> const std::string& { return qkvlab::gpu::device_status().description; }, &qkvlab::gpu::make_cuda_backend});

}  // namespace
