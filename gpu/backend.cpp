#include "gpu/backend.hpp"

#include "engine/cpu_backend.hpp"

namespace qkvlab::gpu {

std::unique_ptr<engine::Backend<float>> make_backend(engine::Device device, int threads) {
  if (device == engine::Device::cuda) return make_cuda_backend();
  return std::make_unique<engine::CpuBackend<float>>(threads);
}

}  // namespace qkvlab::gpu
