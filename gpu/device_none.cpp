// Built when nvcc is absent: no CUDA device can be used.
#include "gpu/backend.hpp"
#include "gpu/device.hpp"
#include "gpu/skip_mlp.hpp"

#include <stdexcept>

namespace qkvlab::gpu {

const DeviceStatus& device_status() {
  static const DeviceStatus status{false, "qkvlab was built without nvcc (no CUDA support)"};
  return status;
}

std::unique_ptr<engine::Backend<float>> make_cuda_backend() {
  throw std::runtime_error(device_status().description);
}

struct SkipMlpTrainer::Impl {};

SkipMlpTrainer::SkipMlpTrainer(const MatF&, const MatF&, const MatF&, const MatF&, const MatF&,
                               const SkipMlpOptions&) {
  throw std::runtime_error(device_status().description);
}
SkipMlpTrainer::~SkipMlpTrainer() = default;
float SkipMlpTrainer::step(const MatF&, float) { throw std::runtime_error(device_status().description); }
SkipMlpSums SkipMlpTrainer::evaluate(const MatF&) const { throw std::runtime_error(device_status().description); }
void SkipMlpTrainer::weights(MatF&, MatF&) const { throw std::runtime_error(device_status().description); }

}  // namespace qkvlab::gpu
