// The error model of docs/math/conventions.md.
//   rel_err = ‖a − b‖_F / ‖a‖_F (core/linalg.hpp), u = unit roundoff,
//   κ = the conditioning factor a check names, e = rel_err / (u κ).
// A check passes when e ≤ budget (default 1e3). The precision ladder fits
// log(rel_err) against log(u) over the precisions run: slope ≈ 1 for an exact
// identity (the error tracks u), ≈ 0 for an approximation.
#pragma once

#include <optional>
#include <vector>

namespace qkvlab {

inline constexpr double default_budget = 1e3;

// Absent when rel_err or κ is not finite.
std::optional<double> normalized_error(double rel_err, double u, double kappa);

struct LadderPoint {
  double u;
  double rel_err;
};

// Least-squares slope of log(rel_err) on log(u). Points with a zero or
// non-finite error are left out; absent when fewer than two remain.
std::optional<double> ladder_slope(const std::vector<LadderPoint>& points);

}  // namespace qkvlab
