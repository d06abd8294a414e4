// Buffer<U>: an owning array of U in a backend's memory (host memory for the
// CPU backend, device memory for CUDA), zero-filled on allocation, released
// with its owner. Moves, never copies. C++17 (CUDA sources include it).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <utility>
#include <vector>

namespace qkvlab::engine {

// The memory half of Backend<T> (backend.hpp), which every backend implements.
class Memory {
 public:
  virtual ~Memory() = default;
  virtual void* allocate(std::size_t bytes) = 0;  // zero-filled
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* host, std::size_t bytes) = 0;
  virtual void download(void* host, const void* src, std::size_t bytes) = 0;
};

template <class U>
class Buffer {
 public:
  Buffer() = default;
  Buffer(Memory& memory, std::size_t count)
      : memory_(&memory), data_(count ? static_cast<U*>(memory.allocate(count * sizeof(U))) : nullptr), size_(count) {}
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    Buffer(std::move(o)).swap(*this);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (data_) memory_->release(data_);
  }

  U* data() { return data_; }
  const U* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // Copies `count` values from host memory to entries offset … offset + count − 1, or back.
  void upload(const U* host, std::size_t count, std::size_t offset = 0) {
    check(offset, count);
    if (count) memory_->upload(data_ + offset, host, count * sizeof(U));
  }
  void download(U* host, std::size_t count, std::size_t offset = 0) const {
    check(offset, count);
    if (count) memory_->download(host, data_ + offset, count * sizeof(U));
  }
  void upload(const std::vector<U>& host) { upload(host.data(), host.size()); }
  std::vector<U> to_host() const {
    std::vector<U> host(size_);
    download(host.data(), size_);
    return host;
  }

 private:
  void check(std::size_t offset, std::size_t count) const {
    if (offset > size_ || count > size_ - offset) throw std::out_of_range("Buffer: transfer outside the buffer");
  }
  void swap(Buffer& o) noexcept {
    std::swap(memory_, o.memory_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
  }

  Memory* memory_ = nullptr;
  U* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace qkvlab::engine
