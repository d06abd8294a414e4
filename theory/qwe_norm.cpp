// Normalizer claims of Query-weight elimination §8.3 (docs/math/qkv.md): LayerNorm
// semi-conjugacy (qwe.lemma8.2), a change of basis through LayerNorm with gain
// (qwe.thm8.3), the same construction for RMSNorm and DyT (qwe.remark5).
//
// Column-vector convention, as §8.3: a point is a column; the n = c.seq inputs
// of a check are the columns of X ∈ R^{d×n}. Errors are the largest per-column
// relative error (points span six decades of norm: a Frobenius norm over all of
// them would hide the small ones).
//
// Conditioning of the round trip y ↦ N(N⁻¹(y)) (the semi-conjugacy is exactly
// this with y = A N(x)). Let q = ‖y‖²/d and s = 1 − q. N⁻¹(y) = t y with
// t = sqrt(ε/s): computing s costs a relative error u q/s, so f itself is
// ill-conditioned by 1/(1 − r²), r = ‖y‖/√d, and blows up at the boundary. But N
// depends on the scale t of t y only through ε: d log‖N(t y)‖ / d log t =
// ε/(t² q + ε) = s. The 1/s amplification is multiplied by s, and the identity
// N(N⁻¹(y)) = y has κ = 1 however close y is to the boundary. Each check feeds
// one input at r² = 1 − 1e-4 to show it (its measured error stays at u), and the
// note reports the largest r reached and 1/(1 − r²), the conditioning of f.
// What the round trip does not forgive is y off Z: N removes y's mean. The
// computed N(x) is off Z by rounding (relative u), and A amplifies its mean
// component: 1ᵀA = c 1ᵀ since δᵀT = 1ᵀ. So the semi-conjugacy as computed has the
// mat-vec condition ‖A‖_2 ‖N(x)‖/‖A N(x)‖ (≥ c) as κ; it matters at small d.
// The other direction, N⁻¹(N(x)) = x − μ1, is not protected: the error u of N(x)
// is amplified by 1/s = 1 + σ²/ε (N keeps the scale of x only in s), so that
// identity is checked on inputs with σ² ≤ ε and κ includes 1/s.
#include "theory/claims.hpp"

#include "core/normalize.hpp"
#include "theory/norm_checks.hpp"

#include <algorithm>
#include <cstdio>

