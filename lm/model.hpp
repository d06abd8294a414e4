// The decoder-only language model of both families and every variant, written
// once against engine/backend.hpp, so the CPU and CUDA backends run the same
// definition. Pre-norm blocks, row-vector convention (lm/config.hpp):
//   X_0 = E[ids] (+ P)                                   embedding (+ learned positions)
//   block ℓ:  n1 = N_1(X_ℓ);  q = n1 W_Q (Q-identity: n1);  k, v = n1 W_K, n1 W_V (own heads)
//             RoPE on q, k (llama);  queries, keys and values mixed as the plan says (lm/plan.hpp)
//             z_h = softmax(scale q_h k_gᵀ + causal) v_g (+ direct terms);  a = z W_O
//             m = X_ℓ + a;  n2 = N_2(m);  Y = m + MLP(n2);  X_{ℓ+1} = Y (DenseFormer: Σ_j α_j Y_j)
//   logits = N_f(X_L) Uᵀ (U = E when tied);  loss = mean cross-entropy over predicted positions
// Without norms (--norm none) N_1, N_2 and N_f are the identity.
// The backward pass mirrors it layer by layer (the formulas are the kernels',
// engine/backend.hpp and engine/linear.hpp); a query, key or value head reused by
// a later layer receives that layer's gradient before its own layer's backward.
//
// Memory: activations are allocated once per (B, T, pass) and reused. An eval
// pass keeps one layer's activations at a time, plus the query, key and value heads
// that later layers reuse, and forms no attention pattern unless a recorder asks for
// the `pattern` site (otherwise the attention runs 64 queries at a time, and hands
// a recorder that asks for them the patterns' reductions: lm/record.hpp); a training pass keeps
// every layer's for the backward. The head's logits are computed 512 rows at
// a time, so they never take B·T·V floats.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "engine/backend.hpp"
#include "engine/parameters.hpp"
#include "lm/config.hpp"
#include "lm/plan.hpp"
#include "lm/record.hpp"

namespace qkvlab::lm {

// Model::store's refusal of a finite value beyond the 16-bit type's range (it would be held as ±inf):
// "tensor "NAME" element K (V) overflows f16: …". A loader catches it to name the tensor and the
// element as its file stores them (lm/model_files.hpp).
struct WeightOverflow : UsageError {
  WeightOverflow(const std::string& tensor, std::size_t element, float value, engine::WeightType type);
  std::size_t element;
  float value;
  engine::WeightType type;
};

enum class Pass { eval, train };

struct LossSum {
  double sum = 0;           // Σ of the per-position losses, in nats
  std::int64_t count = 0;   // predicted positions
  double mean() const { return count ? sum / double(count) : 0.0; }
};

template <class S>
class Model {
 public:
  // weights: how the matrices are held (engine/weight_type.hpp): f32 as S, or bf16 / f16, 2 bytes
  // per weight, widened for each product (engine/weight.hpp). A 16-bit model is for inference and
  // analysis: its parameters() hold only the tensors kept as S (norms, biases, mixing weights, GPT-2's
  // positions), it trains not (a training forward throws std::logic_error).
  Model(const Config& config, engine::Backend<S>& backend, engine::WeightType weights = engine::WeightType::f32);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const Config& config() const;
  const std::vector<LayerPlan>& plan() const;
  engine::Backend<S>& backend();
  engine::ParameterSet<S>& parameters();

  engine::WeightType weight_type() const;
  std::size_t weight_bytes() const;  // bytes the parameters' values occupy (gradients not counted)
  // The configuration's tensor `name` (parameter_layout's, `count` floats) into the model, where it
  // is held: as S, or rounded to nearest in 16 bits (lm/model_files.hpp's loading).
  void store(const std::string& name, const float* values, std::size_t count);

  void initialize(std::uint64_t seed);                 // lm/parameters.hpp's initialization
  void set_parameters(const std::vector<S>& values);   // host values in the layout's order and offsets
  std::vector<S> parameter_values() const;             // the same, read back

  // One forward pass over B sequences of T tokens: `ids` and `targets` are
  // host arrays of B·T entries (targets[n] < 0: position n is not predicted;
  // targets null: no loss is computed and the head is skipped). With
  // Pass::train the head's gradient, scaled by grad_scale per predicted
  // position, is added to the parameter gradients and backward() may follow.
  // The recorder, if any, receives the sites it asks for as they are computed.
  // Throws std::invalid_argument for ids outside [0, V), T above the positions.
  LossSum forward(const std::int32_t* ids, const std::int32_t* targets, int B, int T, Pass pass,
                  double grad_scale = 0, Recorder<S>* recorder = nullptr);
  // Adds the gradient of the last training forward's loss to the parameter gradients.
  void backward();

  // Incremental decoding with a cache (lm/generate.hpp drives it), through the same forward: the
  // forward over positions past … past + T − 1 of B sequences reads the keys and values of positions
  // < past from the cache and appends its own. The cache holds, per layer, what the plan (lm/plan.hpp)
  // says the layer itself projects: its own key heads and own value heads (MLA: its own latent slots
  // and its rotary key k_R), and nothing for heads it reads from another layer (SkipV1's injected heads,
  // SVFormer's, YOCO's and CLA's, ResFormer's and NeuTRENO's V_1): those are read from the owner's
  // cache, and the mixing is recomputed over the cached positions at each step. The full forward is
  // the case past = 0.
  // begin_cache: room for B sequences of `capacity` positions (at most the model's), fed at most
  // `block` positions at a time; empties the cache.
  void begin_cache(int B, int capacity, int block);
  // The next T positions of every sequence (ids: B·T host values, sequence b at b·T) through the
  // model; writes the logits of each sequence's last new position to `logits` (host, B·V). Throws
  // std::invalid_argument for ids outside [0, V), positions past the capacity or the model's.
  void extend(const std::int32_t* ids, int T, S* logits);
  std::size_t cache_bytes() const;  // bytes of the cache's buffers as allocated (0 without a cache)
  // For the decoding tests' negative control only: with a cache, heads a layer reads from another
  // layer (layer 1's shared values, …) count as zero, as a cache that dropped them would.
  void set_cache_fault(bool drop_shared);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

extern template class Model<float>;
extern template class Model<double>;

}  // namespace qkvlab::lm
