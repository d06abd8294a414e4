// libFuzzer target: the token and tag file reader (corpus/token_file.hpp), its own .npy parser and
// nanoGPT's .bin, which every `lm`, `analyze` and `probe` command runs on a user's files. The bytes
// are read as X.npy and X.bin (names linked to one memfd: the reader picks the format by extension
// and wants a regular file). On any bytes:
// - .npy: the tag reader accepts exactly what the token reader accepts plus ids of -1 (the tag of
//   <|endoftext|>), with the same ids; an accepted array holds rows × max(cols, 1) ids in range, and
//   survives tokens_npy_bytes and a second read unchanged; a prefix of its sequences reads as the
//   first ids of the whole, with the same row length;
// - .bin: accepted exactly when its size is even, as the little-endian uint16 values.
// Anything else (another exception, a disagreement, a sanitizer report, a leak) is a finding.
// Built and run by scripts/fuzz_readers.sh (docs/fuzzing-checkpoints.md, "Token files").
#include "core/errors.hpp"
#include "corpus/token_file.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>

namespace {

namespace fs = std::filesystem;
using qkvlab::corpus::TokenArray;

// X.npy and X.bin in a directory of this process's, both linked to one memfd, removed at exit.
struct Files {
  int fd = -1;
  fs::path dir, npy, bin;
  Files() {
    std::string pattern = (fs::temp_directory_path() / "token_fuzz_XXXXXX").string();
    fd = ::memfd_create("tokens", MFD_CLOEXEC);
    if (fd < 0 || !::mkdtemp(pattern.data())) std::abort();
    dir = pattern, npy = dir / "x.npy", bin = dir / "x.bin";
    const fs::path target = "/proc/self/fd/" + std::to_string(fd);
    fs::create_symlink(target, npy);
    fs::create_symlink(target, bin);
  }
  ~Files() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
  void hold(const std::string& bytes) const {
    if (::ftruncate(fd, 0) != 0) std::abort();
    for (std::size_t done = 0; done < bytes.size();) {
      const ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done, off_t(done));
      if (n <= 0) std::abort();
      done += std::size_t(n);
    }
  }
};

template <class Read> std::optional<TokenArray> attempt(Read&& read) {
  try {
    return read();
  } catch (const qkvlab::UsageError&) {
    return std::nullopt;
  }
}

bool same(const TokenArray& a, const TokenArray& b) { return a.ids == b.ids && a.rows == b.rows && a.cols == b.cols; }

void check_shape(const TokenArray& a, std::int32_t lowest) {
  if (a.rows < 0 || a.cols < 0 || a.ids.size() != std::uint64_t(a.rows) * std::uint64_t(std::max<std::int64_t>(a.cols, 1)))
    std::abort();
  if (std::any_of(a.ids.begin(), a.ids.end(), [&](std::int32_t id) { return id < lowest; })) std::abort();
}

void check_npy(const Files& files, const std::string& bytes, std::uint8_t pick) {
  const auto tokens = attempt([&] { return qkvlab::corpus::read_token_file(files.npy); });
  const auto tags = attempt([&] { return qkvlab::corpus::read_tag_file(files.npy); });
  const bool has_minus_one = tags && std::find(tags->ids.begin(), tags->ids.end(), -1) != tags->ids.end();
  if (tokens.has_value() != (tags.has_value() && !has_minus_one)) std::abort();
  if (tags) check_shape(*tags, -1);
  if (!tokens) return;
  check_shape(*tokens, 0);
  if (!same(*tokens, *tags)) std::abort();
  const qkvlab::corpus::TokenPrefix prefix{1 + pick % 3, 1 + pick / 3 % 5};
  const auto part = attempt([&] { return qkvlab::corpus::read_token_file(files.npy, prefix); });
  if (!part || part->cols != tokens->cols || part->ids.size() > tokens->ids.size() ||
      !std::equal(part->ids.begin(), part->ids.end(), tokens->ids.begin()))
    std::abort();
  files.hold(qkvlab::corpus::tokens_npy_bytes(tokens->ids, tokens->rows, tokens->cols));
  const auto again = attempt([&] { return qkvlab::corpus::read_token_file(files.npy); });
  if (!again || !same(*again, *tokens)) std::abort();
  files.hold(bytes);
}

void check_bin(const Files& files, const std::string& bytes) {
  const auto bin = attempt([&] { return qkvlab::corpus::read_token_file(files.bin); });
  if (bin.has_value() != (bytes.size() % 2 == 0)) std::abort();
  if (!bin) return;
  if (bin->cols != 0 || bin->rows != std::int64_t(bytes.size() / 2) || bin->ids.size() != bytes.size() / 2) std::abort();
  for (std::size_t k = 0; k < bin->ids.size(); ++k) {
    std::uint16_t v;
    std::memcpy(&v, bytes.data() + 2 * k, 2);
    if (bin->ids[k] != v) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Files files;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  files.hold(bytes);
  check_npy(files, bytes, size > 0 ? data[size - 1] : 0);
  check_bin(files, bytes);
  return 0;
}
