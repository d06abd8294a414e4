// Model<S>::Impl, lm/model.hpp's private half, split by concern over five files:
//   model.cpp            the math: a layer's forward and backward, top to bottom; the head is
//                        lm/head.hpp's
//   model_mixing.cpp     the mixing of heads the plan says (lm/plan.hpp), read in place with a
//                        cache, its backward, NeuTRENO's direct terms, resformer-q's queries
//   model_mla.cpp        MLA's projections (latent, rotary parts) and their backward
//   model_workspace.cpp  the weights' pointers, the workspace for (B, T, pass), the input checks
//   model_decode.cpp     incremental decoding: the cache's rows, begin_cache, extend, last_logits
// Names follow lm/model.hpp's formulas: per layer ℓ, x (block input), n1, q, k, v (used keys and
// values), pattern, z, a (attention output), m = x + a, n2, h (MLP hidden), y (block output).
// Included by those five files only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/buffer.hpp"
#include "engine/linear.hpp"
#include "lm/head.hpp"
#include "lm/heads.hpp"
#include "lm/model.hpp"
#include "lm/parameters.hpp"

namespace qkvlab::lm {

// Named, not anonymous: Model<S>::Impl holds these, and a class with external linkage may not hold
// members of internal-linkage types (GCC's -Wsubobject-linkage says so in a unity build).
namespace model_parts {

constexpr int kQueryBlock = 64;  // queries at a time of an eval pass's attention that keeps no pattern

template <class S>
struct Linear {
  engine::Weight<S> W;  // float, or 16-bit in a model that holds its matrices so (W.f null then)
  const S* b = nullptr;
  S* dW = nullptr;
  S* db = nullptr;
};

template <class S>
struct LayerWeights {
  NormWeights<S> ln1, ln2;
  Linear<S> q, k, v, o, fc, proj, gate, up, down;
  Linear<S> dkv, uk, uv, kr, qr;  // MLA
  const S* dwa = nullptr;
  S* ddwa = nullptr;
};

// One layer's activations (a training pass keeps one per layer, an eval pass one in all).
template <class S>
struct LayerActs {
  engine::Buffer<S> n1, mean1, rstd1, q, kmix, vmix, pattern, z, m, n2, mean2, rstd2, h1, h2, act;
  engine::Buffer<S> c;  // MLA: the mixed latent, when it is not the layer's own
};

template <class S>
struct KV {  // the keys and values a layer attends with: tensors (k.data, v.data) unless a cache is read in place
  engine::KvHeads<S> k;
  engine::KvHeads<S> v;
};

}  // namespace model_parts

template <class S>
struct Model<S>::Impl {
  template <class T>
  using Buffer = engine::Buffer<T>;
  using Linear = model_parts::Linear<S>;
  using LayerWeights = model_parts::LayerWeights<S>;
  using LayerActs = model_parts::LayerActs<S>;
  using KV = model_parts::KV<S>;

  Impl(const Config& c, engine::Backend<S>& be, engine::WeightType w)
      : config(c), plan(make_plan(c)), backend(be), weight_type(w), layout(parameter_layout(c, plan)),
        params(be, held_layout(layout, w, false)), matrices(held_layout(layout, w, true)),
        values16(be, matrices.total()) {
    resolve_weights();
  }

  Config config;
  std::vector<LayerPlan> plan;
  engine::Backend<S>& backend;
  engine::WeightType weight_type;       // f32: every tensor in params; bf16, f16: the matrices in values16
  engine::ParameterLayout layout;       // the configuration's (parameter_layout), checkpoints' order
  engine::ParameterSet<S> params;       // the tensors held as S
  engine::ParameterLayout matrices;     // the tensors held in 16 bits (none at f32)
  Buffer<std::uint16_t> values16;
  Buffer<S> panel;                      // weight_product's scratch: largest inner dimension × engine::kPanel

  // weights (model_workspace.cpp)
  engine::Weight<S> wte;
  S* dwte = nullptr;
  const S* wpe = nullptr;
  S* dwpe = nullptr;
  engine::Weight<S> unembedding;  // U (V×d): wte when tied
  S* dunembedding = nullptr;
  NormWeights<S> lnf;
  std::vector<LayerWeights> layers;

