// Model<S>::Impl's incremental decoding (lm/model_impl.hpp, lm/model.hpp's begin_cache and
// extend): which rows of the buffers spanning positions the new positions take, the cache's
// reset and size, one step, and the logits of each sequence's last position. The math is the
// plain forward's (model.cpp).
#include <stdexcept>
#include <string>

#include "lm/model_impl.hpp"

namespace qkvlab::lm {

// Where the computed positions' own heads (w columns) of a buffer spanning positions are written:
// in place where contiguous, else into `fresh`, which store() copies in.
template <class S>
S* Model<S>::Impl::new_rows(S* spanning, int w) {
  return contiguous() ? spanning + std::size_t(past) * w : fresh.data();
}

template <class S>
void Model<S>::Impl::store(S* spanning, int w) {
  if (contiguous()) return;
  each_block([&](std::size_t at, std::size_t row, int rows) {
    backend.axpby(rows, w, S(1), fresh.data() + row * w, w, S(0), spanning + at * w, w);
  });
}

// With a cache: the buffer of the one layer whose own heads `mix` takes unchanged (SVFormer's,
// YOCO-V's and CLA-V's values, SkipV1-YOCO's keys), read in place by a step instead of copied
// (MLA's latent, the input of one product; the attention's heads: attended()); null otherwise (and
// in a plain forward, whose backward expects the copy).
template <class S>
const S* Model<S>::Impl::whole_layer(const Mix& mix, bool keys) {
  if (!caching || drop_shared || mix.empty() || mix[0].empty()) return nullptr;
  const int owner = mix[0][0].layer;
  if (!is_own(mix, owner, own_heads(owner, keys))) return nullptr;
  return keys ? own_keys(owner) : own_values(owner);
}

template <class S>
void Model<S>::Impl::begin_cache(int B_, int capacity, int block) {
  if (B_ < 1 || block < 1 || capacity < block)
    throw std::invalid_argument("begin_cache: need B >= 1 and 1 <= block <= capacity");
  if (capacity > config.positions)
    throw std::invalid_argument("a cache of " + std::to_string(capacity) + " positions is longer than the model's " +
                                std::to_string(config.positions) + " positions");
  allocate(B_, block, Pass::eval, capacity);
  for (auto* spanning : {&kown, &vown, &krown})
    for (auto& b : *spanning) backend.fill(b.size(), S(0), b.data());
}

// The next T__ positions through the blocks, then the logits (host, B·V) = nf Uᵀ at the last of
// them in each sequence.
template <class S>
void Model<S>::Impl::extend(const std::int32_t* ids_host, int T__, S* logits_host) {
  if (!caching) throw std::logic_error("extend: no cache (begin_cache first)");
  check_tokens(ids_host, nullptr, B, T__, past);
  if (past + T__ > cap || B * T__ > int(ids.size()))
    throw std::invalid_argument("extend: " + std::to_string(T__) + " positions after " + std::to_string(past) +
                                " do not fit the cache (" + std::to_string(cap) + " positions, blocks of " +
                                std::to_string(int(ids.size()) / B) + ")");
  T_ = T__, N = B * T__;
  ids.upload(ids_host, std::size_t(N));
  blocks_forward(nullptr);
  head.logits(B, nf.data() + std::size_t(T_ - 1) * config.d, T_ * config.d, unembedding, logits_host);
  past += T__;
}

template <class S>
std::size_t Model<S>::Impl::cache_bytes() const {
  std::size_t count = 0;
  for (const auto* spanning : {&kown, &vown, &krown})
    for (const auto& b : *spanning) count += b.size();
  return caching ? count * sizeof(S) : 0;
}

#define QKVLAB_INSTANTIATE(S)                                                 \
  template S* Model<S>::Impl::new_rows(S*, int);                              \
  template void Model<S>::Impl::store(S*, int);                               \
  template const S* Model<S>::Impl::whole_layer(const Mix&, bool);            \
  template void Model<S>::Impl::begin_cache(int, int, int);                   \
  template void Model<S>::Impl::extend(const std::int32_t*, int, S*);         \
  template std::size_t Model<S>::Impl::cache_bytes() const;
QKVLAB_INSTANTIATE(float)
QKVLAB_INSTANTIATE(double)
#undef QKVLAB_INSTANTIATE

}  // namespace qkvlab::lm
