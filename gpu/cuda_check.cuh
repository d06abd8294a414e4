// CUDA-only helper for gpu/*.cu: every CUDA runtime return code is checked,
// and a failure becomes std::runtime_error naming CUDA's description
// (cudaGetErrorString), the call, the file and line. (cuBLAS statuses: ops.cu.)
// Not included by any C++ header.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace qkvlab::gpu::detail {

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("CUDA error: ") + cudaGetErrorString(status) + " (" + call + " at " +
                             file + ":" + std::to_string(line) + ")");
}

}  // namespace qkvlab::gpu::detail

#define QKVLAB_CUDA_CHECK(call) ::qkvlab::gpu::detail::check_cuda((call), #call, __FILE__, __LINE__)
// After a kernel launch: launch errors (bad configuration) surface here.
#define QKVLAB_KERNEL_CHECK() QKVLAB_CUDA_CHECK(cudaGetLastError())
