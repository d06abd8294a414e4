// Optimizers over Parameters: AdamW (decoupled weight decay) and SGD with
// momentum, plus zero_grad and clipping by global norm.
//
// Design decision: an optimizer keeps its state per parameter *name*, created
// at zero on the first step that sees the name, and takes the parameter list
// at every step. So it never holds pointers into a model, and a checkpoint
// (checkpoint.hpp) can save and restore the state by name.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "engine/adamw_config.hpp"
#include "engine/tape.hpp"

namespace qkvlab::engine {

template <class S>
void zero_grad(const Parameters<S>& params) {
  for (Parameter<S>* p : params) p->grad.setZero();
}

// ‖g‖ = sqrt(Σ_p ‖grad_p‖_F²), accumulated in double.
template <class S>
double grad_norm(const Parameters<S>& params) {
  double sum = 0;
  for (const Parameter<S>* p : params) sum += p->grad.template cast<double>().squaredNorm();
  return std::sqrt(sum);
}

// Scales every gradient by max_norm / ‖g‖ when ‖g‖ > max_norm. Returns ‖g‖
// before clipping; a non-finite ‖g‖ leaves the gradients as they are, for the
// caller to see and report.
template <class S>
double clip_grad_norm(const Parameters<S>& params, double max_norm) {
  require(max_norm > 0, "clip_grad_norm: max_norm must be positive");
  const double norm = grad_norm(params);
  if (std::isfinite(norm) && norm > max_norm)
    for (Parameter<S>* p : params) p->grad *= S(max_norm / norm);
  return norm;
}

// Optimizer state is keyed by name, so two parameters must never share one.
template <class S>
void require_unique_names(const Parameters<S>& params) {
  std::set<std::string_view> names;
  for (const Parameter<S>* p : params)
    require(names.insert(p->name).second, "parameter name \"" + p->name + "\" is used twice");
}

// Moments named by parameter; a name seen for the first time starts at zero.
template <class S>
Mat<S>& moment(std::map<std::string, Mat<S>>& moments, const Parameter<S>& p) {
  Mat<S>& state = moments.try_emplace(p.name, Mat<S>::Zero(p.value.rows(), p.value.cols())).first->second;
  require(state.rows() == p.value.rows() && state.cols() == p.value.cols(),
          "optimizer: state for \"" + p.name + "\" has a different shape than the parameter");
  return state;
}


// Step t (counting from 1), gradient g, learning rate η:
//   m ← β1 m + (1 − β1) g,   v ← β2 v + (1 − β2) g²,
//   m̂ = m / (1 − β1^t),      v̂ = v / (1 − β2^t),
//   θ ← θ − η ( m̂ / (sqrt(v̂) + ε) + λ θ )      (λ θ: decoupled weight decay, Loshchilov & Hutter)
template <class S>
struct AdamW {
  explicit AdamW(AdamWConfig config_ = {}) : config(config_) {}

  AdamWConfig config;
  std::int64_t steps = 0;
  std::map<std::string, Mat<S>> m, v;

  void step(const Parameters<S>& params, double lr) {
    require_unique_names(params);
    ++steps;
    const S b1 = S(config.beta1), b2 = S(config.beta2), eps = S(config.eps);
    const S m_hat_scale = S(1 / (1 - std::pow(config.beta1, double(steps))));
    const S v_hat_scale = S(1 / (1 - std::pow(config.beta2, double(steps))));
    const S decay = S(lr * config.weight_decay), eta = S(lr);
    for (Parameter<S>* p : params) {
      Mat<S>& m_p = moment(m, *p);
      Mat<S>& v_p = moment(v, *p);
      m_p = b1 * m_p + (S(1) - b1) * p->grad;
      v_p = b2 * v_p + (S(1) - b2) * p->grad.cwiseAbs2();
      if (p->decay) p->value -= decay * p->value;
      p->value.array() -= eta * (m_hat_scale * m_p.array()) / ((v_hat_scale * v_p.array()).sqrt() + eps);
    }
  }
};

struct SgdConfig {
  double momentum = 0.9;
};

// v ← μ v + g,  θ ← θ − η v   (heavy-ball momentum as in PyTorch's SGD).
template <class S>
struct Sgd {
  explicit Sgd(SgdConfig config_ = {}) : config(config_) {}

  SgdConfig config;
  std::map<std::string, Mat<S>> velocity;

  void step(const Parameters<S>& params, double lr) {
    require_unique_names(params);
    for (Parameter<S>* p : params) {
      Mat<S>& v_p = moment(velocity, *p);
      v_p = S(config.momentum) * v_p + p->grad;
      p->value -= S(lr) * v_p;
    }
  }
};

}  // namespace qkvlab::engine
