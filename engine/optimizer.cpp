#include "engine/optimizer.hpp"

#include <cmath>
#include <stdexcept>

namespace qkvlab::engine {

template <class S>
void AdamWState<S>::step(Backend<S>& backend, ParameterSet<S>& set, const AdamWConfig& config, double lr) {
  ++t;
  using AdamW = typename Backend<S>::AdamW;
  const AdamW a{lr, config.beta1, config.beta2, config.eps, config.weight_decay, t};
  AdamW plain = a, decayed = a;  // the transformers form as the kernel's (engine/adamw_config.hpp)
  if (config.form == AdamWForm::transformers) {
    const double shrink = 1 - lr * config.weight_decay;
    if (!(shrink > 0)) throw std::invalid_argument("transformers' AdamW needs lr x weight decay below 1");
    plain.eps = decayed.eps = config.eps / std::sqrt(1 - std::pow(config.beta2, double(t)));
    decayed.lr = lr * shrink, decayed.weight_decay = config.weight_decay / shrink;
  }
  for (const ParameterSpec& p : set.layout.specs())
    backend.adamw(p.size(), p.decay ? decayed : plain, p.decay, set.values.data() + p.offset,
                  set.grads.data() + p.offset, m.data() + p.offset, v.data() + p.offset);
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
