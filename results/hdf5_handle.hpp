// HDF5 C API in RAII form, shared by the HDF5 writers and readers of results/:
// every handle closes itself, every failing call throws std::runtime_error
// with HDF5's own innermost message, and QuietErrors silences HDF5's printing.
// Internal to results/ (not installed, not included elsewhere).
#pragma once

#include <hdf5.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace qkvlab::results::hdf5 {

// The innermost entry of HDF5's error stack says what actually went wrong.
inline herr_t keep_innermost(unsigned n, const H5E_error2_t* error, void* data) {
  if (n == 0 && error->desc) *static_cast<std::string*>(data) = error->desc;
  return 0;
}

[[noreturn]] inline void fail(const std::string& what) {
  std::string detail;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, &detail);
  throw std::runtime_error(detail.empty() ? what : what + " (" + detail + ")");
}

inline void check(herr_t status, const std::string& what) {
  if (status < 0) fail(what);
}

class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle(hid_t id, Closer closer, const std::string& what) : id_(id), closer_(closer) {
    if (id_ < 0) fail(what);
  }
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, -1)), closer_(other.closer_) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle& operator=(Handle&&) = delete;
  ~Handle() {
    if (id_ >= 0) closer_(id_);
  }
  hid_t get() const { return id_; }
  // Closes now and reports failure (for the file, whose close flushes).
  void close(const std::string& what) { check(closer_(std::exchange(id_, -1)), what); }

 private:
  hid_t id_;
  Closer closer_;
};

// Silences HDF5's automatic error printing for the lifetime of the guard.
class QuietErrors {
 public:
  QuietErrors() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;
  ~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

}  // namespace qkvlab::results::hdf5
