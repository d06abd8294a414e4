// Model<S>::Impl's mixing of heads as lm/plan.hpp says (lm/model_impl.hpp): the key and value
// heads a layer attends with (mixed, or read in place with a cache), their backward, NeuTRENO's
// direct terms and resformer-q's query mix. The math of the block around them is model.cpp's.
#include "lm/model_impl.hpp"

namespace qkvlab::lm {

// ---- mixing (lm/plan.hpp) -------------------------------------------------------------------------

// The key (value) heads layer l attends with: its own buffer when the plan says "own heads as they
// are", else Σ w · source heads written into `out` (MLA: the latent's slots). Over every position
// so far (with a cache, the cached ones too: the cache keeps own heads only).
template <class S>
const S* Model<S>::Impl::mixed(const Mix& mix, int l, bool keys, S* out) {
  if (is_own(mix, l, own_heads(l, keys))) return keys ? own_keys(l) : own_values(l);
  if (const S* owner = whole_layer(mix, keys)) return owner;
  const int w = head_width(keys), G = int(mix.size());  // H_kv heads, or segments·H_kv
  const Heads<S> to{out, G, w};
  each_sequence([&](std::size_t r0, int rows) {
    for (int g = 0; g < G; ++g) {
      const engine::View<S> dst = to.head(g, r0);
      if (mix[std::size_t(g)].empty()) axpby(backend, rows, w, S(0), dst, S(0), dst);
      bool first = true;
      for (const Source& src : mix[std::size_t(g)]) {
        axpby(backend, rows, w, S(dropped(src, l) ? 0 : src.weight), own(src.layer, keys).head(src.head, r0),
              first ? S(0) : S(1), dst);
        first = false;
      }
    }
  });
  return out;
}

// The key (value) heads layer l attends with. With a cache, where the mix takes each head as it is
// from some layer (lm/plan.hpp's selects: SkipV1's own and layer-1 value heads, SkipKV1's keys),
// each is read in place where it is cached, a view per head (engine::KvHeads), instead of being
// copied into `out` over every position at every step; otherwise mixed()'s tensor. A faulty cache
// (drop_shared) takes mixed()'s path, where the dropped heads are zero.
template <class S>
engine::KvHeads<S> Model<S>::Impl::attended(const Mix& mix, int l, bool keys, S* out) {
  if (!caching || drop_shared || is_own(mix, l, own_heads(l, keys)) || !selects(mix)) return mixed(mix, l, keys, out);
  std::vector<engine::View<const S>>& views = in_place[keys ? 0 : 1];
  views.clear();
  for (const auto& sources : mix) {
    const engine::View<S> head = own(sources[0].layer, keys).head(sources[0].head);
    views.push_back({head.data, head.ld});
  }
  return engine::KvHeads<S>(views.data());
}

// dOwn[source] += w · dmix[g] for every source of every head g.
template <class S>
void Model<S>::Impl::unmix(const Mix& mix, bool keys, const S* dmix) {
  const int w = head_width(keys), G = int(mix.size());
  const Heads<const S> from{dmix, G, w};
  for (int g = 0; g < G; ++g)
    for (const Source& src : mix[std::size_t(g)])
      axpby(backend, N, w, S(src.weight), from.head(g), S(1), own_grad(src.layer, keys).head(src.head));
}

// NeuTRENO's direct terms: z_h += Σ w · (own value head of the source) for each query head h reading g.
template <class S>
void Model<S>::Impl::add_direct(int l, S* z) {
  const Mix& direct = plan[std::size_t(l)].direct;
  const int w = config.head_dim, H = config.heads, group = config.heads / config.kv_heads;
  for (int h = 0; h < H; ++h)
    for (const Source& s : direct[std::size_t(h / group)]) {
      const Heads<S> from{own_values(s.layer), plan[std::size_t(s.layer)].own_value_heads, w};
      each_block([&](std::size_t at, std::size_t row, int rows) {
        axpby(backend, rows, w, S(dropped(s, l) ? 0 : s.weight), from.head(s.head, at), S(1),
              Heads<S>{z, H, w}.head(h, row));
      });
    }
}

template <class S>
void Model<S>::Impl::add_direct_backward(int l, const S* dz) {
  const Mix& direct = plan[std::size_t(l)].direct;
  const int w = config.head_dim, H = config.heads, group = config.heads / config.kv_heads;
  for (int h = 0; h < H; ++h)
    for (const Source& s : direct[std::size_t(h / group)]) {
      const Heads<S> to{dvown[std::size_t(s.layer)].data(), plan[std::size_t(s.layer)].own_value_heads, w};
      axpby(backend, N, w, S(s.weight), Heads<const S>{dz, H, w}.head(h), S(1), to.head(s.head));
    }
}

// resformer-q: keeps layer l's queries (N, H·dk) when a later layer reads them, then replaces them by
// the plan's mix: q_h = Σ w · (query head of the source; layer l's own as just computed).
template <class S>
void Model<S>::Impl::mix_queries(int l, S* q) {
  const Mix& mix = plan[std::size_t(l)].queries;
  const int H = config.heads, w = dk();
  if (!qown[std::size_t(l)].empty()) backend.axpby(N, H * w, S(1), q, H * w, S(0), qown[std::size_t(l)].data(), H * w);
  if (is_own(mix, l, H)) return;
  const Heads<S> to{qmix.data(), H, w};
  for (int h = 0; h < H; ++h) {
    bool first = true;
    for (const Source& src : mix[std::size_t(h)]) {
      const Heads<S> from{src.layer == l ? q : qown[std::size_t(src.layer)].data(), H, w};
      axpby(backend, N, w, S(src.weight), from.head(src.head), first ? S(0) : S(1), to.head(h));
      first = false;
    }
  }
  backend.axpby(N, H * w, S(1), qmix.data(), H * w, S(0), q, H * w);
}

// Backward of mix_queries: dq of the mixed queries → dq of layer l's own (overwritten) and the
// sources' dqown; then what later layers sent to layer l's queries is added to dq.
template <class S>
void Model<S>::Impl::unmix_queries(int l) {
  const Mix& mix = plan[std::size_t(l)].queries;
  const int H = config.heads, w = dk();
  if (!is_own(mix, l, H)) {
    backend.axpby(N, H * w, S(1), dq.data(), H * w, S(0), qmix.data(), H * w);
    backend.fill(dq.size(), S(0), dq.data());
    const Heads<const S> from{qmix.data(), H, w};
    for (int h = 0; h < H; ++h)
      for (const Source& src : mix[std::size_t(h)]) {
        const Heads<S> to{src.layer == l ? dq.data() : dqown[std::size_t(src.layer)].data(), H, w};
        axpby(backend, N, w, S(src.weight), from.head(h), S(1), to.head(src.head));
      }
  }
  if (!dqown[std::size_t(l)].empty())
    backend.axpby(N, H * w, S(1), dqown[std::size_t(l)].data(), H * w, S(1), dq.data(), H * w);
}

#define QKVLAB_INSTANTIATE(S)                                                    \
  template const S* Model<S>::Impl::mixed(const Mix&, int, bool, S*);           \
  template engine::KvHeads<S> Model<S>::Impl::attended(const Mix&, int, bool, S*); \
  template void Model<S>::Impl::unmix(const Mix&, bool, const S*);              \
  template void Model<S>::Impl::add_direct(int, S*);                           \
  template void Model<S>::Impl::add_direct_backward(int, const S*);             \
  template void Model<S>::Impl::mix_queries(int, S*);                           \
  template void Model<S>::Impl::unmix_queries(int);
QKVLAB_INSTANTIATE(float)
QKVLAB_INSTANTIATE(double)
#undef QKVLAB_INSTANTIATE

}  // namespace qkvlab::lm
