// HDF5 C API in RAII form, shared by the HDF5 writers and readers of results/:
// every handle closes itself, every failing call throws std::runtime_error
// with HDF5's own innermost message, and QuietErrors silences HDF5's printing.
// Internal to results/ (not installed, not included elsewhere).
#pragma once

#include <hdf5.h>

#include "core/json_text.hpp"

#include <cctype>
#include <stdexcept>
#include <string>
#include <utility>

namespace qkvlab::results::hdf5 {

// HDF5's text as one line without addresses: its descriptions may hold newlines
// and pointers ("... addr = 0x7ffd..."), neither of which belongs in a message.
inline std::string one_line(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '0' && i + 1 < text.size() && (text[i + 1] == 'x' || text[i + 1] == 'X')) {
      std::size_t j = i + 2;
      while (j < text.size() && std::isxdigit(static_cast<unsigned char>(text[j]))) ++j;
      if (j > i + 2) {
        out += "0x...";
        i = j - 1;
        continue;
      }
    }
    const bool space = c == '\n' || c == '\r' || c == '\t' || c == ' ';
    if (space) {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else if (static_cast<unsigned char>(c) >= 0x20) {
      out += c;
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// The innermost entry of HDF5's error stack says what actually went wrong.
inline herr_t keep_innermost(unsigned n, const H5E_error2_t* error, void* data) {
  if (n == 0 && error->desc) *static_cast<std::string*>(data) = error->desc;
  return 0;
}

[[noreturn]] inline void fail(const std::string& what) {
  std::string detail;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, &detail);
  detail = one_line(detail);
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

// An HDF5 file built in memory (the core driver, no backing store): image() is
// its bytes, which core/atomic_file.hpp writes through a descriptor it created,
// so HDF5 never opens a path of the output directory.
class MemoryFile {
 public:
  MemoryFile()
      : fapl_(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "cannot create file access properties"),
        file_(create(fapl_.get()), H5Fclose, "cannot create file") {}
  hid_t get() const { return file_.get(); }
  std::string image() {
    check(H5Fflush(file_.get(), H5F_SCOPE_GLOBAL), "cannot flush file");
    const ssize_t size = H5Fget_file_image(file_.get(), nullptr, 0);
    if (size < 0) fail("cannot read the file image");
    std::string bytes(std::size_t(size), '\0');
    if (H5Fget_file_image(file_.get(), bytes.data(), bytes.size()) != size) fail("cannot read the file image");
    return bytes;
  }

 private:
  static hid_t create(hid_t fapl) {
    check(H5Pset_fapl_core(fapl, 1 << 16, 0), "cannot use the core driver");
    static unsigned long counter = 0;  // each memory file its own name
    const std::string name = "qkvlab-memory-" + std::to_string(++counter) + ".h5";
    return H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  }
  Handle fapl_, file_;
};

// A variable-length UTF-8 string type (h5py reads it as str).
inline Handle string_type() {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose, "cannot create string type");
  check(H5Tset_size(type.get(), H5T_VARIABLE), "cannot create string type");
  check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "cannot create string type");
  return type;
}

// A scalar attribute of the given file type, written from memory of the same layout.
inline void write_attribute(hid_t location, const char* name, hid_t type, const void* value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose, std::string("cannot create attribute ") + name);
  Handle attribute(H5Acreate2(location, name, type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                   std::string("cannot create attribute ") + name);
  check(H5Awrite(attribute.get(), type, value), std::string("cannot write attribute ") + name);
}

// A dataset that records no creation or modification time (HDF5 stores the clock's time in each
// dataset's header by default), so the same results give the same file, byte for byte.
inline Handle create_dataset(hid_t location, const std::string& name, hid_t type, hid_t space, const std::string& what) {
  Handle properties(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, what);
  check(H5Pset_obj_track_times(properties.get(), 0), what);
  return Handle(H5Dcreate2(location, name.c_str(), type, space, H5P_DEFAULT, properties.get(), H5P_DEFAULT), H5Dclose,
                what);
}

// Declared UTF-8 (string_type), so bytes that are not UTF-8 are written \xNN (core/json_text.hpp).
inline void write_string_attribute(hid_t location, const char* name, hid_t str, const std::string& value) {
  const std::string utf8 = escape_invalid_utf8(value);
  const char* text = utf8.c_str();
  write_attribute(location, name, str, &text);
}

}  // namespace qkvlab::results::hdf5
