#include "theory/claims.hpp"

#include <cmath>
#include <cstdio>

namespace qkvlab::theory {

std::vector<PointVariant> numbered(const std::vector<std::string>& labels) {
  std::vector<PointVariant> out;
  for (std::size_t k = 0; k < labels.size(); ++k) out.push_back({.label = labels[k], .entry = int(k)});
  return out;
}

ControlOutcome control_by_error(std::string name, double rel_err) {
  ControlOutcome c{std::move(name), std::nullopt, false, ""};
  if (std::isfinite(rel_err)) c.rel_err = rel_err;
  else c.note = "non-finite error";
  c.failed_as_expected = c.rel_err && *c.rel_err >= control_threshold;
  return c;
}

ControlOutcome control_by_detection(std::string name, bool detected, double rel_err) {
  ControlOutcome c{std::move(name), std::nullopt, detected, detected ? "singular basis detected" : "NOT detected"};
  if (std::isfinite(rel_err)) c.rel_err = rel_err;
  return c;
}

ControlOutcome control_by_rejection(std::string name, double statistic, double wrong, double std_err, double budget) {
  const double gap = std::abs(statistic - wrong), z = gap / std_err;
  ControlOutcome c{std::move(name), std::nullopt, false, ""};
  if (std::isfinite(gap)) c.rel_err = gap;
  c.failed_as_expected = std::isfinite(z) && z > budget;
  c.note = fmt("z = %.3g (rejected when > %g)", z, budget);
  return c;
}

MatD multiscale_inputs(Rng& rng, int d, int n) {
  MatD X = rng.gaussian(d, n);
  for (int j = 0; j < n; ++j)
    X.col(j) *= std::pow(10.0, n == 1 ? 0.0 : -3.0 + 6.0 * j / (n - 1)) / X.col(j).norm();
  return X;
}

std::string fmt(const char* format, double a, double b, double c, double d, double e) {
  char buf[240];
  std::snprintf(buf, sizeof buf, format, a, b, c, d, e);
  return buf;
}

const std::vector<Claim>& all_claims() {
  static const std::vector<Claim> claims = [] {
    std::vector<Claim> c;
    register_attention_claims(c);
    register_model_claims(c);
    register_norm_claims(c);
    register_rmt_claims(c);
    register_absorb_claims(c);
    register_scale_claims(c);
    register_extension_claims(c);
    register_fdim_claims(c);
    register_skipv1_claims(c);
    register_resformer_claims(c);
    return c;
  }();
  return claims;
}

}  // namespace qkvlab::theory
