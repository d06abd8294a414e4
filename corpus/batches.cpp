#include "corpus/batches.hpp"

#include "core/errors.hpp"
#include "core/rng.hpp"

#include <algorithm>
#include <string>

namespace qkvlab::corpus {

namespace {

void check_shape(std::size_t n, int B, int T) {
  if (B < 1 || T < 1) throw UsageError("windows of " + std::to_string(B) + " rows of " + std::to_string(T) + " tokens");
  if (n < std::size_t(T) + 1)
    throw UsageError("a token stream of " + std::to_string(n) + " tokens is shorter than one window of " +
                     std::to_string(T + 1));
}

// Uniform in [0, n), without modulo bias.
std::uint64_t below(Rng& rng, std::uint64_t n) {
  const std::uint64_t reject_under = (0 - n) % n;  // 2^64 mod n
  while (true)
    if (const std::uint64_t r = rng.next_u64(); r >= reject_under) return r % n;
}

}  // namespace

void sample_windows(const std::vector<std::int32_t>& tokens, int B, int T, std::uint64_t seed, std::int64_t step,
                    int micro, std::int32_t* ids, std::int32_t* targets) {
  check_shape(tokens.size(), B, T);
  Rng rng(seed, "lm/batch/step=" + std::to_string(step) + "/micro=" + std::to_string(micro));
  const std::uint64_t offsets = tokens.size() - std::size_t(T);  // o in [0, N − T − 1]
  for (int b = 0; b < B; ++b) {
    const auto from = tokens.begin() + std::ptrdiff_t(below(rng, offsets));
    std::copy(from, from + T, ids + std::ptrdiff_t(b) * T);
    std::copy(from + 1, from + T + 1, targets + std::ptrdiff_t(b) * T);
  }
}

Windows evaluation_windows(const std::vector<std::int32_t>& tokens, int T) {
  check_shape(tokens.size(), 1, T);
  Windows w;
  w.count = std::int64_t((tokens.size() - 1) / std::size_t(T));
  w.ids.resize(std::size_t(w.count) * std::size_t(T));
  w.targets.resize(w.ids.size());
  std::copy(tokens.begin(), tokens.begin() + std::ptrdiff_t(w.ids.size()), w.ids.begin());
  std::copy(tokens.begin() + 1, tokens.begin() + 1 + std::ptrdiff_t(w.ids.size()), w.targets.begin());
  return w;
}

}  // namespace qkvlab::corpus
