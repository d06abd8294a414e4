#include "theory/claims.hpp"

#include <cmath>

namespace qkvlab::theory {

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

const std::vector<Claim>& all_claims() {
  static const std::vector<Claim> claims = [] {
    std::vector<Claim> c;
    register_attention_claims(c);
    register_model_claims(c);
    register_norm_claims(c);
    register_rmt_claims(c);
    register_absorb_claims(c);
    register_scale_claims(c);
    return c;
  }();
  return claims;
}

}  // namespace qkvlab::theory