namespace qkvlab::theory {
namespace {

// N_ε(x) = N_1(x/√ε): only ‖x‖²/(d ε) matters. With ε = 1 the inputs' norms
// 1e-3 … 1e3 span the near-linear regime (σ² ≪ ε) and saturation (σ²/ε up to
// 5e5 at d = 2), and 1 − ‖N(x)‖²/d = ε/(σ² + ε) ≥ 2e-6 ≈ 30 u_float stays
// representable in float. (With ε = 1e-5 the top decade would put N(x) within
// u_float of the boundary: it rounds onto it, and at d = 2, where A|_Z = ±1, the
// tool rightly reports points leaving the image.)
constexpr double norm_eps = 1;       // LayerNorm and RMSNorm ε
constexpr double alpha = 0.5;        // DyT α
// DyT inputs stop at α‖x‖_∞ = 4 (1 − tanh 4 = 7e-4): beyond α|x| ≈ (p/2) ln 2,
// tanh(α x) rounds to ±1, the closed cube, and A Y(x) can land on its boundary.
constexpr double dyt_max = 4;
constexpr double control_norm = 1.5;  // ‖A‖ of the controls that leave the image

// max_j ‖M‖_2 ‖v_j‖ / ‖M v_j‖: how much y = M v amplifies a relative error of v.
template <class S> double matvec_condition(const Mat<S>& M, const Mat<S>& V) {
  const double norm = spectral_norm<double>(to_double(M)).norm;  // κ needs two digits, not 50
  const Mat<S> MV = M * V;
  double k = 1;
  for (Eigen::Index j = 0; j < V.cols(); ++j)
    k = std::max(k, norm * to_double(S(V.col(j).norm())) / to_double(S(MV.col(j).norm())));
  return k;
}

// The same directions rescaled for DyT: α‖x‖_∞ spread log-evenly over [1e-3, dyt_max].
MatD dyt_inputs(const MatD& X) {
  MatD out = X;
  const double top = std::log10(dyt_max), n = double(X.cols());
  for (Eigen::Index j = 0; j < X.cols(); ++j) {
    const double target = std::pow(10.0, n == 1 ? 0.0 : -3.0 + (top + 3.0) * j / (n - 1));
    out.col(j) *= target / (alpha * X.col(j).cwiseAbs().maxCoeff());
  }
  return out;
}

// Controls by detection: the tool must report the points that left the image.
ControlOutcome image_exit_control(std::string name, std::size_t outside, Eigen::Index n) {
  auto c = control_by_detection(std::move(name), outside > 0, NAN);
  c.note = outside > 0 ? "image exit detected: " + std::to_string(outside) + " of " + std::to_string(n) + " points"
                       : "NOT detected: every point stayed in the image";
  return c;
}

template <class S> void note_outside(Outcome& o, const Preimage<S>& p, const char* what) {
  if (p.ok()) return;
  o.rel_err = NAN;
  o.note += std::string(o.note.empty() ? "" : "; ") + what + ": " + std::to_string(p.outside.size()) +
            " points left the image";
}

}  // namespace

MatD draw_conjugacy_basis(Rng& rng, int d) {
  return draw_until(
      default_max_attempts, "cond_2(D_0 T) <= 1.7e4", [&] { return draw_basis(rng, d, 1.0 / std::sqrt(double(d))); },
      [&](const MatD& T) {
        const VecD delta = T.transpose().partialPivLu().solve(VecD::Ones(d));
        const auto sv = Eigen::JacobiSVD<MatD>(MatD(delta.asDiagonal() * T)).singularValues();
        return sv(d - 1) > 0 && sv(0) / sv(d - 1) <= max_basis_condition;
      });
}

template <class S> SemiConjugacy<S> semi_conjugacy(const LayerNormConjugacy<S>& L, const Mat<S>& X, double eps) {
  SemiConjugacy<S> r;
  Outcome& o = r.outcome;
  const Mat<S> NX = layer_norm<S>(X, eps);
  r.AN = L.A * NX;
  const Mat<S>& AN = r.AN;
  r.F = inverse_layer_norm<S>(AN, eps);
  note_outside(o, r.F, "N^-1(A N(x))");
  if (!r.F.ok()) return r;
  o.rel_err = max_column_rel_err<S>(AN, layer_norm<S>(r.F.x, eps));
  o.kappa = matvec_condition<S>(L.A, NX);

  // Controls. T in place of D T: T N(x) leaves Z (and points of norm ≥ √d
  // leave the ball; they are left out). N(f(x)) ∈ Z loses T N(x)'s mean:
  // an O(1) error on the points that stay in the ball.
  const Mat<S> TN = L.T * layer_norm<S>(X, eps);
  const auto F_T = inverse_layer_norm<S>(TN, eps);
  std::vector<Eigen::Index> inside;
  for (Eigen::Index j = 0; j < TN.cols(); ++j)
    if (std::find(F_T.outside.begin(), F_T.outside.end(), j) == F_T.outside.end()) inside.push_back(j);
  if (inside.empty()) {
    o.controls.push_back(image_exit_control("T in place of D T", F_T.outside.size(), TN.cols()));
  } else {
    auto ctrl = control_by_error("T in place of D T",
                                 max_column_rel_err<S>(Mat<S>(TN(Eigen::all, inside)),
                                                       layer_norm<S>(Mat<S>(F_T.x(Eigen::all, inside)), eps)));
    if (!F_T.ok()) ctrl.note = std::to_string(F_T.outside.size()) + " points outside the ball left out";
    o.controls.push_back(ctrl);
  }
  // c × 1.5: ‖A|_Z‖ = 1.5, the boundary input leaves the image.
  const auto F_big = inverse_layer_norm<S>(Mat<S>(S(control_norm) * AN), eps);
  o.controls.push_back(image_exit_control("c x 1.5 (norm of A on Z = 1.5)", F_big.outside.size(), AN.cols()));
  return r;
}

template <class S>
Outcome change_of_basis_through_norm(const LayerNormConjugacy<S>& L, const Mat<S>& X, const Vec<S>& g,
                                     const Vec<S>& g_red, const Mat<S>& W, double eps) {
  Outcome o;
  const auto T = change_of_basis<S>(L.T), A = change_of_basis<S>(L.A);
  const double kappa_W = std::max(T.kappa, A.kappa) *
                         matvec_condition<S>(Mat<S>(W * g.asDiagonal()), layer_norm<S>(X, eps));
  o.kappa = kappa_W;
  o.singular = T.singular() || A.singular();

  const auto F = L.f(X, eps);
  note_outside(o, F, "f(x)");
  if (!F.ok()) return o;
  const Mat<S> LN_G = layer_norm<S>(X, g, eps), LN_red_f = layer_norm<S>(F.x, g_red, eps);
  const Mat<S> G_inv = g.cwiseInverse().asDiagonal(), G_red_inv = g_red.cwiseInverse().asDiagonal();
  const Mat<S> M = g_red.asDiagonal() * L.A * G_inv;  // G̃ D T G⁻¹
  const Mat<S> D_inv = L.D().cwiseInverse().asDiagonal();
  const Mat<S> W_red = W * g.asDiagonal() * T.T_inv * D_inv * G_red_inv;  // W' = W G T⁻¹ D⁻¹ G̃⁻¹
  const Mat<S> reference = W * LN_G;
  // Each identity against its own κ; the check reports the one with the larger e = err/(u κ).
  const double kappa_N = std::max(matvec_condition<S>(L.A, layer_norm<S>(X, eps)), matvec_condition<S>(M, LN_G));
  const double err_N = max_column_rel_err<S>(Mat<S>(M * LN_G), LN_red_f);
  const double err_W = max_column_rel_err<S>(reference, Mat<S>(W_red * LN_red_f));
  const bool N_worse = err_N / kappa_N > err_W / kappa_W;
  o.rel_err = N_worse ? err_N : err_W;
  o.kappa = N_worse ? kappa_N : kappa_W;
  o.note = fmt("G~ N(f(x)) = G~ D T G^-1 LN_G(x): err %.3g at kappa %.3g; W' LN_G~(f(x)) = W LN_G(x): err %.3g at "
               "kappa %.3g; reported: the ",
               err_N, kappa_N, err_W, kappa_W) +
           (N_worse ? "first" : "second");

  const Mat<S> W_no_D = W * g.asDiagonal() * T.T_inv * G_red_inv;
  o.controls.push_back(control_by_error("W' without the D^-1 factor",
                                        max_column_rel_err<S>(reference, Mat<S>(W_no_D * LN_red_f))));
  const Mat<S> W_no_gain = W * g.asDiagonal() * T.T_inv * D_inv;
  o.controls.push_back(control_by_error("W' without the G~^-1 factor",
                                        max_column_rel_err<S>(reference, Mat<S>(W_no_gain * LN_red_f))));
  return o;
}

template <class S> Outcome rms_semi_conjugacy(const Mat<S>& T, const Mat<S>& X, double eps) {
  Outcome o;
  const Mat<S> A = T / spectral_norm<S>(T).norm;
  const Mat<S> AR = A * rms_norm<S>(X, eps);
  const auto F = inverse_rms_norm<S>(AR, eps);
  note_outside(o, F, "R^-1(A R(x))");
  if (!F.ok()) return o;
  o.rel_err = max_column_rel_err<S>(AR, rms_norm<S>(F.x, eps));
  double r = 0;
  for (Eigen::Index j = 0; j < AR.cols(); ++j) r = std::max(r, to_double(S(AR.col(j).norm())) / std::sqrt(double(X.rows())));
  o.note = fmt("RMSNorm: max |A R(x)|/sqrt(d) = %.6g", r);
  const auto F_big = inverse_rms_norm<S>(Mat<S>(S(control_norm) * AR), eps);
  o.controls.push_back(image_exit_control("RMSNorm, A = 1.5 T/|T|_2", F_big.outside.size(), AR.cols()));
  return o;
}

#define QKVLAB_NORM_CHECKS(S)                                                                                  \
  template SemiConjugacy<S> semi_conjugacy<S>(const LayerNormConjugacy<S>&, const Mat<S>&, double);           \
  template Outcome change_of_basis_through_norm<S>(const LayerNormConjugacy<S>&, const Mat<S>&, const Vec<S>&, \
                                                   const Vec<S>&, const Mat<S>&, double);                     \
  template Outcome rms_semi_conjugacy<S>(const Mat<S>&, const Mat<S>&, double);
QKVLAB_FOR_EACH_SCALAR(QKVLAB_NORM_CHECKS)

namespace {

// qwe.lemma8.2: N(f(x)) = A N(x) for f = N⁻¹ ∘ A ∘ N, A = D T, on inputs spread
// over six decades and one input at 1 − r² = 1e-4; the mean-shift freedom
// N(f(x) + φ1) = A N(x); N(N⁻¹(y)) = y for y in the image up to r² = 1 − 1e-4;
// N⁻¹(N(x)) = x − μ1 for σ² ≤ ε; A Z ⊆ Z and ‖A|_Z‖_2 = 1.
// κ = max of the mat-vec condition ‖A‖ ‖N(x)‖/‖A N(x)‖, the centring factors
// ‖v‖/‖v − μ1‖ of the shifted points and the inverse identity's 1/s (see the
// file comment).
struct Lemma82 {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    const int d = c.d, n = c.seq;
    const auto L = layer_norm_conjugacy<S>(cast<S>(draw_conjugacy_basis(rng, d)));
    const MatD X_random = multiscale_inputs(rng, d, n);
    const MatD phi_draw = rng.gaussian(1, n + 1);
    const MatD Y_draw = rng.gaussian(d - 1, 4);
    const MatD X_inv_draw = rng.gaussian(d, 3), mean_draw = rng.gaussian(1, 3);
    Outcome o;
    if (!L.ok()) {
      o.rel_err = NAN, o.singular = true, o.note = "some delta_i = 0: D is singular";
      return o;
    }
    // The semi-conjugacy.
    const Mat<S> X = with_column<S>(cast<S>(X_random), at_boundary<S>(L.top, norm_eps));
    const SemiConjugacy<S> sc = semi_conjugacy<S>(L, X, norm_eps);
    if (!sc.F.ok()) return sc.outcome;
    const auto& F = sc.F;
    const Mat<S>& AN = sc.AN;
    double err = sc.outcome.rel_err;
    double kappa = sc.outcome.kappa;

