#include "core/absorb.hpp"

#include <Eigen/SVD>

#include <bit>
#include <sstream>
#include <stdexcept>

namespace qkvlab {

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::yes: return "yes";
    case Verdict::no: return "no";
    case Verdict::undecided: break;
  }
  return "undecided";
}

namespace {

std::string num(double x) {
  std::ostringstream s;
  s.precision(3);
  s << x;
  return s.str();
}

// A = [vec(W_2[:,i] w_iᵀ)]_i ∈ R^{d²×m} (column-major vec).
MatD rank_one_columns(const MatD& W_1, const MatD& W_2) {
  const Eigen::Index m = W_1.rows(), d = W_1.cols();
  MatD A(d * d, m);
  for (Eigen::Index i = 0; i < m; ++i) {
    const MatD outer = W_2.col(i) * W_1.row(i);
    A.col(i) = Eigen::Map<const VecD>(outer.data(), d * d);
  }
  return A;
}

std::vector<int> subset(std::uint64_t bits, int m) {
  std::vector<int> J;
  for (int i = 0; i < m; ++i)
    if (bits >> i & 1) J.push_back(i);
  return J;
}

}  // namespace

// Σ_i ‖W_2[:,i]‖ ‖w_i‖: invariant under the positive per-unit rescalings
// (w_i → c w_i, W_2[:,i] → W_2[:,i]/c) that leave the network unchanged.
static double unit_scale(const MatD& W_1, const MatD& W_2) {
  double sum = 0;
  for (Eigen::Index i = 0; i < W_1.rows(); ++i) sum += W_1.row(i).norm() * W_2.col(i).norm();
  return sum;
}

std::optional<std::string> absorption_hypothesis_failure(const MatD& W_1, const MatD& W_2, const AbsorbLimits& l) {
  const double eps = l.tol_factor * l.unit_roundoff;
  // Unit i is zero when its rank-one term W_2[:,i] w_iᵀ is below the rounding of
  // the sum of all of them (a scale-invariant test); the factor named is the one
  // that is zero, or relatively the smaller.
  const double total = unit_scale(W_1, W_2), n1 = W_1.norm(), n2 = W_2.norm();
  std::vector<int> rows, cols;
  for (Eigen::Index i = 0; i < W_1.rows(); ++i) {
    const double r = W_1.row(i).norm(), c = W_2.col(i).norm();
    if (r * c > eps * total) continue;
    const bool row = r == 0 || (c != 0 && r / n1 <= c / n2);
    (row ? rows : cols).push_back(int(i));
  }
  if (!rows.empty()) return "row " + std::to_string(rows.front()) + " of W_1 is zero";
  if (!cols.empty()) return "column " + std::to_string(cols.front()) + " of W_2 is zero";
  for (Eigen::Index i = 0; i < W_1.rows(); ++i) {
    const VecD u = W_1.row(i).transpose().normalized();
    for (Eigen::Index j = i + 1; j < W_1.rows(); ++j) {
      const VecD w = W_1.row(j).transpose();
      const double sine = (w - w.dot(u) * u).norm() / w.norm();
      if (sine <= eps)
        return "rows " + std::to_string(i) + " and " + std::to_string(j) + " of W_1 are collinear (sine " + num(sine) +
               ")";
    }
  }
  return std::nullopt;
}

AbsorbDecision decide_absorption(const MatD& W_1, const MatD& W_2, const AbsorbLimits& limits) {
  return decide_absorption(W_1, W_2, MatD::Identity(W_1.cols(), W_1.cols()), limits);
}