  // workspace for (B, T, pass) (model_workspace.cpp)
  int B = 0, T_ = 0, N = 0;
  Pass pass = Pass::eval;        // the last forward's pass
  bool train_workspace = false;  // every layer's activations kept (a training pass needs it; an eval pass may use it)
  bool allocated = false;
  std::vector<LayerActs> acts;           // L (train) or 1 (eval)
  std::vector<Buffer<S>> x;              // block inputs X_0 … X_L (train, dense) or 2 (eval)
  std::vector<Buffer<S>> y;              // DenseFormer's raw block outputs Y_0 … Y_L
  std::vector<Buffer<S>> kown, vown;     // each layer's own key and value heads
  std::vector<Buffer<S>> dkown, dvown;   // their gradients (train)
  std::vector<Buffer<S>> qown, dqown;    // resformer-q: queries a later layer reads, their gradients (train)
  Buffer<S> qmix;                        // a layer's mixed queries, or (backward) their gradient
  Buffer<S> shared_kv_[2];               // eval: own heads nobody reuses (keys, values)
  Buffer<S> mla_tmp[3], dc;              // MLA: q_C or k_C (N, H·d_h), q_R (N, H·d_R), k_R (N, d_R); dc
  Buffer<S> a, mlp, nf, meanf, rstdf;
  Head<S> head;                          // logits, losses, dnf (lm/head.hpp)
  Buffer<std::int32_t> ids, targets;
  Buffer<S> dx, dn, dact, dh1, dh2, dz, dq, dkmix, dvmix, dpattern;
  std::vector<Buffer<S>> dy;             // DenseFormer: gradients of Y_0 … Y_L
  bool have_targets = false;
  std::vector<S> staging;                // host copies for the recorder (non-CPU backends)
  Buffer<double> pattern_sums;           // a layer's PatternSums when a recorder takes them
  std::vector<double> sums_staging;      // their host copy (non-CPU backends)
  Buffer<double> state_sums;             // a site's StateReduction when a recorder takes it
  std::vector<double> state_staging;     // its host copy (non-CPU backends)

  // Decoding (model_decode.cpp). The positions computed are past … past + T_ − 1 of each sequence;
  // the buffers that span positions (own heads, mixed heads, MLA's rotary keys) hold `cap` rows per
  // sequence. A plain forward is the case past = 0, cap = T_; incremental decoding keeps them as the
  // cache (`caching`).
  int past = 0, cap = 0;
  bool caching = false;
  bool drop_shared = false;              // the tests' faulty cache: heads from other layers read as zero
  std::vector<Buffer<S>> krown;          // MLA, caching: each layer's rotary key k_R
  Buffer<S> fresh;                       // caching, B > 1: the new positions' own heads before store()
  std::vector<engine::View<const S>> in_place[2];  // caching: the key (value) heads attended where they are cached

  // ---- sizes ------------------------------------------------------------------------------------

  bool dense() const { return config.variant.kind == VariantKind::denseformer; }
  bool gpt2() const { return config.family == Family::gpt2; }
  int qwidth() const { return config.heads * config.head_dim; }               // z: H heads of d_h
  int dk() const { return config.head_dim + (config.mla ? config.d_r : 0); }  // a query or key head's width
  int attn_kv() const { return config.mla ? config.heads : config.kv_heads; }  // key/value heads the attention sees
  int slot() const { return config.mla ? config.d_c / config.kv_heads : 0; }  // MLA: width of a latent slot
  // Width of one own head: keys d_h; values d_h, or a latent slot with MLA.
  int head_width(bool keys) const { return keys || !config.mla ? config.head_dim : slot(); }
  int own_heads(int l, bool keys) const {
    return keys ? plan[std::size_t(l)].own_key_heads : plan[std::size_t(l)].own_value_heads;
  }
  // Layer l's attention: its plan's key/value segments (cross-layer attention: 2).
  engine::AttentionShape shape(int l) const {
    return {B, T_, config.heads, attn_kv(), dk(), config.head_dim, past, cap, plan[std::size_t(l)].segments};
  }
  int max_segments() const {
    int most = 1;
    for (const LayerPlan& p : plan) most = std::max(most, p.segments);
    return most;
  }

  // ---- the workspace's buffers (model_workspace.cpp) --------------------------------------------

  // The tensors of `full` a model holds as S (in16 false) or in 16 bits (in16 true) when its weights
  // are `w`: at bf16 and f16, every matrix but GPT-2's position table in 16 bits.
  static engine::ParameterLayout held_layout(const engine::ParameterLayout& full, engine::WeightType w, bool in16);
  engine::Weight<S> weight(const std::string& name);
  void store(const std::string& name, const float* values, std::size_t count);
  Linear linear(int l, const std::string& what);
  NormWeights<S> norm(const std::string& name);
  void resolve_weights();
  void resolve_layers();
  bool reused(int l, bool keys, bool queries = false) const;
  void allocate(int B_, int T__, Pass pass_, int capacity = 0);
  void check_tokens(const std::int32_t* ids_host, const std::int32_t* targets_host, int B_, int T__,
                    int past_ = 0) const;