    // The mean-shift freedom: φ_j ~ N(0, 1) times the rms of f(x_j).
    Mat<S> shifted = F.x;
    for (Eigen::Index j = 0; j < shifted.cols(); ++j) {
      using std::sqrt;
      const S rms = sqrt(S(F.x.col(j).squaredNorm() / S(d)));
      shifted.col(j).array() += S(phi_draw(0, j)) * rms;
      const Vec<S> centred = shifted.col(j).array() - S(shifted.col(j).mean());
      kappa = std::max(kappa, to_double(S(shifted.col(j).norm() / centred.norm())));
    }
    err = std::max(err, max_column_rel_err<S>(AN, layer_norm<S>(shifted, norm_eps)));

    // N(N⁻¹(y)) = y for y ∈ Z at radii r√d, r² = 0.25, 0.81, 0.98, 1 − 1e-4.
    Mat<S> Y = L.Q_Z * cast<S>(Y_draw);
    const double radius2[] = {0.25, 0.81, 0.98, 1 - boundary_s};
    for (int j = 0; j < 4; ++j) {
      using std::sqrt;
      Y.col(j) *= S(sqrt(S(radius2[j] * d))) / Y.col(j).norm();
    }
    const auto Y_pre = inverse_layer_norm<S>(Y, norm_eps);
    note_outside(o, Y_pre, "N^-1(y)");
    if (!Y_pre.ok()) return o;
    err = std::max(err, max_column_rel_err<S>(Y, layer_norm<S>(Y_pre.x, norm_eps)));

