#include "engine/make_backend.hpp"

#include <stdexcept>

#include "engine/cpu_backend.hpp"

namespace qkvlab::engine {

namespace {

CudaSource& cuda_source() {
  static CudaSource source{};
  return source;
}

const std::string kNoGpu = "this program was built without gpu/";

}  // namespace

bool register_cuda_source(const CudaSource& source) {
  cuda_source() = source;
  return true;
}

bool cuda_available() { return cuda_source().available && cuda_source().available(); }

std::string cuda_description() { return cuda_source().description ? cuda_source().description() : kNoGpu; }

std::unique_ptr<Backend<float>> make_backend(Device device, int threads) {
  if (device == Device::cpu) return std::make_unique<CpuBackend<float>>(threads);
  if (!cuda_source().make) throw std::runtime_error("no CUDA device can be used (" + kNoGpu + ")");
  return cuda_source().make();
}

}  // namespace qkvlab::engine
