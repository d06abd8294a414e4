// `qkvlab lm generate`: decoding with the cache of lm/model.hpp (Model::begin_cache, extend).
// The prompt is prefilled in one block; then each step feeds the token just chosen and reads
// the cache. B sequences decode the same prompt side by side (--batch), each sampling from its
// own named random stream ("generate/<b>" of the seed), so the tokens of sequence b are the same
// at any batch size and thread count.
// Choosing a token from logits ℓ (sample_token):
//   temperature 0          argmax ℓ (the first of equal maxima): greedy, no randomness
//   temperature τ > 0      p ∝ exp(ℓ/τ), restricted to the k largest (top_k > 0), then to the
//                          smallest prefix of the sorted p whose mass reaches top_p; renormalized
//                          and drawn with one uniform number.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "lm/model.hpp"

namespace qkvlab::lm {

struct Sampling {
  double temperature = 0;  // 0: greedy
  int top_k = 0;           // 0: all tokens
  double top_p = 1;        // 1: no nucleus cut
  std::uint64_t seed = 0;
};

std::int32_t sample_token(const float* logits, int V, const Sampling& s, Rng& rng);

struct Generation {
  std::vector<std::int32_t> prompt_ids;
  std::vector<std::vector<std::int32_t>> ids;  // per sequence, the new tokens
  std::int64_t cache_bytes = 0;                // the cache as allocated (B sequences × capacity)
  std::int64_t capacity = 0;                   // positions per sequence the cache holds
  double cache_bytes_per_token = 0;            // cache_bytes / (B · capacity)
  double prefill_seconds = 0, decode_seconds = 0;
  std::int64_t decode_steps = 0;               // max_new − 1 (the last token is not fed back)
  std::string nonfinite;  // where a logit was first NaN or infinite: decoding stopped there (else empty)
};

// Decodes max_new ≥ 1 tokens after `prompt` (non-empty) in B sequences; `progress`, if given, is
// called with (tokens chosen, max_new) after each step. Throws UsageError when the prompt plus
// max_new − 1 fed tokens exceed the model's positions, or an id is outside the vocabulary. A logit
// that is not finite stops the decoding, named in `nonfinite` (the caller reports it, never samples it).
Generation generate(Model<float>& model, const std::vector<std::int32_t>& prompt, int max_new, int B,
                    const Sampling& sampling, const std::function<void(int, int)>& progress = {});

}  // namespace qkvlab::lm
