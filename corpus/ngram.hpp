// The n-gram baselines a language model on the same tokens is measured against:
// validation cross-entropy, in nats per predicted token, of
//   unigram   P_1(w) = (c(w) + 1) / (N + V)   (add-one over the V ids of the vocabulary)
//   bigram    λ P_2(w | v) + (1 − λ) P_1(w),  P_2(w | v) = c(v w) / c(v ·)   (Jelinek–Mercer;
//             P_2 = P_1 when v never precedes a token in the counts)
// Predicted positions: every token of the stream but the first (t_1 … t_{N−1},
// each given t_{i−1}; the <|endoftext|> between files is predicted and is the
// context of a file's first token), as a language model over the same stream
// predicts them (corpus/batches.hpp: evaluation_windows).
// λ: counts on nine tenths of the training stream (cut into blocks of
// clamp(N/100, 1, 1000) tokens, 1000 for the Brown corpus; every tenth block,
// from the 10th, is held out), λ maximizing the
// held-out likelihood by EM from λ = 1/2 (until λ moves by less than 1e-10);
// then the counts are taken again on the whole training stream.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace qkvlab::corpus {

// Which positions of a stream count: all, or the held-out tenth, or the rest.
struct Positions {
  enum Kind { all, fit, held_out } kind = all;
  std::int64_t block = 1;  // of the held-out cut
  // The held-out cut of a stream of n tokens.
  static Positions of(Kind kind, std::int64_t n);
  bool operator()(std::int64_t i) const;
};

struct NgramCounts {
  int vocab_size = 0;
  std::int64_t total = 0;                  // N: unigram tokens counted
  std::vector<std::int64_t> unigram;       // c(w)
  std::vector<std::int64_t> context;       // c(v ·)
  std::unordered_map<std::uint64_t, std::int64_t> bigram;  // c(v w), keyed v << 32 | w

  double p_unigram(std::int32_t w) const;
  double p_bigram(std::int32_t v, std::int32_t w) const;
  double p_interpolated(std::int32_t v, std::int32_t w, double lambda) const;
};

// Counts t_i for the unigram and (t_{i−1}, t_i) for the bigram, over the
// positions i taken (i ≥ 1 for the bigram). Ids must be in [0, vocab_size).
NgramCounts count_ngrams(std::span<const std::int32_t> tokens, int vocab_size, Positions taken = {});

// Mean −ln(λ P_2(t_i | t_{i−1}) + (1 − λ) P_1(t_i)) over the positions i ≥ 1
// taken; λ = 0 is the unigram's.
double cross_entropy(const NgramCounts& counts, std::span<const std::int32_t> tokens, double lambda,
                     Positions taken = {});

struct LambdaFit {
  double lambda = 0.5;
  int iterations = 0;
};
// The λ in [0, 1] maximizing Σ_i ln(λ b_i + (1 − λ) u_i), by EM from 1/2.
LambdaFit fit_lambda(std::span<const double> b, std::span<const double> u);

struct Baselines {
  double unigram_nats = 0, bigram_nats = 0;
  LambdaFit lambda;
  std::int64_t train_tokens = 0, held_out_positions = 0, validation_positions = 0, distinct_bigrams = 0;
};
Baselines ngram_baselines(std::span<const std::int32_t> train, std::span<const std::int32_t> validation,
                          int vocab_size);

}  // namespace qkvlab::corpus
