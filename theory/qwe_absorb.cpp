// qwe.thm8.4 and the decision half of qwe.cor8.4.1 (docs/math/qkv.md; Query-weight elimination §8.5):
// when the skip of a ReLU MLP x ↦ x + W_2 σ(W_1 x) (column vectors, W_1 m×d,
// W_2 d×m, m = 2d here) can be absorbed into a skipless one of the same width.
// The construction and the decision procedure live in core/absorb.hpp.
//
// Representable pairs: J a random subset of size |J| = d or 3d/2 (the variant),
// W_1 entries N(0, 1/d) with W_1[J,:] conditioned on cond₂ ≤ 1.7e4 (as bases are,
// linalg.hpp), W_2 entries N(0, 1/m) with its J-columns set to −(W_1[J,:])⁺ at the
// working precision. κ = cond₂(W_1[J,:]): the pseudo-inverse is computed at u, so
// W_2 P_J W_1 = −I holds to O(u κ), and that residual is what both sides differ by
// ((LHS − RHS) = (I + W_2 P_J W_1) x exactly in real arithmetic).
#include "theory/claims.hpp"

#include "core/absorb.hpp"

#include <algorithm>
#include <numeric>

namespace qkvlab::theory {
namespace {

int subset_size(const SweepPoint& c) { return c.variant.entry == 0 ? c.d : c.d + c.d / 2; }

std::vector<PointVariant> subset_sizes(const SweepPoint&) { return numbered({"|J|=d", "|J|=3d/2"}); }

std::vector<int> random_permutation(Rng& rng, int m) {
  std::vector<int> p(std::size_t(m), 0);
  std::iota(p.begin(), p.end(), 0);
  for (int i = m - 1; i > 0; --i) std::swap(p[std::size_t(i)], p[std::size_t(rng.uniform_int(i + 1))]);
  return p;
}

double cond2(const MatD& A) {
  const auto sv = Eigen::JacobiSVD<MatD>(A).singularValues();
  return sv(0) / sv(sv.size() - 1);
}

MatD rows_of(const MatD& W, const std::vector<int>& J) {
  MatD r(Eigen::Index(J.size()), W.cols());
  for (std::size_t k = 0; k < J.size(); ++k) r.row(Eigen::Index(k)) = W.row(J[k]);
  return r;
}

template <class S> struct Pair {
  Mat<S> W_1, W_2, W_2_generic;  // W_2: representable through J; W_2_generic: the same draw, untouched
  std::vector<int> J;            // sorted
  double kappa;                  // cond₂(W_1[J,:])
};

// The draws are made in double (the same at every precision); only the
// pseudo-inverse is computed at S.
template <class S> Pair<S> representable_pair(Rng& rng, const SweepPoint& c) {
  const int d = c.d, m = 2 * d;
  auto perm = random_permutation(rng, m);
  std::vector<int> J(perm.begin(), perm.begin() + subset_size(c));
  std::sort(J.begin(), J.end());
  // Condition the rows that get inverted, as bases are (linalg.hpp); bounded (core/limits.hpp).
  const MatD W_1 = draw_until(
      default_max_attempts, "cond_2(W_1[J,:]) <= 1.7e4", [&] { return rng.gaussian(m, d, 1.0 / std::sqrt(double(d))); },
      [&](const MatD& W) { return cond2(rows_of(W, J)) <= max_basis_condition; });
  const MatD W_2 = rng.gaussian(d, m, 1.0 / std::sqrt(double(m)));
  Pair<S> p{cast<S>(W_1), Mat<S>(), cast<S>(W_2), J, cond2(rows_of(W_1, J))};
  p.W_2 = representable_w2<S>(p.W_1, p.W_2_generic, J);
  return p;
}

// qwe.thm8.4 (sufficiency, and the (D, Π) freedom of the representation):
// x + W_2 σ(W_1 x) = W̃_2 σ(W̃_1 x) with W̃_1 = (I − 2P_J) W_1, W̃_2 = W_2, and the
// same with W̃_1' = D Π W̃_1, W̃_2' = W̃_2 Πᵀ D⁻¹ (D positive, see core/absorb.hpp).
struct Theorem84 {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    const auto p = representable_pair<S>(rng, c);
    const int m = int(p.W_1.rows());
    const Mat<S> X = draw<S>(rng, c.d, c.seq, 1.0);  // n inputs as columns
    const auto perm = random_permutation(rng, m);
    std::vector<S> scale;
    for (int i = 0; i < m; ++i) scale.push_back(S(0.5 + 1.5 * rng.uniform()));

    const Mat<S> reference = skip_relu_mlp<S>(p.W_1, p.W_2, X);
    const auto absorbed = absorb_skip<S>(p.W_1, p.W_2, p.J);
    const auto rescaled = permute_and_rescale<S>(absorbed, perm, scale);
    Outcome o;
    o.kappa = p.kappa;
    o.rel_err = std::max(rel_err<S>(reference, relu_mlp<S>(absorbed.W_1, absorbed.W_2, X)),
                         rel_err<S>(reference, relu_mlp<S>(rescaled.W_1, rescaled.W_2, X)));