    // N⁻¹(N(x)) = x − μ1 for σ/√ε = 0.1, 0.3, 1, with a mean of the order of σ.
    MatD X_inv(d, 3);
    const double sigma_over_root_eps[] = {0.1, 0.3, 1.0};
    for (int j = 0; j < 3; ++j) {
      VecD z = X_inv_draw.col(j).array() - X_inv_draw.col(j).mean();
      const double sigma = sigma_over_root_eps[j] * std::sqrt(norm_eps);
      z *= sigma / std::sqrt(z.squaredNorm() / d);
      X_inv.col(j) = z.array() + sigma * mean_draw(0, j);
      kappa = std::max(kappa, (1 + sigma * sigma / norm_eps) * X_inv.col(j).norm() / z.norm());
    }
    const Mat<S> Xi = cast<S>(X_inv);
    Mat<S> centred(d, 3);
    for (int j = 0; j < 3; ++j) centred.col(j) = Xi.col(j).array() - S(Xi.col(j).mean());
    const auto X_back = inverse_layer_norm<S>(layer_norm<S>(Xi, norm_eps), norm_eps);
    note_outside(o, X_back, "N^-1(N(x))");
    if (!X_back.ok()) return o;
    err = std::max(err, max_column_rel_err<S>(centred, X_back.x));

