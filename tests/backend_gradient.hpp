// A gradient check for models written on engine/backend.hpp in double (the ICL models of
// synthetic/icl, absorb fit's skipless MLP): a Model has params() (its engine::ParameterSet<double>),
// backend(), loss(batch) (the forward pass) and add_gradient(batch) (forward and backward, adding
// into params().grads). Each tensor's gradient is compared with central differences of loss
// (h = 1e-5) as rel_err = ‖g_fd − g‖ / ‖g_fd‖ (docs/math/conventions.md, the finite differences
// the reference).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace qkvlab::test_support {

// ‖g_fd − g‖ / ‖g_fd‖ for each parameter tensor, g_fd the central differences
// of model.loss(batch) in each of its entries and g the given analytic gradient
// (the flat array of the model's ParameterSet).
template <class Model, class Batch>
std::map<std::string, double> tensor_errors(Model& m, const Batch& batch, const std::vector<double>& analytic) {
  auto& params = m.params();
  std::vector<double> values = params.values.to_host();
  std::map<std::string, double> errors;
  const double h = 1e-5;
  for (const auto& spec : params.layout.specs()) {
    double num = 0, den = 0;
    for (std::size_t i = spec.offset; i < spec.offset + spec.size(); ++i) {
      const double keep = values[i];
      values[i] = keep + h;
      params.values.upload(values);
      const double up = m.loss(batch);
      values[i] = keep - h;
      params.values.upload(values);
      const double down = m.loss(batch);
      values[i] = keep;
      const double fd = (up - down) / (2 * h);
      num += (fd - analytic[i]) * (fd - analytic[i]), den += fd * fd;
    }
    params.values.upload(values);
    errors[spec.name] = std::sqrt(num / den);
  }
  return errors;
}

template <class Model, class Batch>
std::vector<double> analytic_gradient(Model& m, const Batch& batch) {
  auto& params = m.params();
  m.backend().fill(params.grads.size(), 0.0, params.grads.data());
  m.add_gradient(batch);
  return params.grads.to_host();
}

inline double largest(const std::map<std::string, double>& errors) {
  double worst = 0;
  for (const auto& [name, e] : errors) worst = std::max(worst, e);
  return worst;
}

// The gradient of every tensor within 1e-7 of central differences; controls:
// each tensor's gradient off by 1e-3 relative (a perturbed backward) is caught,
// and so is the gradient of another batch.
template <class Model, class Batch>
void expect_gradient_matches(Model& m, const Batch& batch, const Batch& other, const std::string& what) {
  const std::vector<double> analytic = analytic_gradient(m, batch);
  EXPECT_LT(largest(tensor_errors(m, batch, analytic)), 1e-7) << what;
  for (const auto& spec : m.params().layout.specs()) {
    std::vector<double> perturbed = analytic;
    for (std::size_t i = spec.offset; i < spec.offset + spec.size(); ++i) perturbed[i] *= 1 + 1e-3;
    EXPECT_GT(tensor_errors(m, batch, perturbed)[spec.name], 5e-4) << what << " " << spec.name;
  }
  EXPECT_GT(largest(tensor_errors(m, batch, analytic_gradient(m, other))), 1e-2) << what;
}

}  // namespace qkvlab::test_support