    const auto generic = absorb_skip<S>(p.W_1, p.W_2_generic, p.J);
    o.controls.push_back(control_by_error(
        "generic W_2 (W_2 P_J W_1 != -I): the construction changes the map",
        rel_err<S>(skip_relu_mlp<S>(p.W_1, p.W_2_generic, X), relu_mlp<S>(generic.W_1, generic.W_2, X))));

    // |J| < d: W_2 P_J W_1 has rank ≤ d − 1 and cannot be −I; the closest W_2 (the
    // pseudo-inverse) absorbed with that J changes the map.
    const std::vector<int> small(p.J.begin(), p.J.begin() + (c.d - 1));
    const Mat<S> W_2_small = representable_w2<S>(p.W_1, p.W_2_generic, small);
    const auto absorbed_small = absorb_skip<S>(p.W_1, W_2_small, small);
    o.controls.push_back(control_by_error(
        "|J| = d - 1 (W_2 P_J W_1 != -I by rank): the construction changes the map",
        rel_err<S>(skip_relu_mlp<S>(p.W_1, W_2_small, X), relu_mlp<S>(absorbed_small.W_1, absorbed_small.W_2, X))));

    // D = −|D|: σ(−t) = σ(t) − t turns W̃_2 σ(W̃_1 x) into W̃_2 W̃_1 x − W̃_2 σ(W̃_1 x), an O(1) change
    // (a single negative entry changes the map by one unit's share, which can be small).
    std::vector<S> negative;
    for (const S& s : scale) negative.push_back(-s);
    const auto flipped = permute_and_rescale<S>(absorbed, perm, negative);
    o.controls.push_back(control_by_error("D negative (ReLU is only positively homogeneous)",
                                          rel_err<S>(reference, relu_mlp<S>(flipped.W_1, flipped.W_2, X))));
    return o;
  }
};

// A decision that must be "no" is a control: it fails as expected when the verdict
// is no and the best real relaxation misses -R by ≥ 1e-3 (relative to ‖R‖_F).
ControlOutcome control_by_decision(std::string name, const AbsorbDecision& d) {
  auto c = control_by_error(std::move(name), d.relaxation_residual);
  c.failed_as_expected = c.failed_as_expected && d.verdict == Verdict::no;
  c.note = std::string(verdict_name(d.verdict)) + ": " + d.reason;
  return c;
}

// qwe.cor8.4.1, decision half: decide_absorption (core/absorb.hpp, in double, with
// the tolerance of the working precision's u) answers yes on a representable pair,
// and rel_err = ‖W_2 P_J W_1 + I‖_F / ‖I‖_F for the J it returns, evaluated at S
// (so the ladder shows the found J is exact up to the pseudo-inverse's rounding).
struct Corollary841 {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    const auto p = representable_pair<S>(rng, c);
    AbsorbLimits limits;
    limits.unit_roundoff = std::max(unit_roundoff<S>(), unit_roundoff<double>());
    const MatD W_1 = to_double<S>(p.W_1);
    const auto yes = decide_absorption(W_1, to_double<S>(p.W_2), limits);
    Outcome o;
    o.kappa = p.kappa;
    const Mat<S> I = Mat<S>::Identity(c.d, c.d);
    if (yes.verdict == Verdict::yes) {
      o.rel_err = rel_err<S>(I, Mat<S>(-skip_product<S>(p.W_1, p.W_2, yes.J)));
      o.note = yes.J == p.J ? "" : "found J differs from the constructed one";
    } else {
      o.rel_err = NAN;
      o.note = std::string("decision: ") + verdict_name(yes.verdict) + ": " + yes.reason;
    }
    o.controls.push_back(control_by_decision("generic W_2: decision no",
                                             decide_absorption(W_1, to_double<S>(p.W_2_generic), limits)));
    const MatD R = draw_basis(rng, c.d, 1.0 / std::sqrt(double(c.d)));
    o.controls.push_back(control_by_decision("representable pair with a generic skip R x: decision no",
                                             decide_absorption(W_1, to_double<S>(p.W_2), R, limits)));
    return o;
  }
};

}  // namespace

void register_absorb_claims(std::vector<Claim>& claims) {
  claims.push_back({.id = "qwe.thm8.4",
                    .statement = "x + W_2 relu(W_1 x) = W_2 relu((I - 2P_J) W_1 x) when W_2 P_J W_1 = -I, |J| >= d; "
                                 "also after (D, Pi)",
                    .kind = Kind::identity,
                    .dims = Dims{.heads = false, .layers = false, .seq = true, .mask = false},
                    .budget = default_budget,
                    .variants = subset_sizes,
                    .run = dispatch<Theorem84>()});
  claims.push_back({.id = "qwe.cor8.4.1",
                    .statement = "deciding absorbability: yes (with J, W_2 P_J W_1 = -I) on representable pairs, no "
                                 "on generic ones",
                    .kind = Kind::identity,
                    .dims = Dims{.heads = false, .layers = false, .seq = false, .mask = false},
                    .budget = default_budget,
                    .variants = subset_sizes,
                    .run = dispatch<Corollary841>()});
}

}  // namespace qkvlab::theory
