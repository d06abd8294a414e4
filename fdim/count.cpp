#include "fdim/count.hpp"

#include "core/errors.hpp"
#include "core/limits.hpp"
#include "core/parallel.hpp"
#include "fdim/dual.hpp"
#include "fdim/network.hpp"

#include <Eigen/LU>
#include <Eigen/QR>
#include <Eigen/SVD>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace qkvlab::fdim {

namespace {

// J u on every input sequence, stacked (sequence, position, output), by one forward pass at Dual<T>.
template <class T>
Vec<T> directional(const Network& c, const Layout& L, const Vec<T>& theta, const Point& p, const Vec<T>& u) {
  Vec<Dual<T>> th(theta.size());
  for (Eigen::Index i = 0; i < theta.size(); ++i) th[i] = Dual<T>(theta[i], u[i]);
  const Eigen::Index per = Eigen::Index(c.seq) * c.output_dim();
  Vec<T> out(per * Eigen::Index(p.inputs.size()));
  for (std::size_t n = 0; n < p.inputs.size(); ++n) {
    const Mat<Dual<T>> y = forward<Dual<T>>(c, L, th, p.inputs[n]);
    for (Eigen::Index i = 0; i < y.rows(); ++i)
      for (Eigen::Index j = 0; j < y.cols(); ++j) out[Eigen::Index(n) * per + i * y.cols() + j] = y(i, j).d;
  }
  return out;
}

// The columns J e_j for j in cols (all when empty), on the thread pool.
template <class T>
Mat<T> columns(const Network& c, const Layout& L, const Vec<T>& theta, const Point& p, const std::vector<int>& cols,
               const std::string& stage, const ProgressFn& progress) {
  const auto k = Eigen::Index(cols.size());
  const Eigen::Index m = Eigen::Index(c.seq) * c.output_dim() * c.inputs;
  Mat<T> J(m, k);
  std::atomic<long long> done{0};
  parallel_for(k, c.threads, [&](std::int64_t j) {
    Vec<T> u = Vec<T>::Zero(theta.size());
    u[cols[j]] = T(1);
    J.col(j) = directional<T>(c, L, theta, p, u);
    if (progress) progress(stage, ++done, k);
  });
  return J;
}

// Seconds since the last lap (or the start).
class Stopwatch {
 public:
  double lap() {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

std::vector<int> first(const Eigen::VectorXi& perm, int r) { return {perm.data(), perm.data() + r}; }

// r independent columns of A, then r independent rows of those columns (column-pivoted QR); r is at
// most A's rank, so at most its rows and its columns.
std::pair<std::vector<int>, std::vector<int>> spanning_minor(const MatD& A, int r) {
  if (r > std::min(A.rows(), A.cols()))
    throw std::logic_error("fdim: a minor of order " + std::to_string(r) + " of a " + std::to_string(A.rows()) + " x " +
                           std::to_string(A.cols()) + " matrix");
  Eigen::ColPivHouseholderQR<MatD> qc(A);
  const std::vector<int> cols = first(qc.colsPermutation().indices(), r);
  MatD sub(A.rows(), r);
  for (int j = 0; j < r; ++j) sub.col(j) = A.col(cols[j]);
  Eigen::ColPivHouseholderQR<MatD> qr(sub.transpose());
  return {first(qr.colsPermutation().indices(), r), cols};
}

template <class M> Mat<Interval> pick(const M& A, const std::vector<int>& rows, const std::vector<int>& cols) {
  Mat<Interval> out(Eigen::Index(rows.size()), Eigen::Index(cols.size()));
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t j = 0; j < cols.size(); ++j) out(Eigen::Index(i), Eigen::Index(j)) = A(rows[i], cols[j]);
  return out;
}

std::vector<int> iota(Eigen::Index n) {
  std::vector<int> v(std::size_t(n), 0);
  for (Eigen::Index i = 0; i < n; ++i) v[std::size_t(i)] = int(i);
  return v;
}

Bound lower_certificate(const Network& c, const Layout& L, const Point& p, const MatD& J, int r, const ProgressFn& progress) {
  Bound b{0, false,
          "||I - C A|| < 1 in MPFI (C = the inverse of the minor's midpoint in 50-digit MPFR) on an r x r minor of "
          "an enclosure of J computed by forward-mode duals over intervals at the exactly representable point",
          ""};
  if (r == 0) return {0, true, "trivial (rank 0)", ""};
  // The minor's rows from the fewest leading inputs that reach rank r, so that only those inputs
  // are run in intervals (the costly step).
  const Eigen::Index per = J.rows() / std::max(1, c.inputs);
  int k = int((r + per - 1) / per);
  while (k < c.inputs && float_rank(J.topRows(per * k)).rank < r) ++k;
  Network head = c;
  head.inputs = k;
  Point first_inputs{p.theta, {p.inputs.begin(), p.inputs.begin() + k}};
  const auto [rows, cols] = spanning_minor(J.topRows(per * k), r);
  const Vec<Interval> theta = p.theta.cast<Interval>();
  try {
    const Mat<Interval> Jc = columns<Interval>(head, L, theta, first_inputs, cols, "enclosing J's minor", progress);
    const Elimination e = certify_nonsingular(pick(Jc, rows, iota(r)));
    b.holds = e.nonsingular;
    b.reason = e.reason;
  } catch (const Uncertified& e) {
    b.reason = e.what();
  }
  b.value = b.holds ? r : 0;
  return b;
}

// Largest |y_i| over an enclosure of y (|midpoint| + radius) and whether every entry contains 0.
std::pair<double, bool> zero_test(const Vec<Interval>& y) {
  double r = 0;
  bool zero = true;
  for (const Interval& x : y) {
    zero = zero && contains_zero(x);
    r = std::max(r, std::abs(midpoint(x)) + radius(x));
  }
  return {r, zero};
}

// The upper bound: every direction g has J g = 0 (enclosed in MPFI), and q = rank G of them are
// independent (a q x q minor of G certified nonsingular), so the kernel has dimension >= q.
Bound upper_certificate(const Network& c, const Layout& L, const Point& p, const MatD& J, const Gauges<double>& gd,
                  int q, const ProgressFn& progress, Count& n) {
  const Eigen::Index k = gd.directions.cols();
  if (k == 0) return {n.parameters, true, "none: rank <= parameters (no gauge of the theory applies)", ""};
  Bound b{n.parameters, false,
          "k gauge directions, in the kernel by their symmetry identities: each J g enclosed in MPFI contains 0 "
          "and is below 1e-30 max|J|; q = rank of the directions of them independent by ||I - C G|| < 1 on a q x q "
          "minor: rank <= P - q",
          ""};
  const Vec<Interval> theta = p.theta.cast<Interval>();
  const Gauges<Interval> gi = gauge_directions<Interval>(c, L, theta);
  std::vector<double> residual(std::size_t(k), 0.0);
  std::vector<char> zero(std::size_t(k), 0);
  std::atomic<long long> done{0};
  std::atomic<bool> undecided{false};
  parallel_for(k, c.threads, [&](std::int64_t j) {
    try {
      const auto [r, z] = zero_test(directional<Interval>(c, L, theta, p, gi.directions.col(j)));
      residual[std::size_t(j)] = r;
      zero[std::size_t(j)] = z;
    } catch (const Uncertified&) {
      undecided = true;
    }
    if (progress) progress("verifying gauge directions", ++done, k);
  });
  if (undecided) {
    b.reason = "a ReLU argument's enclosure contains 0: the directions' J g cannot be enclosed";
    return b;
  }
  const double bound = 1e-30 * std::max(1.0, J.cwiseAbs().maxCoeff());
  n.gauge_residual = *std::max_element(residual.begin(), residual.end());
  for (Eigen::Index j = 0; j < k; ++j) n.gauges_verified += zero[std::size_t(j)] && residual[std::size_t(j)] <= bound;
  if (n.gauges_verified < k) {
    b.reason = std::to_string(k - n.gauges_verified) + " of " + std::to_string(k) + " directions not in the kernel";
    return b;
  }
  if (q == 0) return {n.parameters, true, b.method, ""};
  const auto [rows, cols] = spanning_minor(gd.directions, q);
  const Elimination e = certify_nonsingular(pick(gi.directions, rows, cols));
  b.holds = e.nonsingular;
  b.reason = e.nonsingular ? "" : "the directions are not certified independent: " + e.reason;
  if (b.holds) b.value = n.parameters - q;
  return b;
}

// A numerical failure (exit 3) naming the first entry of M that is NaN or infinite: a rank or a
// certificate read from it would be a number without meaning (a norm at eps = 0 reading a zero row
// gives 0/0).
void require_finite(const MatD& M, const std::string& what) {
  for (Eigen::Index j = 0; j < M.cols(); ++j)
    for (Eigen::Index i = 0; i < M.rows(); ++i)
      if (!std::isfinite(M(i, j)))
        throw NumericalError("fdim: " + what + " is not finite (entry " + std::to_string(i + 1) + ", " +
                             std::to_string(j + 1) + " of " + std::to_string(M.rows()) + " x " +
                             std::to_string(M.cols()) + " is " + std::to_string(M(i, j)) + ")");
}

// The gauges at θ with their span's dimension: the groups' directions may be dependent (more of
// them than parameters, or a group inside another's span), and the deficiency they predict is
// rank G, not their number k; a term of dimension rank G − k says so.
struct Span {
  Gauges<double> gauges;
  int rank = 0;
};
Span gauge_span(const Network& c, const Layout& L, const VecD& theta) {
  Span s{gauge_directions<double>(c, L, theta), 0};
  require_finite(s.gauges.directions, "a gauge direction");
  s.rank = float_rank(s.gauges.directions).rank;
  const long long overlap = s.rank - s.gauges.directions.cols();
  if (overlap < 0)
    s.gauges.terms.push_back({"the directions above are dependent: they span " + std::to_string(s.rank) + " of " +
                                  std::to_string(s.gauges.directions.cols()) + " (rank of the directions)",
                              overlap, true});
  return s;
}

}  // namespace

FloatRank float_rank(const MatD& J) {
  FloatRank f;
  if (J.size() == 0) {  // no singular values: not even a tolerance
    f.tolerance = std::numeric_limits<double>::quiet_NaN();
    return f;
  }
  const VecD s = Eigen::BDCSVD<MatD>(J).singularValues();
  f.tolerance = double(std::max(J.rows(), J.cols())) * std::numeric_limits<double>::epsilon() * s[0];
  while (f.rank < s.size() && s[f.rank] > f.tolerance) ++f.rank;
  if (f.rank == 0) return f;  // no s_r: the ratios stay undefined (null in the report)
  f.gap = f.rank < s.size() ? s[f.rank - 1] / s[f.rank] : std::numeric_limits<double>::infinity();
  f.relative = s[f.rank - 1] / s[0];
  f.over_tolerance = s[f.rank - 1] / f.tolerance;
  for (Eigen::Index i = std::max(0, f.rank - 3); i < std::min<Eigen::Index>(s.size(), f.rank + 3); ++i)
    f.around_cut.push_back(s[i]);
  return f;
}

Elimination certify_nonsingular(const Mat<Interval>& A) {
  const Eigen::Index n = A.rows();
  Mat<mp50> M(n, n);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < n; ++j) M(i, j) = mp50(boost::multiprecision::median(A(i, j)));
  const Eigen::FullPivLU<Mat<mp50>> lu(M);
  if (!lu.isInvertible()) return {false, "the enclosure's midpoint matrix is singular"};
  const Mat<mp50> C = lu.inverse();
  Mat<Interval> CI(n, n);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < n; ++j) CI(i, j) = Interval(C(i, j));
  const Mat<Interval> R = Mat<Interval>::Identity(n, n) - CI * A;
  for (Eigen::Index i = 0; i < n; ++i) {
    Interval row(0);
    for (Eigen::Index j = 0; j < n; ++j) row += abs(R(i, j));
    if (!(boost::multiprecision::upper(row) < 1))
      return {false, "||I - C A|| >= 1 in row " + std::to_string(i + 1) + " of " + std::to_string(n)};
  }
  return {true, ""};
}

