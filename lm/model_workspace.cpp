// Model<S>::Impl's setup (lm/model_impl.hpp): the weights' pointers into the parameter set, the
// workspace for (B, T, pass), and the checks on a forward's input.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "core/errors.hpp"
#include "lm/model_impl.hpp"
#include "results/value.hpp"

namespace qkvlab::lm {

WeightOverflow::WeightOverflow(const std::string& tensor, std::size_t element, float value, engine::WeightType type)
    : UsageError("tensor \"" + tensor + "\" element " + std::to_string(element) + " (" + results::short_number(value) +
                 ") overflows " + engine::weight_type_name(type) + ": hold the weights in a wider type (--dtype bf16 or f32)"),
      element(element),
      value(value),
      type(type) {}

template <class S>
engine::ParameterLayout Model<S>::Impl::held_layout(const engine::ParameterLayout& full, engine::WeightType w,
                                                    bool in16) {
  engine::ParameterLayout held;
  for (const auto& spec : full.specs()) {
    const bool matrix = w != engine::WeightType::f32 && spec.shape.size() == 2 && spec.name != "wpe";
    if (matrix == in16) held.add(spec.name, spec.shape, spec.decay);
  }
  return held;
}

// The tensor `name` where it is held: float (with its gradient's place in params), or 16-bit.
template <class S>
engine::Weight<S> Model<S>::Impl::weight(const std::string& name) {
  if (const auto* spec = matrices.find(name)) return {values16.data() + spec->offset, weight_type, panel.data()};
  return params.value(name);
}

// Values of the configuration's tensor `name` (count of them, float) into where it is held: as S,
// or rounded to the nearest 16-bit value (exact for a checkpoint stored in that type).
template <class S>
void Model<S>::Impl::store(const std::string& name, const float* values, std::size_t count) {
  if (const auto* spec = matrices.find(name)) {  // a million at a time: no second copy of a large tensor
    std::vector<std::uint16_t> bits(std::min<std::size_t>(count, 1 << 20));
    for (std::size_t i0 = 0; i0 < count; i0 += bits.size()) {
      const std::size_t n = std::min(bits.size(), count - i0);
      for (std::size_t i = 0; i < n; ++i) {
        bits[i] = engine::narrow_bits(values[i0 + i], weight_type);
        if (std::isfinite(values[i0 + i]) && !std::isfinite(engine::widen_bits(bits[i], weight_type)))
          throw WeightOverflow(name, i0 + i, values[i0 + i], weight_type);
      }
      values16.upload(bits.data(), n, spec->offset + i0);
    }
    return;
  }
  const std::size_t offset = params.layout.at(name).offset;
  if constexpr (std::is_same_v<S, float>) return params.values.upload(values, count, offset);
  const std::vector<S> converted(values, values + count);
  params.values.upload(converted.data(), count, offset);
}

template <class S>
typename Model<S>::Impl::Linear Model<S>::Impl::linear(int l, const std::string& what) {
  Linear lin;
  const std::string w = layer_tensor(l, what + ".weight"), b = layer_tensor(l, what + ".bias");
  if (layout.find(w)) lin.W = weight(w), lin.dW = params.layout.find(w) ? params.grad(w) : nullptr;
  if (params.layout.find(b)) lin.b = params.value(b), lin.db = params.grad(b);
  return lin;
}

template <class S>
NormWeights<S> Model<S>::Impl::norm(const std::string& name) {
  NormWeights<S> n;
  if (!config.norm) return n;  // --norm none: no tensors, N is the identity
  n.g = params.value(name + ".weight"), n.dg = params.grad(name + ".weight");
  if (params.layout.find(name + ".bias")) n.b = params.value(name + ".bias"), n.db = params.grad(name + ".bias");
  return n;
}

template <class S>
void Model<S>::Impl::resolve_weights() {
  std::int64_t inner = 0;  // the products' inner dimension: in of W (in, out); d of the (V, d) embedding
  for (const auto& spec : matrices.specs())
    inner = std::max(inner, spec.shape[spec.name == "wte" || spec.name == "lm_head.weight" ? 1 : 0]);
  panel = Buffer<S>(backend, std::size_t(inner) * engine::kPanel);
  wte = weight("wte");
  if (layout.find("wpe")) wpe = params.value("wpe"), dwpe = params.grad("wpe");
  unembedding = config.tied ? wte : weight("lm_head.weight");
  if (weight_type != engine::WeightType::f32) return resolve_layers();  // no gradients: not trained
  dwte = params.grad("wte");
  dunembedding = config.tied ? dwte : params.grad("lm_head.weight");
  resolve_layers();
}

template <class S>
void Model<S>::Impl::resolve_layers() {
  lnf = norm("ln_f");
  layers.resize(std::size_t(config.layers));
  for (int l = 0; l < config.layers; ++l) {
    LayerWeights& w = layers[std::size_t(l)];
    w.ln1 = norm(layer_tensor(l, "ln_1")), w.ln2 = norm(layer_tensor(l, "ln_2"));
    w.q = linear(l, "attn.q"), w.k = linear(l, "attn.k"), w.v = linear(l, "attn.v"), w.o = linear(l, "attn.o");
    w.dkv = linear(l, "attn.dkv"), w.uk = linear(l, "attn.uk"), w.uv = linear(l, "attn.uv");
    w.kr = linear(l, "attn.kr"), w.qr = linear(l, "attn.qr");
    w.fc = linear(l, "mlp.fc"), w.proj = linear(l, "mlp.proj");
    w.gate = linear(l, "mlp.gate"), w.up = linear(l, "mlp.up"), w.down = linear(l, "mlp.down");
    if (plan[std::size_t(l)].dense)
      w.dwa = params.value(layer_tensor(l, "dwa")), w.ddwa = params.grad(layer_tensor(l, "dwa"));
  }
}

// Whether a later layer reads layer l's own keys (values; queries with `queries`).
template <class S>
bool Model<S>::Impl::reused(int l, bool keys, bool queries) const {
  for (std::size_t n = std::size_t(l) + 1; n < plan.size(); ++n) {
    const LayerPlan& p = plan[n];
    const Mix* none = nullptr;
    for (const Mix* mix : {queries ? &p.queries : keys ? &p.keys : &p.values, queries || keys ? none : &p.direct})
      if (mix)
        for (const auto& sources : *mix)
          for (const Source& s : sources)
            if (s.layer == l) return true;
  }
  return false;
}

// The workspace for (B, T): an eval pass reuses a training workspace of the same shape. With a
// capacity (incremental decoding), the cache of B sequences of `capacity` positions, fed T at a time.
template <class S>
void Model<S>::Impl::allocate(int B_, int T__, Pass pass_, int capacity) {
  pass = pass_, past = 0;
  if (allocated && !caching && !capacity && B_ == B && T__ == T_ && (train_workspace || pass_ == Pass::eval)) return;
  B = B_, T_ = T__, N = B_ * T__, train_workspace = pass_ == Pass::train;
  caching = capacity > 0, cap = caching ? capacity : T__;
  const bool train = train_workspace;
  const int L = config.layers, d = config.d, r = config.ffn, H = config.heads;
  const std::size_t n = std::size_t(N), rows = std::size_t(B) * cap, segments = std::size_t(max_segments());
  const std::size_t patterns = std::size_t(B) * H * T_ * cap * segments;
  auto buf = [&](std::size_t count) { return Buffer<S>(backend, count); };
  acts.clear();
  acts.resize(train ? std::size_t(L) : 1);
  auto needs_mix = [&](std::size_t i, bool keys) {
    auto mixes = [&](std::size_t l) {
      const LayerPlan& q = plan[l];
      return keys ? !is_own(q.keys, int(l), q.own_key_heads) : !is_own(q.values, int(l), q.own_value_heads);
    };
    if (train) return mixes(i);
    for (std::size_t l = 0; l < plan.size(); ++l)
      if (mixes(l)) return true;
    return false;
  };
  const std::size_t q_count = n * config.heads * dk(), k_count = rows * segments * attn_kv() * dk(),
                    v_count = rows * segments * attn_kv() * config.head_dim;
  for (std::size_t i = 0; i < acts.size(); ++i) {
    LayerActs& s = acts[i];
    s.n1 = buf(n * d), s.mean1 = buf(n), s.rstd1 = buf(n), s.q = buf(q_count);
    s.pattern = train ? buf(patterns) : Buffer<S>(), s.z = buf(n * qwidth()), s.m = buf(n * d);  // eval: at first use
    s.n2 = buf(n * d), s.mean2 = buf(n), s.rstd2 = buf(n), s.h1 = buf(n * r), s.act = buf(n * r);
    if (!gpt2()) s.h2 = buf(n * r);
    if (config.mla || needs_mix(i, true)) s.kmix = buf(k_count);
    if (config.mla || needs_mix(i, false)) s.vmix = buf(v_count);
    if (config.mla && needs_mix(i, false)) s.c = buf(rows * config.d_c);
  }
  const bool all_x = train || dense();
  x.clear();
  for (int i = 0; i < (all_x ? L + 1 : 2); ++i) x.push_back(buf(n * d));
  y.clear();
  if (dense())
    for (int i = 0; i <= L; ++i) y.push_back(buf(n * d));
  kown.clear(), vown.clear(), dkown.clear(), dvown.clear();
  for (int l = 0; l < L; ++l) {
    const LayerPlan& p = plan[std::size_t(l)];
    const std::size_t kc = rows * p.own_key_heads * head_width(true), vc = rows * p.own_value_heads * head_width(false);
    kown.push_back(train || reused(l, true) || (caching && !config.mla) ? buf(kc) : Buffer<S>());
    vown.push_back(train || reused(l, false) || caching ? buf(vc) : Buffer<S>());
    if (train) dkown.push_back(buf(kc)), dvown.push_back(buf(vc));
  }
  qown.clear(), dqown.clear();  // resformer-q: the queries a later layer reads, for these positions
  bool mixes_queries = false;
  for (int l = 0; l < L; ++l) {
    const bool read = reused(l, false, true);
    qown.push_back(read ? buf(q_count) : Buffer<S>());
    dqown.push_back(read && train ? buf(q_count) : Buffer<S>());
    mixes_queries = mixes_queries || !is_own(plan[std::size_t(l)].queries, l, H);
  }
  qmix = mixes_queries ? buf(q_count) : Buffer<S>();
  shared_kv_[0] = train ? Buffer<S>() : buf(n * config.kv_heads * head_width(true));
  shared_kv_[1] = train ? Buffer<S>() : buf(n * config.kv_heads * head_width(false));
  if (config.mla) {  // MLA's projections of one layer at a time, before they are interleaved per head
    mla_tmp[0] = buf(rows * qwidth()), mla_tmp[1] = buf(n * config.heads * config.d_r), mla_tmp[2] = buf(n * config.d_r);
    if (train) dc = buf(n * config.d_c);
  }
  krown.clear();
  for (int l = 0; l < L && caching && config.mla; ++l) krown.push_back(buf(rows * config.d_r));
  const int fresh_width = std::max({config.kv_heads * config.head_dim, config.d_c, config.d_r});
  fresh = caching && B > 1 ? buf(n * fresh_width) : Buffer<S>();
  a = buf(n * d), mlp = buf(n * d), nf = buf(n * d), meanf = buf(n), rstdf = buf(n);
  head = Head<S>(backend, N, d, config.vocab, train);
  ids = Buffer<std::int32_t>(backend, n), targets = Buffer<std::int32_t>(backend, n);
  dy.clear();
  if (train) {
    dx = buf(n * d), dn = buf(n * d), dact = buf(n * r), dh1 = buf(n * r);
    if (!gpt2()) dh2 = buf(n * r);
    dz = buf(n * qwidth()), dq = buf(q_count), dkmix = buf(k_count), dvmix = buf(v_count);
    dpattern = buf(patterns);
    if (dense())
      for (int i = 0; i <= L; ++i) dy.push_back(buf(n * d));
  }
  allocated = true;
}

// past: positions before these T (a decoder's cache).
template <class S>
void Model<S>::Impl::check_tokens(const std::int32_t* ids_host, const std::int32_t* targets_host, int B_, int T__,
                                  int past_) const {
  if (B_ < 1 || T__ < 1) throw std::invalid_argument("forward: need at least one sequence of one token");
  if (past_ + T__ > config.positions)
    throw std::invalid_argument("sequences of " + std::to_string(past_ + T__) + " tokens are longer than the model's " +
                                std::to_string(config.positions) + " positions");
  for (std::size_t n = 0; n < std::size_t(B_) * T__; ++n) {
    if (ids_host[n] < 0 || ids_host[n] >= config.vocab)
      throw std::invalid_argument("token id " + std::to_string(ids_host[n]) + " at position " + std::to_string(n) +
                                  " is outside the vocabulary [0, " + std::to_string(config.vocab) + ")");
    if (targets_host && targets_host[n] >= config.vocab)
      throw std::invalid_argument("target id " + std::to_string(targets_host[n]) + " at position " +
                                  std::to_string(n) + " is outside the vocabulary");
  }
}

#define QKVLAB_INSTANTIATE(S)                                                                               \
  template Model<S>::Impl::Linear Model<S>::Impl::linear(int, const std::string&);                         \
  template NormWeights<S> Model<S>::Impl::norm(const std::string&);                                        \
  template void Model<S>::Impl::resolve_weights();                                                         \
  template void Model<S>::Impl::resolve_layers();                                                          \
  template engine::ParameterLayout Model<S>::Impl::held_layout(const engine::ParameterLayout&, engine::WeightType, \
                                                               bool);                                      \
  template engine::Weight<S> Model<S>::Impl::weight(const std::string&);                                   \
  template void Model<S>::Impl::store(const std::string&, const float*, std::size_t);                      \
  template bool Model<S>::Impl::reused(int, bool, bool) const;                                                \
  template void Model<S>::Impl::allocate(int, int, Pass, int);                                             \
  template void Model<S>::Impl::check_tokens(const std::int32_t*, const std::int32_t*, int, int, int) const;
QKVLAB_INSTANTIATE(float)
QKVLAB_INSTANTIATE(double)
#undef QKVLAB_INSTANTIATE

}  // namespace qkvlab::lm
