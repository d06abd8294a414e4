// The CUDA device: whether one can be used (device_status), device memory for
// DeviceBuffer, and event timing. Device 0 is the one used.
#include "gpu/cuda_check.cuh"
#include "gpu/device.hpp"
#include "gpu/device_buffer.hpp"
#include "gpu/timer.hpp"

#include <cmath>
#include <cstdio>
#include <map>

namespace qkvlab::gpu {

namespace {

__global__ void probe_kernel(int* flag) { *flag = 1; }

// A device counts as usable when it is found and this build's kernels run on
// it: a one-thread kernel is launched, so a missing driver, an unsupported
// architecture ("no kernel image is available") or a busy device show here.
DeviceStatus query_device() {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess)
    return {false, cudaGetErrorString(e)};
  if (count == 0) return {false, "the CUDA driver reports no device"};
  cudaDeviceProp p{};
  if (cudaError_t e = cudaGetDeviceProperties(&p, 0); e != cudaSuccess)
    return {false, std::string("CUDA device 0: ") + cudaGetErrorString(e)};
  char description[512];
  std::snprintf(description, sizeof description, "%s, %.1f GiB, compute %d.%d", p.name,
                double(p.totalGlobalMem) / double(1ull << 30), p.major, p.minor);
  int* flag = nullptr;
  cudaError_t e = cudaSetDevice(0);
  if (e == cudaSuccess) e = cudaMalloc(&flag, sizeof(int));
  if (e == cudaSuccess) {
    probe_kernel<<<1, 1>>>(flag);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    cudaFree(flag);
  }
  if (e != cudaSuccess) return {false, std::string(description) + ": unusable: " + cudaGetErrorString(e)};
  return {true, description};
}

void require_device() {
  if (!device_status().available) throw std::runtime_error(device_status().description);
}

}  // namespace

const DeviceStatus& device_status() {
  static const DeviceStatus status = query_device();  // thread-safe initialization
  return status;
}

void synchronize() {
  require_device();
  QKVLAB_CUDA_CHECK(cudaDeviceSynchronize());
}

namespace detail {

void* device_allocate(std::size_t bytes) {
  require_device();
  if (bytes == 0) return nullptr;
  void* pointer = nullptr;
  QKVLAB_CUDA_CHECK(cudaMalloc(&pointer, bytes));
  return pointer;
}

void device_free(void* pointer) noexcept {
  if (pointer) cudaFree(pointer);  // nothing useful to do with an error in a destructor
}

void copy_to_device(void* device, const void* host, std::size_t bytes) {
  if (bytes) QKVLAB_CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* host, const void* device, std::size_t bytes) {
  if (bytes) QKVLAB_CUDA_CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
}

void copy_on_device(void* to, const void* from, std::size_t bytes) {
  if (bytes) QKVLAB_CUDA_CHECK(cudaMemcpy(to, from, bytes, cudaMemcpyDeviceToDevice));
}

void set_zero(void* device, std::size_t bytes) {
  if (bytes) QKVLAB_CUDA_CHECK(cudaMemset(device, 0, bytes));
}

void require_size(std::size_t capacity, std::size_t count, const char* what) {
  if (count > capacity)
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(count) + " values for a buffer of " +
                                std::to_string(capacity));
}

}  // namespace detail

struct PhaseTimer::Impl {
  std::vector<cudaEvent_t> events;  // events[0] from start(), events[i] ends phase i-1
  std::vector<std::string> names;

  void clear() {
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    events.clear();
    names.clear();
  }
  void record() {
    cudaEvent_t e;
    QKVLAB_CUDA_CHECK(cudaEventCreate(&e));
    events.push_back(e);
    QKVLAB_CUDA_CHECK(cudaEventRecord(e));
  }
};

PhaseTimer::PhaseTimer() : impl_(std::make_unique<Impl>()) { require_device(); }
PhaseTimer::~PhaseTimer() { impl_->clear(); }

void PhaseTimer::start() {
  impl_->clear();
  impl_->record();
}

void PhaseTimer::mark(const std::string& phase) {
  if (impl_->events.empty()) throw std::logic_error("PhaseTimer::mark before start");
  impl_->record();
  impl_->names.push_back(phase);
}

std::vector<std::pair<std::string, double>> PhaseTimer::phases() const {
  std::vector<std::pair<std::string, double>> result;
  std::map<std::string, std::size_t> index;
  if (impl_->events.empty()) return result;
  QKVLAB_CUDA_CHECK(cudaEventSynchronize(impl_->events.back()));
  for (std::size_t i = 0; i < impl_->names.size(); ++i) {
    float ms = 0;
    QKVLAB_CUDA_CHECK(cudaEventElapsedTime(&ms, impl_->events[i], impl_->events[i + 1]));
    auto [it, inserted] = index.try_emplace(impl_->names[i], result.size());
    if (inserted) result.emplace_back(impl_->names[i], 0.0);
    result[it->second].second += ms;
  }
  return result;
}

double PhaseTimer::total_ms() const {
  double total = 0;
  for (const auto& [phase, ms] : phases()) total += ms;
  return total;
}

}  // namespace qkvlab::gpu