long long predicted_deficiency(const Network& c) {
  const Layout L = layout(c);
  long long k = 0;
  for (const Term& t : gauge_span(c, L, draw_point(c, L).theta).gauges.terms) k += t.dimension;
  return k;
}

int saturating_inputs(const Network& c) {
  const long long P = layout(c).size, rows = (long long)c.seq * c.output_dim();
  return int(2 * ((P + rows) / rows));
}

Count count(const Network& c, bool certify, const ProgressFn& progress) {
  validate(c);
  // J and the SVD's working copies, in double (and the free network's too, counted while J is held),
  // and the layout (at most one tensor, ~128 bytes, per parameter); refused before the layout (a
  // tensor per head) is built or the inputs are drawn.
  Network free = c;
  free.identity_layers.clear();
  const double parameters = parameter_count(c) + (c.identity_layers.empty() ? 0 : parameter_count(free));
  const double outputs = double(c.seq) * double(c.output_dim()) * double(c.inputs);
  require_memory("qkvlab fdim's Jacobian (--inputs x --seq x outputs by parameters)",
                 (4.0 * 8.0 * outputs + 128.0) * parameters);
  const Layout L = layout(c);
  Count n;
  n.config = c;
  n.parameters = L.size;
  n.outputs = (long long)c.seq * c.output_dim() * c.inputs;
  const Point p = draw_point(c, L);
  Stopwatch clock;
  const MatD J = columns<double>(c, L, p.theta, p, iota(L.size), "Jacobian columns", progress);
  require_finite(J, "the Jacobian");
  n.seconds.jacobian = clock.lap();
  n.rank = float_rank(J);
  const Eigen::Index per = J.rows() / std::max(1, c.inputs);
  for (int k : {1, c.inputs / 4, c.inputs / 2, c.inputs - 1, c.inputs})
    if (k >= 1 && (n.saturation.empty() || k > n.saturation.back().first))
      n.saturation.push_back({k, float_rank(J.topRows(per * k)).rank});
  const auto half = std::find_if(n.saturation.begin(), n.saturation.end(),
                                 [&](const auto& s) { return s.first == c.inputs / 2; });
  n.saturated = half != n.saturation.end() && half->second == n.rank.rank;
  n.seconds.ranks = clock.lap();
  const Span gauges = gauge_span(c, L, p.theta);
  const Gauges<double>& gd = gauges.gauges;
  n.predicted = gd.terms;
  n.upper = {n.parameters, true, "none: rank <= parameters", ""};
  n.lower = {0, false, "not certified (--no-certify)", ""};
  if (certify) {
    n.lower = lower_certificate(c, L, p, J, n.rank.rank, progress);
    n.seconds.lower = clock.lap();
    n.upper = upper_certificate(c, L, p, J, gd, gauges.rank, progress, n);
    n.seconds.upper = clock.lap();
  }
  n.certified = n.lower.holds && n.upper.holds && n.lower.value == n.upper.value;
  if (!c.identity_layers.empty()) {
    const Count f = count(free, certify, progress);
    n.free_rank = f.rank.rank;
    n.free_certified = f.certified;
  }
  return n;
}

}  // namespace qkvlab::fdim