AbsorbDecision decide_absorption(const MatD& W_1, const MatD& W_2, const MatD& R, const AbsorbLimits& limits) {
  const Eigen::Index m = W_1.rows(), d = W_1.cols();
  if (m == 0 || d == 0 || W_2.rows() != d || W_2.cols() != m || R.rows() != d || R.cols() != d)
    throw std::invalid_argument("decide_absorption: shapes do not fit (W_1 m×d, W_2 d×m, R d×d)");
  AbsorbDecision out;
  const auto failure = absorption_hypothesis_failure(W_1, W_2, limits);
  out.hypotheses_hold = !failure;
  if (failure) out.hypothesis_failure = *failure;
  const double r_norm = R.norm();
  const double tau = limits.tol_factor * limits.unit_roundoff * unit_scale(W_1, W_2);
  out.tolerance = tau / r_norm;
  const std::string target = R.isIdentity(0.0) ? "-I" : "-R";

  auto accept = [&](std::vector<int> J, double residual, const std::string& how) {
    out.verdict = Verdict::yes;
    out.residual = residual / r_norm;
    out.reason = "W_2 P_J W_1 = " + target + " to tolerance with |J| = " + std::to_string(J.size()) + " >= d = " +
                 std::to_string(d) + " (" + how + ")";
    out.absorbed = absorb_skip<double>(W_1, W_2, J);
    out.J = std::move(J);
    return out;
  };
  // "no" needs the theorem's necessity, hence its hypotheses; without them only
  // the sufficiency direction is available and the answer is undecided.
  auto reject = [&](const std::string& why) {
    if (out.hypotheses_hold) {
      out.verdict = Verdict::no;
      out.reason = why;
    } else {
      out.verdict = Verdict::undecided;
      out.reason = "hypothesis fails: " + out.hypothesis_failure + "; no J found (" + why + ")";
    }
    return out;
  };

  const MatD A = rank_one_columns(W_1, W_2);
  const VecD b = -Eigen::Map<const VecD>(R.data(), d * d);
  Eigen::BDCSVD<MatD> svd(A, Eigen::ComputeThinU | Eigen::ComputeThinV);
  const double rank_threshold = limits.tol_factor * limits.unit_roundoff;
  svd.setThreshold(rank_threshold);
  const Eigen::Index rank = svd.rank();
  out.independent = rank == m;
  const VecD z = svd.solve(b);
  const double relax = (A * z - b).norm();
  out.relaxation_residual = relax / r_norm;
  if (!(relax <= tau))
    return reject("no real z solves sum_i z_i W_2[:,i] w_i^T = " + target + ": relaxation residual " +
                  num(out.relaxation_residual) + " > tolerance " + num(out.tolerance));

  if (out.independent) {
    std::vector<int> J;
    for (Eigen::Index i = 0; i < m; ++i)
      if (z(i) > 0.5) J.push_back(int(i));
    const double residual = (skip_product<double>(W_1, W_2, J) + R).norm();
    if (residual <= tau && Eigen::Index(J.size()) >= d) return accept(std::move(J), residual, "unique real solution, rounded");
    return reject("the rank-one matrices are independent and the unique real solution z is not 0/1 (rounded "
                  "residual " + num(residual / r_norm) + ")");
  }

  if (m > limits.max_exact) {
    out.verdict = Verdict::undecided;
    out.reason = "the " + std::to_string(m) + " rank-one matrices are dependent (rank " + std::to_string(rank) +
                 ") and the relaxation is feasible; exact search is limited to m <= " +
                 std::to_string(limits.max_exact);
    return out;
  }
  // Exhaustive search in Gray-code order: one column added or removed per step,
  // the running sum recomputed every 256 steps so that drift stays far below τ.
  VecD sum = -b;  // vec(R) + Σ_{i∈J} A_i
  std::uint64_t bits = 0;
  const std::uint64_t count = std::uint64_t(1) << m;
  for (std::uint64_t k = 1; k < count; ++k) {
    const int flip = std::countr_zero(k);
    bits ^= std::uint64_t(1) << flip;
    if (k % 256 == 0) {
      sum = -b;
      for (int i = 0; i < m; ++i)
        if (bits >> i & 1) sum += A.col(i);
    } else if (bits >> flip & 1) {
      sum += A.col(flip);
    } else {
      sum -= A.col(flip);
    }
    ++out.subsets_searched;
    if (sum.norm() <= 2 * tau && std::popcount(bits) >= d) {
      auto J = subset(bits, int(m));
      const double residual = (skip_product<double>(W_1, W_2, J) + R).norm();
      if (residual <= tau) return accept(std::move(J), residual, "exhaustive search");
    }
  }
  return reject("exhaustive search over all " + std::to_string(count) + " subsets found no J");
}

}  // namespace qkvlab
