// Checkpoint files in the safetensors format (huggingface/safetensors):
//   [8-byte little-endian header length N][N bytes of JSON header][tensor bytes]
// The header maps each tensor name to {"dtype": "F32"|"F64", "shape": [...],
// "data_offsets": [begin, end]} (byte offsets into the data that follows the
// header) and may hold "__metadata__": {string: string}, where qkvlab puts the
// model configuration. Tensors are row-major (C order) and little-endian, as
// numpy and PyTorch expect; a Mat<S> (column-major) is converted on the way.
//
// Reading validates everything before it copies a byte: header length within
// the file, the header valid JSON of the expected form, known dtypes, shape
// times dtype size equal to the offsets' span, offsets inside the data and
// tiling it with neither overlap, gap nor trailing bytes. Any violation throws
// std::runtime_error with a one-line message naming the file and the problem.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/tape.hpp"

namespace qkvlab::engine {

enum class DType { F32, F64 };

struct Tensor {
  DType dtype = DType::F64;
  std::vector<std::uint64_t> shape;
  std::vector<std::uint8_t> data;  // row-major, little-endian
};

struct SafeTensors {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// The file's bytes: the header padded with spaces so that the data starts at
// a multiple of 8 bytes, then the F64 tensors and then the F32 tensors, each
// group in name order, so every tensor is aligned to its element size.
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

}  // namespace qkvlab::engine
