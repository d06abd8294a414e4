#include "corpus/ngram.hpp"

#include "core/errors.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace qkvlab::corpus {

namespace {

std::uint64_t key(std::int32_t v, std::int32_t w) { return std::uint64_t(std::uint32_t(v)) << 32 | std::uint32_t(w); }

void check_id(std::int32_t id, int vocab_size) {
  if (id < 0 || id >= vocab_size)
    throw std::invalid_argument("n-gram counts: token " + std::to_string(id) + " outside a vocabulary of " +
                                std::to_string(vocab_size));
}

}  // namespace

Positions Positions::of(Kind kind, std::int64_t n) { return {kind, std::clamp<std::int64_t>(n / 100, 1, 1000)}; }

bool Positions::operator()(std::int64_t i) const {
  return kind == all || ((i / block) % 10 == 9) == (kind == held_out);
}

double NgramCounts::p_unigram(std::int32_t w) const {
  return double(unigram[std::size_t(w)] + 1) / double(total + vocab_size);
}

double NgramCounts::p_bigram(std::int32_t v, std::int32_t w) const {
  const std::int64_t c = context[std::size_t(v)];
  if (c == 0) return p_unigram(w);
  const auto it = bigram.find(key(v, w));
  return it == bigram.end() ? 0.0 : double(it->second) / double(c);
}

double NgramCounts::p_interpolated(std::int32_t v, std::int32_t w, double lambda) const {
  return lambda * p_bigram(v, w) + (1 - lambda) * p_unigram(w);
}

NgramCounts count_ngrams(std::span<const std::int32_t> tokens, int vocab_size, Positions taken) {
  NgramCounts c{vocab_size, 0, std::vector<std::int64_t>(std::size_t(vocab_size), 0),
                std::vector<std::int64_t>(std::size_t(vocab_size), 0), {}};
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    check_id(tokens[i], vocab_size);
    if (!taken(std::int64_t(i))) continue;
    ++c.unigram[std::size_t(tokens[i])], ++c.total;
    if (i == 0) continue;
    ++c.context[std::size_t(tokens[i - 1])];
    ++c.bigram[key(tokens[i - 1], tokens[i])];
  }
  return c;
}

double cross_entropy(const NgramCounts& counts, std::span<const std::int32_t> tokens, double lambda, Positions taken) {
  for (std::int32_t t : tokens) check_id(t, counts.vocab_size);
  double nats = 0;
  std::int64_t n = 0;
  for (std::size_t i = 1; i < tokens.size(); ++i)
    if (taken(std::int64_t(i))) nats -= std::log(counts.p_interpolated(tokens[i - 1], tokens[i], lambda)), ++n;
  if (n == 0) throw UsageError("n-gram cross-entropy: no predicted position (a stream of " + std::to_string(tokens.size()) + " tokens)");
  return nats / double(n);
}

LambdaFit fit_lambda(std::span<const double> b, std::span<const double> u) {
  LambdaFit fit;
  for (fit.iterations = 1; fit.iterations <= 100000; ++fit.iterations) {
    double responsibility = 0;  // Σ posterior weight of the bigram component
    for (std::size_t i = 0; i < b.size(); ++i) {
      const double from_bigram = fit.lambda * b[i], mixed = from_bigram + (1 - fit.lambda) * u[i];
      if (mixed > 0) responsibility += from_bigram / mixed;
    }
    const double next = responsibility / double(b.size());
    const bool done = std::abs(next - fit.lambda) < 1e-10;
    fit.lambda = next;
    if (done) break;
  }
  return fit;
}

Baselines ngram_baselines(std::span<const std::int32_t> train, std::span<const std::int32_t> validation,
                          int vocab_size) {
  Baselines out;
  const auto n = std::int64_t(train.size());
  const NgramCounts fit = count_ngrams(train, vocab_size, Positions::of(Positions::fit, n));
  const Positions held_out = Positions::of(Positions::held_out, n);
  std::vector<double> b, u;
  for (std::size_t i = 1; i < train.size(); ++i)
    if (held_out(std::int64_t(i)))
      b.push_back(fit.p_bigram(train[i - 1], train[i])), u.push_back(fit.p_unigram(train[i]));
  if (b.empty() || validation.size() < 2)
    throw UsageError("n-gram baselines: too few tokens (" + std::to_string(train.size()) + " training, " +
                     std::to_string(validation.size()) + " validation) for a held-out position and a validation one");
  out.lambda = fit_lambda(b, u);
  const NgramCounts all = count_ngrams(train, vocab_size);
  out.unigram_nats = cross_entropy(all, validation, 0.0);
  out.bigram_nats = cross_entropy(all, validation, out.lambda.lambda);
  out.train_tokens = std::int64_t(train.size());
  out.held_out_positions = std::int64_t(b.size());
  out.validation_positions = std::int64_t(validation.size() - 1);
  out.distinct_bigrams = std::int64_t(all.bigram.size());
  return out;
}

}  // namespace qkvlab::corpus