    // A Z ⊆ Z, relative to c ‖δ‖ ‖T‖_F (the size of 1ᵀ A's rounding), and ‖A|_Z‖_2 = 1 by a
    // Jacobi SVD at the working precision: not the power iteration (spectral_norm) that built c,
    // which would read 1 whatever that routine returned.
    const Mat<S> AQ = L.A * L.Q_Z;
    err = std::max(err, to_double(S((Mat<S>::Ones(1, d) * AQ).norm() / (L.c * L.delta.norm() * L.T.norm()))));
    using std::abs;
    err = std::max(err, to_double(S(abs(Eigen::JacobiSVD<Mat<S>>(AQ).singularValues()(0) - S(1)))));
    o.rel_err = err;
    o.kappa = kappa;

    double r_random = 0;
    for (int j = 0; j < n; ++j) r_random = std::max(r_random, to_double(S(AN.col(j).norm())) / std::sqrt(d));
    const double r_boundary = to_double(S(AN.col(n).norm())) / std::sqrt(d);
    o.note = fmt("max |A N(x)|/sqrt(d) = %.3g over the random inputs, %.6g at the boundary input "
                 "(conditioning of f: 1/(1-r^2) = %.3g; of the identity: 1)",
                 r_random, r_boundary, 1 / (1 - r_boundary * r_boundary));

    o.controls = sc.outcome.controls;
    return o;
  }
};

// qwe.thm8.3: G̃ N(f(x)) = (G̃ D T G⁻¹) LN_G(x), and W' LN_G̃(f(x)) = W LN_G(x)
// with W' = W G T⁻¹ D⁻¹ G̃⁻¹, each with its own κ; the check reports the identity with
// the larger normalized error err/(u κ) (both are in the note). The first is Lemma 8.2's
// round trip with gains: κ = the mat-vec conditions ‖A‖ ‖N(x)‖/‖A N(x)‖ and
// ‖G̃ A G⁻¹‖ ‖LN_G(x)‖/‖G̃ A N(x)‖ (3–6 at the defaults). The second: κ = max(cond₂(T), cond₂(A)) · max_j
// ‖W G‖ ‖N(x_j)‖/‖W G N(x_j)‖: W' applies W G A⁻¹ G̃⁻¹ to G̃ N(f(x)) = G̃ A N(x),
// whose error before the diagonal G̃ (which G̃⁻¹ undoes to rounding) is u ‖A N(x)‖
// (T⁻¹'s own error adds cond₂(T)); relative to ‖W G N(x)‖ this is at most that
// product.
// The last factor matters at d = 2, where every N(x) lies on one line.
struct Theorem83 {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    const int d = c.d, n = c.seq;
    const auto L = layer_norm_conjugacy<S>(cast<S>(draw_conjugacy_basis(rng, d)));
    const MatD X_random = multiscale_inputs(rng, d, n);
    const Vec<S> g = cast<S>(MatD((0.3 * rng.gaussian(d, 1)).array().exp())).col(0);
    const Vec<S> g_red = cast<S>(MatD((0.3 * rng.gaussian(d, 1)).array().exp())).col(0);
    const Mat<S> W = draw<S>(rng, d, d, 1.0 / std::sqrt(double(d)));
    Outcome o;
    if (!L.ok()) {
      o.rel_err = NAN, o.singular = true, o.note = "some delta_i = 0: D is singular";
      return o;
    }
    return change_of_basis_through_norm<S>(L, with_column<S>(cast<S>(X_random), at_boundary<S>(L.top, norm_eps)), g, g_red, W, norm_eps);
  }
};

