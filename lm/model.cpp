// The model of lm/model.hpp: its math over the backend's kernels, a block's forward and backward
// top to bottom (lm/model_impl.hpp says where the rest lives: the plan's mixing of heads, MLA's
// projections, the workspace, decoding; lm/head.hpp is the head). Names follow the header's formulas: per layer ℓ, x (block
// input), n1, q, k, v (used keys and values), pattern, z, a (attention output), m = x + a, n2,
// h (MLP hidden), y (block output).
#include <stdexcept>
#include <string>

#include "core/errors.hpp"
#include "lm/model_impl.hpp"

namespace qkvlab::lm {

// ---- recording ------------------------------------------------------------------------------------

template <class S>
void Model<S>::Impl::emit(Recorder<S>* rec, Site site, int l, const S* p, int heads, int width) {
  if (rec && site != Site::pattern) reduce_state(rec, site, l, p, heads, width);
  if (!rec || !rec->wants(site, l)) return;
  const std::size_t count =
      site == Site::pattern ? std::size_t(B) * heads * T_ * T_ : std::size_t(N) * heads * width;
  if (backend.device() != engine::Device::cpu) {  // a host copy
    staging.resize(count);
    backend.download(staging.data(), p, count * sizeof(S));
    p = staging.data();
  }
  rec->record(Activation<S>{site, l, p, B, T_, heads, site == Site::pattern ? T_ : width});
}

// The reductions a recorder asks of a token-major site, on the backend; only they cross to the host.
// Laid out [norms (N) | unit (B·columns) | nonzero (B) | gram (B·m²)].
template <class S>
void Model<S>::Impl::reduce_state(Recorder<S>* rec, Site site, int l, const S* p, int heads, int width) {
  const StateRequest r = rec->state_request(site, l);
  if (!r.any()) return;
  const engine::StateShape whole{B, T_, heads, width}, unit{B, T_, heads, width, r.combine};
  const int C = whole.columns(), m = std::min(T_, C);
  const std::size_t at_unit = std::size_t(N), at_nonzero = at_unit + std::size_t(B) * unit.columns(),
                    at_gram = at_nonzero + std::size_t(B), count = at_gram + std::size_t(B) * m * m;
  if (state_sums.size() < count) state_sums = Buffer<double>(backend, count);
  double* d = state_sums.data();
  const engine::RowSums sums{r.norms ? d : nullptr, r.unit ? d + at_unit : nullptr, r.unit ? d + at_nonzero : nullptr};
  if (r.unit && r.norms && r.combine != engine::HeadCombination::concat) {  // the norms' rows are not the unit's
    backend.state_rows(whole, p, {sums.norms, nullptr, nullptr});
    backend.state_rows(unit, p, {nullptr, sums.unit, sums.nonzero});
  } else if (r.unit || r.norms) {
    backend.state_rows(unit, p, sums);
  }
  if (r.gram) backend.state_gram(B, T_, C, p, 1.0 / T_, d + at_gram);
  const double* host = d;
  if (backend.device() != engine::Device::cpu) {
    state_staging.resize(count);
    state_sums.download(state_staging.data(), count);
    host = state_staging.data();
  }
  rec->record_state({site, l, r.norms ? host : nullptr, r.unit ? host + at_unit : nullptr,
                     r.unit ? host + at_nonzero : nullptr, r.gram ? host + at_gram : nullptr, B, T_, unit.columns(), m});
}

// ---- forward --------------------------------------------------------------------------------------

// q = n1 W_Q (Q-identity: n1), own k, v = n1 W_K, n1 W_V, RoPE (llama), the plan's mixing.
template <class S>
typename Model<S>::Impl::KV Model<S>::Impl::project(int l, LayerActs& s) {
  const LayerPlan& p = plan[std::size_t(l)];
  const LayerWeights& w = layers[std::size_t(l)];
  const int d = config.d, dh = config.head_dim, kw = p.own_key_heads * dh, vw = p.own_value_heads * dh;
  if (p.identity_query)
    backend.axpby(N, d, S(1), s.n1.data(), d, S(0), s.q.data(), qwidth());
  else
    engine::linear_forward<S>(backend, N, d, qwidth(), {s.n1.data(), d}, w.q.W, w.q.b, {s.q.data(), qwidth()});
  if (config.rope()) backend.rope(B, T_, past, config.heads, dh, qwidth(), config.rope_frequencies(), false, s.q.data());
  mix_queries(l, s.q.data());
  if (p.own_key_heads) {
    S* k = new_rows(own_keys(l), kw);
    engine::linear_forward<S>(backend, N, d, kw, {s.n1.data(), d}, w.k.W, w.k.b, {k, kw});
    if (config.rope()) backend.rope(B, T_, past, p.own_key_heads, dh, kw, config.rope_frequencies(), false, k);
    store(own_keys(l), kw);
  }
  if (p.own_value_heads) {
    engine::linear_forward<S>(backend, N, d, vw, {s.n1.data(), d}, w.v.W, w.v.b, {new_rows(own_values(l), vw), vw});
    store(own_values(l), vw);
  }
  return {attended(p.keys, l, true, s.kmix.data()), attended(p.values, l, false, s.vmix.data())};
}

template <class S>
int Model<S>::Impl::query_block(int l, const Recorder<S>* rec) const {
  if (pass != Pass::eval || !shape(l).plain() || shape(l).segments > 1) return 0;  // segments: the pattern is formed
  if (rec && rec->pattern_block(l) > 0) return rec->pattern_block(l);
  return rec && rec->wants(Site::pattern, l) ? 0 : model_parts::kQueryBlock;
}

template <class S>
void Model<S>::Impl::attention_reduced(int l, LayerActs& s, const KV& kv, int block, const Recorder<S>* rec) {
  const bool sums = rec && rec->pattern_block(l) > 0, entropy = sums && rec->pattern_entropy(l);
  if (sums && pattern_sums.size() < 3 * sums_count()) pattern_sums = Buffer<double>(backend, 3 * sums_count());
  double* p = pattern_sums.data();
  backend.attention_reduce(shape(l), S(config.attention_scale(l)), s.q.data(), kv.k, kv.v, block, s.z.data(),
                           sums ? engine::PatternSums{p, p + sums_count(), entropy ? p + 2 * sums_count() : nullptr}
                                : engine::PatternSums{});
  if (!sums || backend.device() == engine::Device::cpu) return;
  sums_staging.resize(3 * sums_count());
  pattern_sums.download(sums_staging.data(), sums_staging.size());
}

// A layer attending over several key/value segments (cross-layer attention) has patterns over
// segments·T keys and k, v of segments·H_kv heads: the analyses of one layer's T keys refuse it,
// whether they take the activations whole or reduced (a state request of k or v).
template <class S>
void Model<S>::Impl::refuse_segments(int l, const Recorder<S>* rec) const {
  const LayerPlan& p = plan[std::size_t(l)];
  if (!rec || p.segments == 1) return;
  const auto reads = [&](Site s) { return rec->wants(s, l) || rec->state_request(s, l).any(); };
  if (rec->wants(Site::pattern, l) || reads(Site::k) || reads(Site::v) || rec->pattern_block(l) > 0)
    throw UsageError(to_string(config.variant.kind) + ": layer " + std::to_string(l + 1) + " attends over " +
                     std::to_string(p.segments) + " key/value segments (its own and layer " +
                     std::to_string(config.variant.source_layer) +
                     "'s), so one layer's attention pattern, keys and values are not defined for it");
}

// From n1 to z: the projections (MLA's or the standard ones), softmax attention (or, in an eval pass
// that needs no pattern, its reductions block by block of queries), the direct terms.
template <class S>
void Model<S>::Impl::attention_forward(int l, Recorder<S>* rec) {
  refuse_segments(l, rec);
  LayerActs& s = act_of(l);
  const KV kv = config.mla ? project_mla(l, s) : project(l, s);
  const int block = query_block(l, rec);
  if (block > 0) {
    attention_reduced(l, s, kv, block, rec);
  } else {
    const std::size_t patterns = std::size_t(B) * config.heads * T_ * shape(l).columns();
    if (s.pattern.size() < patterns) s.pattern = Buffer<S>(backend, patterns);
    backend.attention_forward(shape(l), S(config.attention_scale(l)), s.q.data(), kv.k, kv.v, s.pattern.data(),
                              s.z.data());
  }
  add_direct(l, s.z.data());
  emit(rec, Site::q, l, s.q.data(), config.heads, dk());
  emit(rec, Site::k, l, kv.k.data, attn_kv(), dk());
  emit(rec, Site::v, l, kv.v.data, attn_kv(), config.head_dim);
  if (block > 0 && rec && rec->pattern_block(l) > 0)
    rec->record_sums({l, host_sums(), host_sums() + sums_count(),
                      rec->pattern_entropy(l) ? host_sums() + 2 * sums_count() : nullptr, B, T_, config.heads});
  else
    emit(rec, Site::pattern, l, s.pattern.data(), config.heads, T_);
  emit(rec, Site::z, l, s.z.data(), config.heads, config.head_dim);
}

// mlp = MLP(n2): GELU (gpt2) or SwiGLU (llama).
template <class S>
void Model<S>::Impl::mlp_forward(int l) {
  const LayerWeights& w = layers[std::size_t(l)];
  LayerActs& s = act_of(l);
  const int d = config.d, r = config.ffn;
  const std::size_t nr = std::size_t(N) * r;
  if (gpt2()) {
    engine::linear_forward<S>(backend, N, d, r, {s.n2.data(), d}, w.fc.W, w.fc.b, {s.h1.data(), r});
    backend.gelu_forward(nr, config.gelu, s.h1.data(), s.act.data());
    engine::linear_forward<S>(backend, N, r, d, {s.act.data(), r}, w.proj.W, w.proj.b, {mlp.data(), d});
  } else {
    engine::linear_forward<S>(backend, N, d, r, {s.n2.data(), d}, w.gate.W, w.gate.b, {s.h1.data(), r});
    engine::linear_forward<S>(backend, N, d, r, {s.n2.data(), d}, w.up.W, w.up.b, {s.h2.data(), r});
    backend.swiglu_forward(nr, s.h1.data(), s.h2.data(), s.act.data());
    engine::linear_forward<S>(backend, N, r, d, {s.act.data(), r}, w.down.W, w.down.b, {mlp.data(), d});
  }
}

// X_{l+1} = Σ_{j ≤ l+1} α_{l,j} Y_j (DenseFormer), α read from the device once per layer.
template <class S>
void Model<S>::Impl::dense_mix(int l) {
  std::vector<S> alpha(std::size_t(l) + 2);
  backend.download(alpha.data(), layers[std::size_t(l)].dwa, alpha.size() * sizeof(S));
  S* out = x[std::size_t(l) + 1].data();
  for (int j = 0; j <= l + 1; ++j)
    backend.axpby(N, config.d, alpha[std::size_t(j)], y[std::size_t(j)].data(), config.d, j ? S(1) : S(0), out,
                  config.d);
}

// Block l, top to bottom: X_{l+1} from X_l.
template <class S>
void Model<S>::Impl::layer_forward(int l, Recorder<S>* rec) {
  const LayerWeights& w = layers[std::size_t(l)];
  LayerActs& s = act_of(l);
  const int d = config.d;
  const S* x = x_in(l);
  emit(rec, Site::resid_pre, l, x, 1, d);
  normalize(x, w.ln1, s.n1.data(), s.mean1.data(), s.rstd1.data());  // n1 = N_1(X_l)
  attention_forward(l, rec);                                          // z
  engine::linear_forward<S>(backend, N, qwidth(), d, {s.z.data(), qwidth()}, w.o.W, w.o.b, {a.data(), d});  // a = z W_O
  emit(rec, Site::attn_out, l, a.data(), 1, d);
  backend.axpby(N, d, S(1), x, d, S(0), s.m.data(), d);  // m = X_l + a
  backend.axpby(N, d, S(1), a.data(), d, S(1), s.m.data(), d);
  normalize(s.m.data(), w.ln2, s.n2.data(), s.mean2.data(), s.rstd2.data());  // n2 = N_2(m)
  mlp_forward(l);                                                             // MLP(n2)
  emit(rec, Site::mlp_out, l, mlp.data(), 1, d);
  S* out = dense() ? y[std::size_t(l) + 1].data() : x_in(l + 1);  // Y = m + MLP(n2)
  backend.axpby(N, d, S(1), s.m.data(), d, S(0), out, d);
  backend.axpby(N, d, S(1), mlp.data(), d, S(1), out, d);
  if (dense()) dense_mix(l);  // X_{l+1} = Y, or DenseFormer's Σ_j α_j Y_j
  emit(rec, Site::resid_post, l, x_in(l + 1), 1, d);
}

// From the ids on the device to nf = N_f(X_L) at positions past … past + T_ − 1.
template <class S>
void Model<S>::Impl::blocks_forward(Recorder<S>* rec) {
  S* x0 = dense() ? y[0].data() : x_in(0);
  engine::embedding_lookup(backend, B, T_, config.d, ids.data(), wte, wpe ? wpe + std::size_t(past) * config.d : nullptr,
                           x0);
  if (dense()) backend.axpby(N, config.d, S(1), x0, config.d, S(0), x_in(0), config.d);
  for (int l = 0; l < config.layers; ++l) layer_forward(l, rec);
  normalize(x_in(config.layers), lnf, nf.data(), meanf.data(), rstdf.data());
  emit(rec, Site::final, config.layers, nf.data(), 1, config.d);
}

template <class S>
LossSum Model<S>::Impl::forward(const std::int32_t* ids_host, const std::int32_t* targets_host, int B_, int T__,
                                Pass pass_, double grad_scale, Recorder<S>* rec) {
  check_tokens(ids_host, targets_host, B_, T__);
  allocate(B_, T__, pass_);
  ids.upload(ids_host, std::size_t(N));
  have_targets = targets_host != nullptr;
  LossSum result;
  if (have_targets) {
    targets.upload(targets_host, std::size_t(N));
    for (int n = 0; n < N; ++n) result.count += targets_host[n] >= 0;
  }
  blocks_forward(rec);
  if (!have_targets) return result;
  head.loss(N, nf.data(), unembedding, targets.data(), S(grad_scale), pass == Pass::train ? dunembedding : nullptr);
  std::vector<S> losses(static_cast<std::size_t>(N));
  head.losses().download(losses.data(), losses.size());
  for (S v : losses) result.sum += double(v);
  return result;
}

// ---- backward -------------------------------------------------------------------------------------

// dx holds dY (the block output's gradient): dn = ∂/∂n2 of MLP(n2).
template <class S>
void Model<S>::Impl::mlp_backward(int l) {
  const LayerWeights& w = layers[std::size_t(l)];
  LayerActs& s = act_of(l);
  const int d = config.d, r = config.ffn;
  const std::size_t nr = std::size_t(N) * r;
  if (gpt2()) {
    engine::linear_backward<S>(backend, N, r, d, {s.act.data(), r}, w.proj.W.f, {dx.data(), d}, {dact.data(), r},
                               w.proj.dW, w.proj.db);
    backend.fill(nr, S(0), dh1.data());
    backend.gelu_backward(nr, config.gelu, s.h1.data(), dact.data(), dh1.data());
    engine::linear_backward<S>(backend, N, d, r, {s.n2.data(), d}, w.fc.W.f, {dh1.data(), r}, {dn.data(), d}, w.fc.dW,
                               w.fc.db);
  } else {
    engine::linear_backward<S>(backend, N, r, d, {s.act.data(), r}, w.down.W.f, {dx.data(), d}, {dact.data(), r},
                               w.down.dW, w.down.db);
    backend.fill(nr, S(0), dh1.data());
    backend.fill(nr, S(0), dh2.data());
    backend.swiglu_backward(nr, s.h1.data(), s.h2.data(), dact.data(), dh1.data(), dh2.data());
    engine::linear_backward<S>(backend, N, d, r, {s.n2.data(), d}, w.gate.W.f, {dh1.data(), r}, {dn.data(), d},
                               w.gate.dW, w.gate.db);
    engine::linear_backward<S>(backend, N, d, r, {s.n2.data(), d}, w.up.W.f, {dh2.data(), r}, {dn.data(), d}, w.up.dW,
                               w.up.db, true);
  }
}

// Backward of project(): dq, the used keys' and values' gradients (dk, dv: own buffers when
// aliased, else dkmix/dvmix) → the own heads' gradients, then dn (overwritten).
template <class S>
void Model<S>::Impl::project_backward(int l, LayerActs& s, bool own_k, bool own_v) {
  const LayerPlan& p = plan[std::size_t(l)];
  const LayerWeights& w = layers[std::size_t(l)];
  const int d = config.d, dh = config.head_dim;
  if (!own_k) unmix(p.keys, true, dkmix.data());
  if (!own_v) unmix(p.values, false, dvmix.data());
  if (config.rope()) {
    backend.rope(B, T_, 0, config.heads, dh, qwidth(), config.rope_frequencies(), true, dq.data());
    if (p.own_key_heads)
      backend.rope(B, T_, 0, p.own_key_heads, dh, p.own_key_heads * dh, config.rope_frequencies(), true,
                   dkown[std::size_t(l)].data());
  }
  if (p.identity_query)
    backend.axpby(N, d, S(1), dq.data(), qwidth(), S(0), dn.data(), d);
  else
    engine::linear_backward<S>(backend, N, d, qwidth(), {s.n1.data(), d}, w.q.W.f, {dq.data(), qwidth()},
                               {dn.data(), d}, w.q.dW, w.q.db);
  if (p.own_key_heads)
    engine::linear_backward<S>(backend, N, d, p.own_key_heads * dh, {s.n1.data(), d}, w.k.W.f,
                               {dkown[std::size_t(l)].data(), p.own_key_heads * dh}, {dn.data(), d}, w.k.dW, w.k.db,
                               true);
  if (p.own_value_heads)
    engine::linear_backward<S>(backend, N, d, p.own_value_heads * dh, {s.n1.data(), d}, w.v.W.f,
                               {dvown[std::size_t(l)].data(), p.own_value_heads * dh}, {dn.data(), d}, w.v.dW, w.v.db,
                               true);
}

// From dz to dn = ∂/∂n1: softmax attention's backward, then the projections' (MLA's or standard).
template <class S>
void Model<S>::Impl::attention_backward(int l) {
  const LayerPlan& p = plan[std::size_t(l)];
  LayerActs& s = act_of(l);
  const bool own_k = !config.mla && is_own(p.keys, l, p.own_key_heads);
  const bool own_v = !config.mla && is_own(p.values, l, p.own_value_heads);
  const S* k = own_k ? own_keys(l) : s.kmix.data();
  const S* v = own_v ? own_values(l) : s.vmix.data();
  S* dk_ = own_k ? dkown[std::size_t(l)].data() : dkmix.data();
  S* dv_ = own_v ? dvown[std::size_t(l)].data() : dvmix.data();
  backend.fill(dq.size(), S(0), dq.data());
  if (!own_k) backend.fill(dkmix.size(), S(0), dkmix.data());
  if (!own_v) backend.fill(dvmix.size(), S(0), dvmix.data());
  backend.attention_backward(shape(l), S(config.attention_scale(l)), s.q.data(), k, v, s.pattern.data(), dz.data(),
                             dq.data(), dk_, dv_, dpattern.data());
  unmix_queries(l);
  if (config.mla)
    project_mla_backward(l, s);
  else
    project_backward(l, s, own_k, own_v);
}

// DenseFormer: dx = dX_{l+1} → dY_j += α_{l,j} dX_{l+1}, dα_{l,j} += ⟨Y_j, dX_{l+1}⟩; then dx = dY_{l+1}.
template <class S>
void Model<S>::Impl::dense_backward(int l) {
  const std::size_t count = std::size_t(N) * config.d;
  std::vector<S> alpha(std::size_t(l) + 2), dalpha(alpha.size());
  backend.download(alpha.data(), layers[std::size_t(l)].dwa, alpha.size() * sizeof(S));
  backend.download(dalpha.data(), layers[std::size_t(l)].ddwa, alpha.size() * sizeof(S));
  for (int j = 0; j <= l + 1; ++j) {
    dalpha[std::size_t(j)] += S(backend.dot(count, y[std::size_t(j)].data(), dx.data()));
    backend.axpby(N, config.d, alpha[std::size_t(j)], dx.data(), config.d, S(1), dy[std::size_t(j)].data(), config.d);
  }
  backend.upload(layers[std::size_t(l)].ddwa, dalpha.data(), alpha.size() * sizeof(S));
  backend.axpby(N, config.d, S(1), dy[std::size_t(l) + 1].data(), config.d, S(0), dx.data(), config.d);
}

// Block l backward, the forward read bottom to top: dx = dX_{l+1} on entry, dX_l on return.
template <class S>
void Model<S>::Impl::layer_backward(int l) {
  const LayerWeights& w = layers[std::size_t(l)];
  LayerActs& s = act_of(l);
  const int d = config.d;
  if (dense()) dense_backward(l);  // dY
  mlp_backward(l);                 // dn = ∂/∂n2
  normalize_backward(s.m.data(), w.ln2, s.mean2.data(), s.rstd2.data(), dn.data(), dx.data());  // dm = dY + ∂/∂m
  engine::linear_backward<S>(backend, N, qwidth(), d, {s.z.data(), qwidth()}, w.o.W.f, {dx.data(), d},
                             {dz.data(), qwidth()}, w.o.dW, w.o.db);  // dz = dm W_Oᵀ
  add_direct_backward(l, dz.data());
  attention_backward(l);  // dn = ∂/∂n1
  normalize_backward(x_in(l), w.ln1, s.mean1.data(), s.rstd1.data(), dn.data(), dx.data());  // dX_l = dm + ∂/∂X_l
}

template <class S>
void Model<S>::Impl::backward() {
  if (pass != Pass::train || !have_targets)
    throw std::logic_error("backward: the last forward pass was not a training pass with targets");
  const std::size_t count = std::size_t(N) * config.d;
  backend.fill(count, S(0), dx.data());
  for (auto& b : dkown) backend.fill(b.size(), S(0), b.data());
  for (auto& b : dvown) backend.fill(b.size(), S(0), b.data());
  for (auto& b : dqown) backend.fill(b.size(), S(0), b.data());
  for (auto& b : dy) backend.fill(b.size(), S(0), b.data());
  normalize_backward(x_in(config.layers), lnf, meanf.data(), rstdf.data(), head.dx(), dx.data());
  for (int l = config.layers - 1; l >= 0; --l) layer_backward(l);
  if (dense()) backend.axpby(N, config.d, S(1), dy[0].data(), config.d, S(1), dx.data(), config.d);
  backend.embedding_backward(B, T_, config.d, ids.data(), dx.data(), dwte, dwpe);
}

// ---- the public interface (lm/model.hpp) ---------------------------------------------------------

template <class S>
Model<S>::Model(const Config& config, engine::Backend<S>& backend, engine::WeightType weights)
    : impl_(std::make_unique<Impl>(config, backend, weights)) {}
template <class S>
Model<S>::~Model() = default;
template <class S>
const Config& Model<S>::config() const {
  return impl_->config;
}
template <class S>
const std::vector<LayerPlan>& Model<S>::plan() const {
  return impl_->plan;
}
template <class S>
engine::Backend<S>& Model<S>::backend() {
  return impl_->backend;
}
template <class S>
engine::ParameterSet<S>& Model<S>::parameters() {
  return impl_->params;
}

template <class S>
engine::WeightType Model<S>::weight_type() const {
  return impl_->weight_type;
}
template <class S>
std::size_t Model<S>::weight_bytes() const {
  return impl_->params.values.size() * sizeof(S) + impl_->values16.size() * sizeof(std::uint16_t);
}
template <class S>
void Model<S>::store(const std::string& name, const float* values, std::size_t count) {
  if (!impl_->layout.find(name) || impl_->layout.at(name).size() != count)
    throw std::invalid_argument("Model::store: no tensor " + name + " of " + std::to_string(count) + " values");
  impl_->store(name, values, count);
}

template <class S>
void Model<S>::initialize(std::uint64_t seed) {
  set_parameters(initial_values<S>(impl_->config, impl_->params.layout, seed));
}

template <class S>
void Model<S>::set_parameters(const std::vector<S>& values) {
  if (values.size() != impl_->params.layout.total())
    throw std::invalid_argument("set_parameters: " + std::to_string(values.size()) + " values for a layout of " +
                                std::to_string(impl_->params.layout.total()));
  impl_->params.values.upload(values);
}

template <class S>
std::vector<S> Model<S>::parameter_values() const {
  return impl_->params.values.to_host();
}

template <class S>
LossSum Model<S>::forward(const std::int32_t* ids, const std::int32_t* targets, int B, int T_, Pass pass,
                          double grad_scale, Recorder<S>* recorder) {
  if (pass == Pass::train && impl_->weight_type != engine::WeightType::f32)
    throw std::logic_error("Model: a model holding 16-bit weights is not trained (training keeps float32)");
  return impl_->forward(ids, targets, B, T_, pass, grad_scale, recorder);
}

template <class S>
void Model<S>::backward() {
  impl_->backward();
}

template <class S>
void Model<S>::begin_cache(int B, int capacity, int block) {
  impl_->begin_cache(B, capacity, block);
}

template <class S>
void Model<S>::extend(const std::int32_t* ids, int T, S* logits) {
  impl_->extend(ids, T, logits);
}

template <class S>
std::size_t Model<S>::cache_bytes() const {
  return impl_->cache_bytes();
}

template <class S>
void Model<S>::set_cache_fault(bool drop_shared) {
  impl_->drop_shared = drop_shared;
}

#define QKVLAB_INSTANTIATE(S)                                                                                  \
  template void Model<S>::Impl::emit(Recorder<S>*, Site, int, const S*, int, int);                            \
  template void Model<S>::Impl::reduce_state(Recorder<S>*, Site, int, const S*, int, int);                    \
  template LossSum Model<S>::Impl::forward(const std::int32_t*, const std::int32_t*, int, int, Pass, double, \
                                           Recorder<S>*);                                                     \
  template void Model<S>::Impl::blocks_forward(Recorder<S>*);                                                 \
  template void Model<S>::Impl::backward();                                                                   \
  template class Model<S>;
QKVLAB_INSTANTIATE(float)
QKVLAB_INSTANTIATE(double)
#undef QKVLAB_INSTANTIATE

}  // namespace qkvlab::lm
