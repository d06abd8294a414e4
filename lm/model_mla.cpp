// Model<S>::Impl's multi-head latent attention (lm/model_impl.hpp; docs/math/lm.md): per layer, a
// latent c of the plan's mix of slots n1 W_DKV, and per head h
//   q_h = [n1 W_Q, RoPE(n1 W_QR)]_h,   k_h = [c W_UK, RoPE(n1 W_KR)]_h,   v_h = (c W_UV)_h,
// the rotary key k_R = RoPE(n1 W_KR) shared by every head. The attention sees H key and value heads
// of width d_h + d_R (keys) and d_h (values), the content and rotary parts side by side in each head.
#include "lm/model_impl.hpp"

namespace qkvlab::lm {

// Head h of `from` into head h of `to`, for every head of `from` (`rows` rows of `width` columns).
template <class S>
void Model<S>::Impl::copy_heads(int rows, int width, Heads<S> from, Heads<S> to) {
  for (int h = 0; h < from.count; ++h) axpby(backend, rows, width, S(1), from.head(h), S(0), to.head(h));
}

// With a cache, the latent slots and k_R of the new positions are cached and the keys and values
// of every position are expanded from them at each step (no absorption of W_UK into W_Q).
template <class S>
typename Model<S>::Impl::KV Model<S>::Impl::project_mla(int l, LayerActs& s) {
  const LayerPlan& p = plan[std::size_t(l)];
  const LayerWeights& w = layers[std::size_t(l)];
  const int d = config.d, dh = config.head_dim, dr = config.d_r, H = config.heads, dc = config.d_c;
  const int cw = p.own_value_heads * slot();
  const Heads<S> q_content{s.q.data(), H, dk()}, q_rotary{s.q.data(), H, dk(), dh};
  engine::linear_forward<S>(backend, N, d, qwidth(), {s.n1.data(), d}, w.q.W, w.q.b, {mla_tmp[0].data(), qwidth()});
  copy_heads(N, dh, {mla_tmp[0].data(), H, dh}, q_content);
  if (p.own_value_heads) {
    engine::linear_forward<S>(backend, N, d, cw, {s.n1.data(), d}, w.dkv.W, nullptr, {new_rows(own_values(l), cw), cw});
    store(own_values(l), cw);
  }
  const S* c = mixed(p.values, l, false, s.c.data());
  if (dr > 0) {
    engine::linear_forward<S>(backend, N, d, H * dr, {s.n1.data(), d}, w.qr.W, nullptr, {mla_tmp[1].data(), H * dr});
    backend.rope(B, T_, past, H, dr, H * dr, config.rope_frequencies(), false, mla_tmp[1].data());
    copy_heads(N, dr, {mla_tmp[1].data(), H, dr}, q_rotary);
    S* kr = new_rows(rotary_key(l), dr);
    engine::linear_forward<S>(backend, N, d, dr, {s.n1.data(), d}, w.kr.W, nullptr, {kr, dr});
    backend.rope(B, T_, past, 1, dr, dr, config.rope_frequencies(), false, kr);
    store(rotary_key(l), dr);
  }
  each_sequence([&](std::size_t r0, int rows) {
    const Heads<S> keys{s.kmix.data(), H, dk()}, rotary_keys{s.kmix.data(), H, dk(), dh};
    const Heads<S> k_content{mla_tmp[0].data(), H, dh};
    engine::linear_forward<S>(backend, rows, dc, qwidth(), {c + r0 * dc, dc}, w.uk.W, nullptr,
                              {mla_tmp[0].data() + r0 * qwidth(), qwidth()});
    copy_heads(rows, dh, k_content.from_row(r0), keys.from_row(r0));
    engine::linear_forward<S>(backend, rows, dc, qwidth(), {c + r0 * dc, dc}, w.uv.W, nullptr,
                              {s.vmix.data() + r0 * qwidth(), qwidth()});
    for (int h = 0; h < H && dr > 0; ++h)
      axpby(backend, rows, dr, S(1), engine::View<S>{rotary_key(l) + r0 * dr, dr}, S(0), rotary_keys.head(h, r0));
  });
  return {s.kmix.data(), s.vmix.data()};
}

// From dq, dkmix, dvmix (the attention's q, k, v gradients) to dn.
template <class S>
void Model<S>::Impl::project_mla_backward(int l, LayerActs& s) {
  const LayerPlan& p = plan[std::size_t(l)];
  const LayerWeights& w = layers[std::size_t(l)];
  const int d = config.d, dh = config.head_dim, dr = config.d_r, H = config.heads, dcw = config.d_c;
  const bool own_c = is_own(p.values, l, p.own_value_heads);
  const S* c = own_c ? own_values(l) : s.c.data();
  const Heads<S> dq_heads{dq.data(), H, dk()}, dk_heads{dkmix.data(), H, dk()};
  copy_heads(N, dh, dq_heads, {mla_tmp[0].data(), H, dh});  // dq_C
  engine::linear_backward<S>(backend, N, d, qwidth(), {s.n1.data(), d}, w.q.W.f, {mla_tmp[0].data(), qwidth()},
                             {dn.data(), d}, w.q.dW, w.q.db);
  copy_heads(N, dh, dk_heads, {mla_tmp[0].data(), H, dh});  // dk_C
  S* dlatent = own_c ? dvown[std::size_t(l)].data() : dc.data();
  engine::linear_backward<S>(backend, N, dcw, qwidth(), {c, dcw}, w.uk.W.f, {mla_tmp[0].data(), qwidth()},
                             {dlatent, dcw}, w.uk.dW, nullptr, own_c);
  engine::linear_backward<S>(backend, N, dcw, qwidth(), {c, dcw}, w.uv.W.f, {dvmix.data(), qwidth()}, {dlatent, dcw},
                             w.uv.dW, nullptr, true);
  if (!own_c) unmix(p.values, false, dc.data());
  if (dr > 0) {
    copy_heads(N, dr, {dq.data(), H, dk(), dh}, {mla_tmp[1].data(), H, dr});  // dq_R
    backend.rope(B, T_, 0, H, dr, H * dr, config.rope_frequencies(), true, mla_tmp[1].data());
    engine::linear_backward<S>(backend, N, d, H * dr, {s.n1.data(), d}, w.qr.W.f, {mla_tmp[1].data(), H * dr},
                               {dn.data(), d}, w.qr.dW, nullptr, true);
    const Heads<S> dk_rotary{dkmix.data(), H, dk(), dh};
    for (int h = 0; h < H; ++h)  // dk_R: the shared rotary key collects every head's gradient
      axpby(backend, N, dr, S(1), dk_rotary.head(h), h ? S(1) : S(0), engine::View<S>{mla_tmp[2].data(), dr});
    backend.rope(B, T_, 0, 1, dr, dr, config.rope_frequencies(), true, mla_tmp[2].data());
    engine::linear_backward<S>(backend, N, d, dr, {s.n1.data(), d}, w.kr.W.f, {mla_tmp[2].data(), dr}, {dn.data(), d},
                               w.kr.dW, nullptr, true);
  }
  if (p.own_value_heads)
    engine::linear_backward<S>(backend, N, d, p.own_value_heads * slot(), {s.n1.data(), d}, w.dkv.W.f,
                               {dvown[std::size_t(l)].data(), p.own_value_heads * slot()}, {dn.data(), d}, w.dkv.dW,
                               nullptr, true);
}

#define QKVLAB_INSTANTIATE(S)                                                                      \
  template void Model<S>::Impl::copy_heads(int, int, Heads<S>, Heads<S>);                          \
  template Model<S>::Impl::KV Model<S>::Impl::project_mla(int, Model<S>::Impl::LayerActs&);        \
  template void Model<S>::Impl::project_mla_backward(int, Model<S>::Impl::LayerActs&);
QKVLAB_INSTANTIATE(float)
QKVLAB_INSTANTIATE(double)
#undef QKVLAB_INSTANTIATE

}  // namespace qkvlab::lm
