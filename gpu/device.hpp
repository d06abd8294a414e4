// Whether a CUDA device can be used, decided at run time. This header has no
// CUDA in it, so CPU-only code may include it; when qkvlab is built without
// nvcc, device_status() says so.
#pragma once

#include <string>

namespace qkvlab::gpu {

struct DeviceStatus {
  bool available = false;
  // Available: the device in words ("NVIDIA H200, 139.8 GiB, compute 9.0").
  // Not available: why, in one line ("built without nvcc", or CUDA's error).
  std::string description;
};

// Queried once and cached; safe to call from any thread.
const DeviceStatus& device_status();

}  // namespace qkvlab::gpu