// qwe.remark5: R(f(x)) = A R(x) with A = T/‖T‖_2, f = R⁻¹ ∘ A ∘ R, and
// Y(f(x)) = A Y(x) with A = T/‖T‖_∞, f = Y⁻¹ ∘ A ∘ Y. κ = 1 for both: the
// round-trip argument of the file comment holds for R verbatim, and for DyT
// tanh'(w) = 1 − y² cancels atanh's 1/(1 − y²).
struct Remark5 {
  template <class S> static Outcome run(const SweepPoint& c, Rng& rng) {
    const int d = c.d, n = c.seq;
    const MatD T_draw = draw_basis(rng, d, 1.0 / std::sqrt(double(d)));
    const MatD X_random = multiscale_inputs(rng, d, n);
    const Mat<S> T = cast<S>(T_draw);

    // RMSNorm, with an input along T's top right singular vector at 1 − r² = 1e-4.
    const Mat<S> X_R = with_column<S>(cast<S>(X_random), at_boundary<S>(spectral_norm<S>(T).right, norm_eps));
    Outcome o = rms_semi_conjugacy<S>(T, X_R, norm_eps);

    // DyT, with an input x = sign(T_i:)ᵀ atanh(1 − 1e-4)/α along the row i of largest
    // absolute sum: (A Y(x))_i = 1 − 1e-4.
    Eigen::Index i_max = 0;
    T_draw.cwiseAbs().rowwise().sum().maxCoeff(&i_max);
    const VecD x_dyt = T_draw.row(i_max).transpose().array().sign() * (std::atanh(1 - boundary_s) / alpha);
    const S norm_inf = T.cwiseAbs().rowwise().sum().maxCoeff();
    const Mat<S> A_Y = T / norm_inf;
    const Mat<S> X_Y = with_column<S>(cast<S>(dyt_inputs(X_random)), cast<S>(MatD(x_dyt)).col(0));
    const Mat<S> AY = A_Y * dyt<S>(X_Y, alpha);
    const auto F_Y = inverse_dyt<S>(AY, alpha);
    note_outside(o, F_Y, "Y^-1(A Y(x))");
    if (!std::isfinite(o.rel_err)) return o;

    o.rel_err = std::max(o.rel_err, max_column_rel_err<S>(AY, dyt<S>(F_Y.x, alpha)));
    o.note += fmt("; DyT: max |A Y(x)|_inf = %.6g", to_double(S(AY.cwiseAbs().maxCoeff())));
    const auto F_Y_big = inverse_dyt<S>(Mat<S>(S(control_norm) * AY), alpha);
    o.controls.push_back(image_exit_control("DyT, A = 1.5 T/|T|_inf", F_Y_big.outside.size(), AY.cols()));
    return o;
  }
};

constexpr Dims norm_dims{.heads = false, .layers = false, .seq = true, .mask = false};

}  // namespace

void register_norm_claims(std::vector<Claim>& claims) {
  claims.push_back({.id = "qwe.lemma8.2",
                    .statement = "f = N^-1 o (D T) o N with D = c diag(T^-T 1), |D T on Z| = 1: N(f(x)) = D T N(x) "
                                 "(LayerNorm)",
                    .kind = Kind::identity,
                    .dims = norm_dims,
                    .budget = default_budget,
                    .run = dispatch<Lemma82>()});
  claims.push_back({.id = "qwe.thm8.3",
                    .statement = "G~ N(f(x)) = (G~ D T G^-1) LN_G(x) and W' LN_G~(f(x)) = W LN_G(x), W' = W G T^-1 "
                                 "D^-1 G~^-1",
                    .kind = Kind::identity,
                    .dims = norm_dims,
                    .budget = default_budget,
                    .run = dispatch<Theorem83>()});
  claims.push_back({.id = "qwe.remark5",
                    .statement = "RMSNorm with A = T/|T|_2: R(f(x)) = A R(x); DyT with A = T/|T|_inf: Y(f(x)) = A "
                                 "Y(x)",
                    .kind = Kind::identity,
                    .dims = norm_dims,
                    .budget = default_budget,
                    .run = dispatch<Remark5>()});
}

}  // namespace qkvlab::theory
