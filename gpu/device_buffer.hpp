// DeviceBuffer<T>: an owning array of T in CUDA device memory (T = float or
// double), freed on destruction, movable, not copyable. No CUDA in this header.
//
// Layout convention of everything in gpu/: a matrix on the device is stored
// column-major and packed (leading dimension = number of rows), exactly as
// Eigen's default Mat<S> stores it, so a host matrix M goes up with
// buf.upload(M.data(), M.size()) and comes back with buf.download(M.data(), M.size()).
// Rows are tokens or samples, columns features (the row-vector convention).
//
// Allocation throws std::runtime_error with device_status().description when
// no CUDA device can be used, and with CUDA's error string when it fails.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

namespace qkvlab::gpu {

namespace detail {
void* device_allocate(std::size_t bytes);
void device_free(void* pointer) noexcept;
void copy_to_device(void* device, const void* host, std::size_t bytes);
void copy_to_host(void* host, const void* device, std::size_t bytes);
void copy_on_device(void* to, const void* from, std::size_t bytes);
void set_zero(void* device, std::size_t bytes);
void require_size(std::size_t capacity, std::size_t count, const char* what);  // count ≤ capacity
}  // namespace detail

template <class T>
class DeviceBuffer {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "DeviceBuffer holds float or double");

 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t size)
      : data_(static_cast<T*>(detail::device_allocate(size * sizeof(T)))), size_(size) {}
  ~DeviceBuffer() { detail::device_free(data_); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }

  // Copy `count` ≤ size() values to or from the start of the buffer.
  void upload(const T* host, std::size_t count) {
    detail::require_size(size_, count, "DeviceBuffer::upload");
    detail::copy_to_device(data_, host, count * sizeof(T));
  }
  void download(T* host, std::size_t count) const {
    detail::require_size(size_, count, "DeviceBuffer::download");
    detail::copy_to_host(host, data_, count * sizeof(T));
  }
  void zero() { detail::set_zero(data_, size_ * sizeof(T)); }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace qkvlab::gpu
