// `qkvlab lm eval`: a model's mean next-token cross-entropy (nats) on the
// sequences of a token file. A 2-D array is one sequence per row; a 1-D array
// is cut into consecutive sequences of `seq_len` tokens (a remainder shorter
// than seq_len is left out). In each sequence of T tokens, positions
// 0 … T−2 predict the next token: T − 1 predicted positions per sequence,
// which `tokens` counts.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lm/model.hpp"

namespace qkvlab::lm {

struct TokenSequences {
  std::vector<std::int32_t> ids;  // sequences × length, row after row
  std::int64_t sequences = 0;
  int length = 0;
};

// Rows of a 2-D token array (cols > 0) or `seq_len`-token pieces of a 1-D one,
// at most `max_sequences` of them (0: all). UsageError when none is left.
TokenSequences token_sequences(const std::vector<std::int32_t>& ids, std::int64_t rows, std::int64_t cols,
                               int seq_len, std::int64_t max_sequences);

// UsageError naming `source` (a file) when a token id is outside the model's
// vocabulary or the sequences are longer than its positions.
void check_sequences(const TokenSequences& data, const Config& config, const std::string& source);

// `sequences` sequences of `length` tokens drawn uniformly from [0, vocab) by
// Rng(seed, "lm/random_tokens"): the default input where no token file is given.
TokenSequences random_sequences(int vocab, std::int64_t sequences, int length, std::uint64_t seed);

struct EvalResult {
  double loss = 0;
  std::int64_t tokens = 0, sequences = 0;
  double seconds = 0;
};

// `batch` sequences per forward pass; progress(done, total) after each. The
// recorder, if any, sees each pass (B = min(batch, sequences) rows; rows of
// the last pass beyond the data repeat the first sequence).
EvalResult evaluate(Model<float>& model, const TokenSequences& data, int batch,
                    const std::function<void(std::int64_t, std::int64_t)>& progress = {},
                    Recorder<float>* recorder = nullptr);

}  // namespace qkvlab::lm
