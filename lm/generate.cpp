#include "lm/generate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <string>

#include "core/errors.hpp"

namespace qkvlab::lm {

std::int32_t sample_token(const float* logits, int V, const Sampling& s, Rng& rng) {
  if (s.temperature <= 0) return std::int32_t(std::max_element(logits, logits + V) - logits);
  std::vector<int> order(std::size_t(V), 0);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  const std::size_t k = s.top_k > 0 ? std::min<std::size_t>(std::size_t(s.top_k), order.size()) : order.size();
  std::vector<double> p(k);
  double total = 0;
  for (std::size_t i = 0; i < k; ++i)
    total += p[i] = std::exp((double(logits[order[i]]) - double(logits[order[0]])) / s.temperature);
  std::size_t kept = 0;
  for (double mass = 0; kept < k && (kept == 0 || mass < s.top_p * total); ++kept) mass += p[kept];
  const double u = rng.uniform() * std::accumulate(p.begin(), p.begin() + std::ptrdiff_t(kept), 0.0);
  double mass = 0;
  for (std::size_t i = 0; i < kept; ++i)
    if ((mass += p[i]) > u) return order[i];
  return order[kept - 1];
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A NaN or infinite logit would be sampled as a token like any other: the first one, named (empty
// when every logit is finite).
std::string nonfinite_logit(const float* logits, int V, int step, int b) {
  for (int v = 0; v < V; ++v)
    if (!std::isfinite(logits[v]))
      return "new token " + std::to_string(step + 1) + " of sequence " + std::to_string(b) + ": the logit of token id " +
             std::to_string(v) + " is " + (std::isnan(logits[v]) ? "nan" : "infinite") +
             " (a weight that is not finite, or products beyond float's range)";
  return "";
}

void check_prompt(const Config& c, const std::vector<std::int32_t>& prompt, int max_new) {
  if (prompt.empty()) throw UsageError("the prompt is empty");
  for (std::size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= c.vocab)
      throw UsageError("prompt token " + std::to_string(i) + " is " + std::to_string(prompt[i]) +
                       ", outside the model's vocabulary [0, " + std::to_string(c.vocab) + ")");
  const std::int64_t fed = std::int64_t(prompt.size()) + max_new - 1;
  if (fed > c.positions)
    throw UsageError("a prompt of " + std::to_string(prompt.size()) + " tokens and --max-new " +
                     std::to_string(max_new) + " need " + std::to_string(fed) + " positions; the model has " +
                     std::to_string(c.positions));
}

}  // namespace

Generation generate(Model<float>& model, const std::vector<std::int32_t>& prompt, int max_new, int B,
                    const Sampling& sampling, const std::function<void(int, int)>& progress) {
  const Config& c = model.config();
  check_prompt(c, prompt, max_new);
  const int P = int(prompt.size()), capacity = P + max_new - 1, V = c.vocab;
  Generation g{prompt, std::vector<std::vector<std::int32_t>>(std::size_t(B)), 0, capacity, 0, 0, 0, max_new - 1, ""};
  std::vector<Rng> rngs;
  for (int b = 0; b < B; ++b) rngs.emplace_back(sampling.seed, "generate/" + std::to_string(b));
  std::vector<std::int32_t> ids;
  for (int b = 0; b < B; ++b) ids.insert(ids.end(), prompt.begin(), prompt.end());
  std::vector<float> logits(std::size_t(B) * V);
  auto choose = [&] {  // false, with g.nonfinite, at a logit that is not finite
    ids.resize(std::size_t(B));
    for (int b = 0; b < B; ++b) {
      g.nonfinite = nonfinite_logit(logits.data() + std::size_t(b) * V, V, int(g.ids[std::size_t(b)].size()), b);
      if (!g.nonfinite.empty()) return false;
      ids[std::size_t(b)] = sample_token(logits.data() + std::size_t(b) * V, V, sampling, rngs[std::size_t(b)]);
      g.ids[std::size_t(b)].push_back(ids[std::size_t(b)]);
    }
    if (progress) progress(int(g.ids[0].size()), max_new);
    return true;
  };
  auto t0 = std::chrono::steady_clock::now();
  model.begin_cache(B, capacity, P);
  model.extend(ids.data(), P, logits.data());
  g.prefill_seconds = seconds_since(t0);
  if (!choose()) return g;
  t0 = std::chrono::steady_clock::now();
  for (int step = 1; step < max_new; ++step) {
    model.extend(ids.data(), 1, logits.data());
    if (!choose()) return g;
  }
  g.decode_seconds = seconds_since(t0);
  g.cache_bytes = std::int64_t(model.cache_bytes());
  g.cache_bytes_per_token = double(g.cache_bytes) / (double(B) * capacity);
  return g;
}

}  // namespace qkvlab::lm