  S* own_keys(int l) { return kown[std::size_t(l)].empty() ? shared_kv_[0].data() : kown[std::size_t(l)].data(); }
  S* own_values(int l) {
    return vown[std::size_t(l)].empty() ? shared_kv_[1].data() : vown[std::size_t(l)].data();
  }
  // Layer l's own key (value) heads, and their gradients, as per-head views.
  Heads<S> own(int l, bool keys) {
    return {keys ? own_keys(l) : own_values(l), own_heads(l, keys), head_width(keys)};
  }
  Heads<S> own_grad(int l, bool keys) {
    return {(keys ? dkown : dvown)[std::size_t(l)].data(), own_heads(l, keys), head_width(keys)};
  }
  S* rotary_key(int l) { return caching ? krown[std::size_t(l)].data() : mla_tmp[2].data(); }  // MLA's k_R
  LayerActs& act_of(int l) { return acts[train_workspace ? std::size_t(l) : 0]; }
  S* x_in(int l) {  // X_l
    if (train_workspace || dense()) return x[std::size_t(l)].data();
    return x[std::size_t(l % 2)].data();
  }

  // ---- the math (model.cpp) ---------------------------------------------------------------------

  void normalize(const S* x, const NormWeights<S>& w, S* out, S* mean, S* rstd) {
    lm::normalize(backend, config, N, x, w, out, mean, rstd);
  }
  void normalize_backward(const S* x, const NormWeights<S>& w, const S* mean, const S* rstd, const S* dn, S* dx) {
    lm::normalize_backward(backend, config, N, x, w, mean, rstd, dn, dx);
  }
  void emit(Recorder<S>* rec, Site site, int l, const S* p, int heads, int width);
  void reduce_state(Recorder<S>* rec, Site site, int l, const S* p, int heads, int width);
  const S* mixed(const Mix& mix, int l, bool keys, S* out);
  engine::KvHeads<S> attended(const Mix& mix, int l, bool keys, S* out);
  void unmix(const Mix& mix, bool keys, const S* dmix);
  void add_direct(int l, S* z);
  void add_direct_backward(int l, const S* dz);
  void mix_queries(int l, S* q);
  void unmix_queries(int l);
  KV project(int l, LayerActs& s);
  // An eval pass over whole sequences forms no pattern unless the recorder wants one: the attention
  // runs `block` queries at a time (attention_reduce), and reduces the patterns into pattern_sums
  // (columns, mass, entropy, each (B, H, T)) when the recorder takes them (Recorder::pattern_block).
  // 0: the pattern is formed (attention_forward).
  int query_block(int l, const Recorder<S>* rec) const;
  void attention_reduced(int l, LayerActs& s, const KV& kv, int block, const Recorder<S>* rec);
  std::size_t sums_count() const { return std::size_t(B) * config.heads * T_; }
  const double* host_sums() const {
    return backend.device() == engine::Device::cpu ? pattern_sums.data() : sums_staging.data();
  }
  void refuse_segments(int l, const Recorder<S>* rec) const;
  void attention_forward(int l, Recorder<S>* rec);
  void mlp_forward(int l);
  void dense_mix(int l);
  void layer_forward(int l, Recorder<S>* rec);
  void blocks_forward(Recorder<S>* rec);
  LossSum forward(const std::int32_t* ids_host, const std::int32_t* targets_host, int B_, int T__, Pass pass_,
                  double grad_scale, Recorder<S>* rec);
  void mlp_backward(int l);
  void project_backward(int l, LayerActs& s, bool own_k, bool own_v);
  void attention_backward(int l);
  void dense_backward(int l);
  void layer_backward(int l);
  void backward();

  // ---- MLA (model_mla.cpp) ----------------------------------------------------------------------

  void copy_heads(int rows, int width, Heads<S> from, Heads<S> to);
  KV project_mla(int l, LayerActs& s);
  void project_mla_backward(int l, LayerActs& s);

  // ---- decoding (model_decode.cpp) --------------------------------------------------------------

  // Whether the computed positions' rows are contiguous in a buffer that spans positions.
  bool contiguous() const { return B == 1 || cap == T_; }
  // fn(at, row, rows): rows row … row + rows − 1 of a per-position buffer are rows at … of one spanning positions.
  template <class F>
  void each_block(F&& fn) const {
    if (contiguous()) return fn(std::size_t(past), std::size_t(0), N);
    for (int b = 0; b < B; ++b) fn(std::size_t(b) * cap + past, std::size_t(b) * T_, T_);
  }
  // fn(row0, rows) over the positions 0 … past + T_ − 1 of every sequence, in a buffer that spans positions.
  template <class F>
  void each_sequence(F&& fn) const {
    if (B == 1 || cap == past + T_) return fn(std::size_t(0), B == 1 ? past + T_ : B * cap);
    for (int b = 0; b < B; ++b) fn(std::size_t(b) * cap, past + T_);
  }
  S* new_rows(S* spanning, int w);
  void store(S* spanning, int w);
  const S* whole_layer(const Mix& mix, bool keys);
  bool dropped(const Source& src, int l) const { return caching && drop_shared && src.layer != l; }
  void begin_cache(int B_, int capacity, int block);
  void extend(const std::int32_t* ids_host, int T__, S* logits_host);
  std::size_t cache_bytes() const;
};

}  // namespace qkvlab::lm
