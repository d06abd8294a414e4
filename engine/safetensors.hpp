// Checkpoint files in the safetensors format (huggingface/safetensors):
//   [8-byte little-endian header length N][N bytes of JSON header][tensor bytes]
// The header maps each tensor name to {"dtype": "F32"|"BF16"|..., "shape": [...],
// "data_offsets": [begin, end]} (byte offsets into the data that follows the
// header) and may hold "__metadata__": {string: string}, where qkvlab puts the
// model configuration. Tensors are row-major (C order) and little-endian, as
// numpy and PyTorch expect; a Mat<S> (column-major) is converted on the way.
//
// Reading validates everything before it touches a tensor byte: header length
// within the file (and at most 100 MB, the reference implementation's limit),
// the header valid JSON of the expected form, known dtypes, shape times dtype
// size equal to the offsets' span (no overflow), offsets inside the data and
// tiling it with neither overlap, gap nor trailing bytes. Any violation throws
// std::runtime_error with a one-line message naming the file and the problem.
//
// Two ways to read:
//  - parse_safetensors / load_safetensors copy every tensor into a SafeTensors
//    (the toolkit's own small files);
//  - view_safetensors validates a header over bytes that stay where they are,
//    and MappedSafeTensors does so over a read-only memory mapping of a file
//    (POSIX mmap), so a large checkpoint is read in place, tensor by tensor,
//    and never held twice. parse_safetensors is view_safetensors plus a copy.
// Every dtype of the format is recognized (the header is checked whatever the
// dtype); decode_floats converts F64, F32, F16 and BF16 to float.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/types.hpp"

namespace qkvlab::engine {

using qkvlab::Mat;

// The format's dtypes. BF16 is the upper half of a float32; F8_* are the OCP 8-bit floats.
enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2 };

std::size_t dtype_size(DType dtype);  // bytes per element
const char* dtype_name(DType dtype);  // as in the header: "F32", "BF16", ...
bool is_float(DType dtype);           // F64, F32, F16, BF16: what decode_floats converts

// n elements of a float dtype, little-endian at any alignment, converted to
// float (F64 rounded to nearest; F16 and BF16 exactly) into out[0], out[stride], ...
// Throws std::invalid_argument for a dtype that is not one of the four.
void decode_floats(DType dtype, const std::uint8_t* in, std::size_t n, float* out, std::size_t stride = 1);

struct Tensor {
  DType dtype = DType::F64;
  std::vector<std::uint64_t> shape;
  std::vector<std::uint8_t> data;  // row-major, little-endian
};

struct SafeTensors {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// One tensor of a header: its dtype, shape and the byte range [begin, end)
// of the data section (after the header) that holds it.
struct TensorEntry {
  DType dtype = DType::F32;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0, end = 0;
  std::uint64_t elements() const;  // product of the shape (fits: the header was validated)
};

// A validated header over bytes that are not copied: `data` is the data
// section, tensor `name` occupies data[begin, end).
struct SafeTensorsView {
  std::map<std::string, TensorEntry> tensors;
  std::map<std::string, std::string> metadata;
  std::span<const std::uint8_t> data;
  std::span<const std::uint8_t> bytes(const TensorEntry& entry) const {
    return data.subspan(entry.begin, entry.end - entry.begin);
  }
};

// Validates `bytes` (a whole file) as above; `source` names it in error messages.
SafeTensorsView view_safetensors(std::span<const std::uint8_t> bytes, const std::string& source = "buffer");

// A read-only memory mapping of a whole file, unmapped on destruction. Moves,
// never copies. A file that shrinks while mapped (another process truncates
// it) makes a read beyond its new end raise SIGBUS, as with any mapping: while
// a MappedFile lives, a handler turns that SIGBUS into one line on stderr
// naming the file ("… the file shrank while it was being read …") and exit
// status 3, never a death by signal; a SIGBUS elsewhere keeps the action
// installed before.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);  // std::runtime_error naming the path
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
  std::span<const std::uint8_t> bytes() const { return {static_cast<const std::uint8_t*>(data_), size_}; }
  // Hands the whole pages inside `range` (a part of bytes()) back to the kernel: they stop counting
  // as this process's memory, and a later read faults them in again from the page cache.
  void release(std::span<const std::uint8_t> range) const;

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

// A safetensors file mapped and its header validated against the file's size
// before any tensor byte is read.
class MappedSafeTensors {
 public:
  explicit MappedSafeTensors(const std::filesystem::path& path);
  const std::filesystem::path& path() const { return path_; }
  const SafeTensorsView& view() const { return view_; }
  void release(const TensorEntry& entry) const { file_.release(view_.bytes(entry)); }  // MappedFile::release

 private:
  std::filesystem::path path_;
  MappedFile file_;
  SafeTensorsView view_;
};

// The __metadata__ of a valid safetensors file (its header read, no tensor byte); nullopt when the
// file is absent, unreadable or not a valid safetensors file.
std::optional<std::map<std::string, std::string>> safetensors_metadata(const std::filesystem::path& path);

// The file's bytes: the header padded with spaces so that the data starts at
// a multiple of 8 bytes, then the tensors by decreasing element size (F64,
// then F32, then F16/BF16, ...), each group in name order, so every tensor is
// aligned to its element size.
std::vector<std::uint8_t> serialize_safetensors(const SafeTensors& file);

// Parses a file's bytes; `source` names them in error messages.
SafeTensors parse_safetensors(std::span<const std::uint8_t> bytes, const std::string& source = "buffer");

// Writes atomically: to a temporary file next to `path`, then renamed over it,
// so a reader sees the old file or the new one, never a partial one.
void save_safetensors(const std::filesystem::path& path, const SafeTensors& file);

SafeTensors load_safetensors(const std::filesystem::path& path);

// Matrix ↔ tensor of shape [rows, cols] with S's dtype (float: F32, double: F64).
template <class S>
Tensor to_tensor(const Mat<S>& M);

// Throws std::runtime_error unless the tensor has S's dtype (no silent
// rounding) and a 2-D shape; `name` is used in the message.
template <class S>
Mat<S> to_matrix(const Tensor& tensor, const std::string& name);

// The tensor `name` of `file` as a Mat<S> of the given shape; throws
// std::runtime_error if it is missing or differs in dtype or shape.
template <class S>
Mat<S> restore_matrix(const SafeTensors& file, const std::string& name, Eigen::Index rows, Eigen::Index cols) {
  const auto it = file.tensors.find(name);
  if (it == file.tensors.end()) throw std::runtime_error("checkpoint: no tensor \"" + name + "\"");
  Mat<S> M = to_matrix<S>(it->second, name);
  if (M.rows() != rows || M.cols() != cols)
    throw std::runtime_error("checkpoint: tensor \"" + name + "\" is " + std::to_string(M.rows()) + "x" +
                             std::to_string(M.cols()) + ", expected " + std::to_string(rows) + "x" +
                             std::to_string(cols));
  return M;
}

}  // namespace qkvlab::engine
