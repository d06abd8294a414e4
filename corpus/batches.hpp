// Windows of a token stream for a language model.
//
// sample_windows: B rows of T inputs and their T targets (the next tokens),
// each row the tokens o … o+T (inputs o … o+T−1, targets o+1 … o+T) at an
// offset o uniform in [0, N − T − 1], drawn from the stream
// Rng(seed, "lm/batch/step=<step>/micro=<micro>"): the same (seed, step, micro)
// gives the same batch, so a resumed run sees the same data. O(B·T).
//
// evaluation_windows: the stream cut into consecutive windows of T+1 tokens
// that share their boundary token: window k holds tokens kT … kT+T (inputs
// kT … kT+T−1, targets kT+1 … kT+T). Inputs do not overlap, targets do not
// overlap, and every token but the first is a target once — the positions
// corpus/ngram.hpp's baselines predict — but for the last (N − 1) mod T,
// which do not fill a window.
#pragma once

#include <cstdint>
#include <vector>

namespace qkvlab::corpus {

// ids and targets each hold B·T entries (row after row). A stream shorter
// than T + 1 tokens, or B, T < 1, is a UsageError.
void sample_windows(const std::vector<std::int32_t>& tokens, int B, int T, std::uint64_t seed, std::int64_t step,
                    int micro, std::int32_t* ids, std::int32_t* targets);

struct Windows {
  std::int64_t count = 0;              // windows of T
  std::vector<std::int32_t> ids;       // count × T, row after row
  std::vector<std::int32_t> targets;   // count × T
};
Windows evaluation_windows(const std::vector<std::int32_t>& tokens, int T);

}  // namespace qkvlab::corpus
