// Built when nvcc is absent: no CUDA device can be used, and the CUDA backend
// is refused with that reason.
#include "gpu/backend.hpp"
#include "gpu/device.hpp"

#include <stdexcept>

namespace qkvlab::gpu {

const DeviceStatus& device_status() {
  static const DeviceStatus status{false, "qkvlab was built without nvcc (no CUDA support)"};
  return status;
}

std::unique_ptr<engine::Backend<float>> make_cuda_backend() {
  throw std::runtime_error("no CUDA device can be used (" + device_status().description + ")");
}

}  // namespace qkvlab::gpu
