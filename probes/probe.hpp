// A layerwise linear probe (SkipV1Former App. C.1): a norm followed by a
// linear map to the outputs, on a frozen model's layer output h (N rows of d),
//   logits = norm(h) Uᵀ,   norm = the model family's (LayerNorm with a bias for
//   GPT-2, RMSNorm for Llama), U (outputs × d),
// trained by cross-entropy. Its recipe says what the optimizer may touch: `qkvlab`
// decays U only; `released` (dense_skip's optim/train_linear_p_skip.py) drops the
// norm's bias (nn.LayerNorm(bias=False)) and decays every parameter, gain included. Written against the backend's kernels (engine/backend.hpp),
// so it runs where the model runs; forward and backward side by side.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/backend.hpp"
#include "engine/parameters.hpp"
#include "lm/model.hpp"

namespace qkvlab::probes {

enum class ProbeRecipe { qkvlab, released };

template <class S>
class Probe {
 public:
  // rows: the most rows (B·T) a call will pass.
  Probe(const lm::Config& model, int outputs, int rows, engine::Backend<S>& backend,
        ProbeRecipe recipe = ProbeRecipe::qkvlab);
  ~Probe();
  Probe(Probe&&) noexcept;

  engine::ParameterSet<S>& parameters();
  int outputs() const;

  // The model's final norm and unembedding (outputs must be the vocabulary): at the last
  // layer the untrained probe is the model's own head.
  void initialize_from(lm::Model<S>& model);
  // Gain 1, bias 0, U ~ N(0, 0.02²) from Rng(seed, "probe").
  void initialize_random(std::uint64_t seed);

  // h: N rows of d in the backend's memory; targets (host, N; < 0: not predicted).
  // With train, the gradients of scale · Σ loss accumulate into parameters().grads.
  // Returns the sum and count of the per-position losses; per_row (host, N) gets each row's loss when given.
  lm::LossSum forward(const S* h, const std::int32_t* targets, int N, bool train, double scale,
                      std::vector<double>* per_row = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

extern template class Probe<float>;
extern template class Probe<double>;

}  // namespace qkvlab::probes
