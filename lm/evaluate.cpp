#include "lm/evaluate.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>

#include "core/errors.hpp"
#include "core/rng.hpp"

namespace qkvlab::lm {

TokenSequences token_sequences(const std::vector<std::int32_t>& ids, std::int64_t rows, std::int64_t cols,
                               int seq_len, std::int64_t max_sequences) {
  TokenSequences s;
  if (cols > std::numeric_limits<int>::max())
    throw UsageError("sequences of " + std::to_string(cols) + " tokens (at most 2147483647)");
  s.length = cols > 0 ? int(cols) : seq_len;
  if (s.length < 2) throw UsageError("sequences need at least 2 tokens (one predicted position), got " +
                                     std::to_string(s.length));
  s.sequences = cols > 0 ? rows : std::int64_t(ids.size()) / s.length;
  if (max_sequences > 0) s.sequences = std::min(s.sequences, max_sequences);
  if (s.sequences == 0)
    throw UsageError("the token file holds " + std::to_string(ids.size()) + " tokens: " +
                     (cols > 0 ? "no rows" : "fewer than one sequence of --seq-len " + std::to_string(s.length)));
  s.ids.assign(ids.begin(), ids.begin() + std::ptrdiff_t(s.sequences * s.length));
  return s;
}

void check_sequences(const TokenSequences& s, const Config& c, const std::string& source) {
  if (s.length > c.positions)
    throw UsageError(source + ": sequences of " + std::to_string(s.length) + " tokens are longer than the model's " +
                     std::to_string(c.positions) + " positions");
  for (std::size_t i = 0; i < s.ids.size(); ++i)
    if (s.ids[i] < 0 || s.ids[i] >= c.vocab)
      throw UsageError(source + ": token id " + std::to_string(s.ids[i]) + " at position " + std::to_string(i) +
                       " is outside the model's vocabulary of " + std::to_string(c.vocab));
}

TokenSequences random_sequences(int vocab, std::int64_t sequences, int length, std::uint64_t seed) {
  Rng rng(seed, "lm/random_tokens");
  TokenSequences s;
  s.sequences = sequences;
  s.length = length;
  s.ids.resize(std::size_t(sequences) * std::size_t(length));
  for (auto& id : s.ids) id = rng.uniform_int(vocab);
  return s;
}

EvalResult evaluate(Model<float>& model, const TokenSequences& data, int batch,
                    const std::function<void(std::int64_t, std::int64_t)>& progress, Recorder<float>* recorder) {
  const auto t0 = std::chrono::steady_clock::now();
  const int T = data.length;
  const int B = int(std::min<std::int64_t>(batch, data.sequences));
  std::vector<std::int32_t> ids(std::size_t(B) * T), targets(ids.size());
  LossSum total;
  for (std::int64_t first = 0; first < data.sequences; first += B) {
    for (int b = 0; b < B; ++b) {  // rows past the end repeat the first and predict nothing
      const std::int64_t k = first + b < data.sequences ? first + b : 0;
      const auto row = data.ids.begin() + std::ptrdiff_t(k * T);
      std::copy_n(row, T, ids.begin() + std::ptrdiff_t(b) * T);
      for (int t = 0; t < T; ++t)
        targets[std::size_t(b) * T + t] = first + b < data.sequences && t + 1 < T ? row[t + 1] : -1;
    }
    const LossSum l = model.forward(ids.data(), targets.data(), B, T, Pass::eval, 0, recorder);
    total.sum += l.sum, total.count += l.count;
    if (progress) progress(std::min(first + B, data.sequences), data.sequences);
  }
  return {total.mean(), total.count, data.sequences,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

}  // namespace qkvlab::lm
