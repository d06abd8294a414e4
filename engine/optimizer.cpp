#include "engine/optimizer.hpp"

#include <cmath>

namespace qkvlab::engine {

template <class S>
void AdamWState<S>::step(Backend<S>& backend, ParameterSet<S>& set, const AdamWConfig& config, double lr) {
  ++t;
  const typename Backend<S>::AdamW a{lr, config.beta1, config.beta2, config.eps, config.weight_decay, t};
  for (const ParameterSpec& p : set.layout.specs())
    backend.adamw(p.size(), a, p.decay, set.values.data() + p.offset, set.grads.data() + p.offset,
                  m.data() + p.offset, v.data() + p.offset);
}

template <class S>
double clip_gradients(Backend<S>& backend, ParameterSet<S>& set, double max_norm) {
  S* g = set.grads.data();
  const std::size_t n = set.grads.size();  // padding is zero and stays zero
  const double norm = std::sqrt(backend.dot(n, g, g));
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm) {
    constexpr int cols = 1 << 12;
    const int rows = int(n / cols);
    const S s = S(max_norm / norm);
    if (rows) backend.axpby(rows, cols, s, g, cols, S(0), g, cols);
    if (n % cols) backend.axpby(1, int(n % cols), s, g + std::size_t(rows) * cols, cols, S(0), g + std::size_t(rows) * cols, cols);
  }
  return norm;
}

template class AdamWState<float>;
template class AdamWState<double>;
template double clip_gradients(Backend<float>&, ParameterSet<float>&, double);
template double clip_gradients(Backend<double>&, ParameterSet<double>&, double);

}  // namespace qkvlab::engine
