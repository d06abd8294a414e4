// Every estimate of an icl::Theory in one list, for tests that compare two
// runs number by number.
#pragma once

#include "synthetic/icl/theory.hpp"

#include <vector>

namespace qkvlab::test_support {

inline std::vector<qkvlab::Estimate> all_estimates(const icl::Theory& t) {
  std::vector<qkvlab::Estimate> v;
  for (const auto* list : {&t.lambda, &t.c_a, &t.skipv1_value, &t.mha_bound, &t.gap}) v.insert(v.end(), list->begin(), list->end());
  for (const qkvlab::Estimate& e : {t.C, t.C3, t.W_hat_sq, t.LambdaB_sq, t.posterior.loss, t.posterior.residual,
                                 t.ridge.loss, t.ridge.residual})
    v.push_back(e);
  return v;
}

// The values and standard errors, and the residuals' χ² statistics.
inline std::vector<double> all_numbers(const icl::Theory& t) {
  std::vector<double> v;
  for (const qkvlab::Estimate& e : all_estimates(t)) v.insert(v.end(), {e.value, e.se});
  v.insert(v.end(), {t.posterior.residual_chi2, t.ridge.residual_chi2});
  return v;
}

}  // namespace qkvlab::test_support
