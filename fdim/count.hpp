// The functional dimension of the network of config.hpp at a random point: the rank of the
// Jacobian of θ ↦ (outputs on --inputs sequences), its floating-point reading with the gap at the
// cut, and a certificate of both sides (docs/math/fdim.md, "Certificate"):
//   lower bound: an r × r minor of an MPFI enclosure of J (forward-mode duals over intervals at
//     the exactly representable point) is nonsingular by the preconditioned test ‖I − C A‖ < 1
//     below, so every matrix in the enclosure, the exact J among them, has rank ≥ r;
//   upper bound: the k gauge directions of gauges.hpp lie in the kernel by their symmetry
//     identities; each J g is enclosed in MPFI (it must contain 0 and be narrow), and q = their rank
//     of them are certified independent on a q × q minor: rank ≤ P − q.
// certified: both bounds hold and meet at the floating-point rank. The predicted deficiency is q (the
// span of the directions, which may be dependent) plus the formula terms. A Jacobian or a direction
// with a NaN or infinite entry is a NumericalError, never a rank.
#pragma once

#include "fdim/config.hpp"
#include "fdim/dual.hpp"
#include "fdim/gauges.hpp"
#include "results/value.hpp"

#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace qkvlab::fdim {

// At rank 0 there is no s_r: gap, relative and over_tolerance are NaN (null in the report), and so is
// the tolerance of an empty J (no s_1).
struct FloatRank {
  static constexpr double kUndefined = std::numeric_limits<double>::quiet_NaN();
  int rank = 0;
  double tolerance = 0;                // numpy's: max(m, P) · u · s_1
  double gap = kUndefined, relative = kUndefined;  // s_r / s_{r+1} (∞ at full rank or s_{r+1} = 0), s_r / s_1
  double over_tolerance = kUndefined;  // s_r / tolerance (BDCSVD deflates to exact zeros past the cut)
  std::vector<double> around_cut;      // s_{r−2} … s_{r+3}, where they exist
};
FloatRank float_rank(const MatD& J);

// Whether every matrix in the square enclosure A is nonsingular, by the preconditioned test
// ‖I − C A‖_∞ < 1 (then C A = I − R is invertible by the Neumann series, and so is every A), with
// C = mid(A)⁻¹ computed in 50-digit MPFR and I − C A evaluated in MPFI. Preconditioning keeps
// I − C A as narrow as the enclosure, where interval Gaussian elimination widens a pivot's row up to
// twofold a step and runs out of 50 digits on minors of order ~200. The reason when it fails.
struct Elimination {
  bool nonsingular = false;
  std::string reason;
};
Elimination certify_nonsingular(const Mat<Interval>& A);

struct Bound {
  long long value = 0;
  bool holds = false;
  std::string method, reason;
};

struct Count {
  Network config;
  long long parameters = 0, outputs = 0;
  FloatRank rank;
  std::vector<std::pair<int, int>> saturation;  // (inputs n, float rank on the first n)
  bool saturated = false;                       // the rank on the first N/2 inputs is already the rank on N
  Bound lower, upper;
  std::vector<Term> predicted;
  long long gauges_verified = 0;
  double gauge_residual = 0;                    // largest |J g| entry bound over the directions
  bool certified = false;
  std::optional<long long> free_rank;           // the same network with free queries
  bool free_certified = false;
  struct {                                      // wall time of this network's stages (not the free one's)
    double jacobian = 0, ranks = 0, lower = 0, upper = 0;
  } seconds;
};

// progress(stage, done, total) after each forward-mode column; certify = false skips the MPFI steps.
using ProgressFn = std::function<void(const std::string&, long long, long long)>;
Count count(const Network& c, bool certify, const ProgressFn& progress = {});

long long predicted_deficiency(const Count& n);
// The theory's gauge count of a configuration alone (its terms at a random point; no Jacobian).
long long predicted_deficiency(const Network& c);
// Twice the inputs whose output rows first exceed the parameters: enough that the rank on half of
// them can already be the rank on all (the count's saturation test).
int saturating_inputs(const Network& c);
results::Value count_value(const Count& n);

}  // namespace qkvlab::fdim
