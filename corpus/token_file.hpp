// Token files: a user's corpus as token ids.
//   .npy  NumPy arrays of integers, 1-D or 2-D (rows of equal length), format
//         versions 1.0, 2.0 and 3.0; dtypes |i1 |u1 <i2 <u2 <i4 <u4 <i8 <u8;
//         C or Fortran order (a Fortran-order 2-D array is read into row order).
//   .bin  nanoGPT's flat array of little-endian uint16 (no header).
// The reader refuses what is not a regular file, checks the header and the
// declared shape against the file's size before allocating anything (so
// /dev/zero, or a header declaring 2^40 elements, is refused at once), checks
// the ids' memory (4 bytes each, as int32) against the memory budget
// (core/limits.hpp) before allocating them, naming the count, its size and
// the budget, and
// refuses ids that are negative or above 2^31 − 1, naming the element. Every
// error is a one-line UsageError starting with the file's name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace qkvlab::corpus {

struct TokenArray {
  std::vector<std::int32_t> ids;  // row after row
  std::int64_t rows = 0;          // the length, for 1-D
  std::int64_t cols = 0;          // 0 for 1-D
};

// The part of a file a reader needs: the first `sequences` sequences (2-D: rows; 1-D: pieces of
// seq_len ids), or (sequences 0) all of it.
struct TokenPrefix {
  std::int64_t sequences = 0;
  int seq_len = 0;
};

// By extension: .npy or .bin. With a prefix, only its ids are read and held (the header is checked
// against the whole file as always); a 2-D file in Fortran order is read whole.
TokenArray read_token_file(const std::filesystem::path& path, const TokenPrefix& prefix = {});

// The per-token tags written by `qkvlab data brown` (train_tags.npy): the same
// format, with -1 allowed (the tag of <|endoftext|>).
TokenArray read_tag_file(const std::filesystem::path& path);

// An int32 .npy (version 1.0, C order), written atomically: 1-D of `rows`
// elements when cols = 0, else rows × cols. ids.size() must match.
void write_tokens_npy(const std::filesystem::path& path, const std::vector<std::int32_t>& ids, std::int64_t rows,
                      std::int64_t cols);
// The bytes write_tokens_npy writes.
std::string tokens_npy_bytes(const std::vector<std::int32_t>& ids, std::int64_t rows, std::int64_t cols);

}  // namespace qkvlab::corpus
