// A claim: one statement of a paper, with the check that measures it and the
// negative controls that must break it. A claim runs one configuration at one
// precision and returns an Outcome; the runner (verify.hpp) sweeps
// configurations and precisions and turns outcomes into a report.
//
// Identity claims report rel_err and κ and pass when e = rel_err/(u κ) ≤ budget.
// Statistical claims report a statistic, its expected value and standard error
// and pass when |statistic − expected| ≤ budget · std_err (budget = z-score).
#pragma once

#include "core/attention.hpp"
#include "core/linalg.hpp"
#include "core/qkv_plan.hpp"
#include "core/rng.hpp"
#include "core/types.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace qkvlab::theory {

// The claim-specific part of a point: the typed fields its check reads, and the
// label verify prints after the dimensions (which also names the point's random
// stream). Checks read the fields, never the label.
struct PointVariant {
  std::string label = "";                                    // e.g. "elim=K", "layer=2", "kv=1"; empty: none
  std::optional<qkv::Projection> eliminated = std::nullopt;  // qwe.lemma3.1: T is W_Q, W_K or W_V
  int layer = 0;                                             // qwe.thm4.1: the layer l (1-based) whose W_Q^l is T
  int kv_heads = 0;                                          // qwe.ext.gqa: key/value heads H_kv
  double rope_theta = 0;                                     // qwe.ext.rope: RoPE's base θ
  int entry = 0;  // otherwise: the index in the claim's own list of variants (e.g. "k=1 prior=0")
};

// The variants of a claim with its own list: each label with its index as `entry`.
std::vector<PointVariant> numbered(const std::vector<std::string>& labels);

// One point of a sweep (dimensions, mask, variant, trial). Claims ignore the
// dimensions they do not use.
struct SweepPoint {
  int d = 16, heads = 2, layers = 1, seq = 8;
  Mask mask = Mask::causal;
  PointVariant variant;
  int trial = 0;
};

// The dimensions a claim depends on: only these appear in its configurations.
// width = false: the claim runs at its own defaults.d whatever the sweep's --d (its cost grows
// too fast in d for the sweep's widths; its statement names the width).
// The least sizes the claim's statement, or its negative controls, have; a configuration of the sweep
// below them is not one of the claim's, and a sweep with none skips the claim, saying why
// (theory/verify.cpp):
// min_d: the least width d (qwe.obs3.1: its common left null vector leaves Q Kᵀ d − 1 dimensions, and
//   the swapped-products control changes only its antisymmetric part: none at d = 2, one number at d = 3);
// min_layers: the least depth L (Eq. 5 combines n ≥ 2 layers; qwe.thm4.3's control unshares layers);
// min_seq: the least sequence length n (a control that changes only the attention scores cannot change
//   one position's output: its softmax is 1 whatever the score);
// min_head_width: the least head width d/H (per-head QK-norm fixes a width-1 head up to sign, so the
//   generic M_h of its control is a scalar the norm removes; qwe.freedom.vo: a width-1 N_h is a scalar,
//   so its N^-T control is N^-1, the claim itself);
// even_head_width: d/H even (RoPE rotates pairs of coordinates).
struct Dims {
  bool heads = true, layers = false, seq = true, mask = true, width = true;
  int min_d = 2, min_layers = 1, min_seq = 1, min_head_width = 1;
  bool even_head_width = false;
  const char* why_d = "";       // the claim's own reason for min_d (reported with the skip)
  const char* why_layers = "";  // and for min_layers; empty: its statement needs them
  const char* why_head_width = "";  // and for min_head_width
};

// A control's verdict: it must fail (rel_err ≥ control_threshold), or, for a
// control that feeds a singular basis, the tool must detect it.
inline constexpr double control_threshold = 1e-3;

struct ControlOutcome {
  std::string name;
  std::optional<double> rel_err;
  bool failed_as_expected = false;
  std::string note;
  int positions = 0;  // the fresh positions it ran on (control_input, on_control_input); 0: the check's input
};

ControlOutcome control_by_error(std::string name, double rel_err);
ControlOutcome control_by_detection(std::string name, bool detected, double rel_err);
// A control of a statistical or count claim: the wrong expected value must be rejected by the
// claim's own rule, |statistic − wrong| > budget · std_err. rel_err holds |statistic − wrong|.
ControlOutcome control_by_rejection(std::string name, double statistic, double wrong, double std_err, double budget);

struct Statistic {
  double value, expected, std_err;
};

struct Outcome {
  double rel_err = 0;
  double kappa = 1;
  bool singular = false;  // a change of basis was numerically singular
  // A statistical check's exact part (an identity its statistic rests on) failed: the check
  // fails whatever its statistic (status "identity_failed"; the note gives the error).
  bool identity_failed = false;
  std::string note;
  std::optional<Statistic> statistic;
  std::vector<ControlOutcome> controls;
};

// count: an exact integer (a rank) against its prediction, run once in double; pass when equal
// (budget 0, std_err 1: one dimension).
enum class Kind { identity, statistical, count };

struct DefaultSweep {
  std::vector<int> d = {}, heads = {}, layers = {}, seq = {};
};

struct Claim {
  std::string id;
  std::string statement;  // one line, for --list and the ledger
  Kind kind = Kind::identity;
  Dims dims;
  double budget = 1e3;
  // Claim-specific variants of one configuration (e.g. which weight is eliminated).
  std::function<std::vector<PointVariant>(const SweepPoint&)> variants = nullptr;
  // Claim-specific default lists, used where the user gives none.
  DefaultSweep defaults = {};
  // Runs one configuration at one precision; rng is the configuration's stream.
  std::function<Outcome(const SweepPoint&, Precision, Rng&)> run;
};

// The registry, in ledger order.
const std::vector<Claim>& all_claims();

// Adapts a type with `template <class S> static Outcome run(const SweepPoint&, Rng&)`.
template <class Impl> std::function<Outcome(const SweepPoint&, Precision, Rng&)> dispatch() {
  return [](const SweepPoint& c, Precision p, Rng& rng) {
    return with_scalar(p, [&]<class S>() { return Impl::template run<S>(c, rng); });
  };
}

// Draws at the working precision: N(0, 1/fan_in) entries, drawn in double.
template <class S> Mat<S> draw(Rng& rng, Eigen::Index rows, Eigen::Index cols, double stddev) {
  return cast<S>(rng.gaussian(rows, cols, stddev));
}

// The input of the controls that perturb only the attention scores: X itself from n = 8 positions, below
// that a fresh draw of 8 (control_seq rows). Such a control changes the output through each row's softmax,
// by a random multiple of that row's score differences; at n = 2 that is one row (causal) and one
// difference, and the control's rel_err fell under 1e-3 by chance in 1-3% of draws (d <= 4). Over 8 rows
// it fails unless the perturbation itself is near the identity. A control run on such a fresh draw says so
// (on_control_input): verify records its n and a note.
inline constexpr int control_positions = 8;
inline int control_seq(const SweepPoint& c) { return std::max(c.seq, control_positions); }
template <class S> Mat<S> control_input(Rng& rng, const SweepPoint& c, const Mat<S>& X) {
  return c.seq >= control_positions ? X : draw<S>(rng, control_positions, c.d, 1.0);
}
inline ControlOutcome on_control_input(ControlOutcome o, const SweepPoint& c) {
  if (c.seq < control_positions) o.positions = control_positions;
  return o;
}

// U_M diag(σ) V_Mᵀ with σ log-spaced on [2, 8] (U_M, V_M orthogonal): every gain ‖M y‖/‖y‖ ≥ 2, so
// ‖(M − I) y‖ ≥ ‖y‖ for every y, by construction (a Gaussian block has gains near 1 along some y, and
// can lie near the identity or near a claim's freedom, by chance). The controls' wrong blocks:
// qwe.sec8.3.1 (in place of U), qwe.ext.* (a block the claim's freedom does not allow).
template <class S> Mat<S> non_orthogonal_factor(Rng& rng, int d) {
  const Mat<S> U_M = orthogonal_factor<S>(draw<S>(rng, d, d, 1.0));
  const Mat<S> V_M = orthogonal_factor<S>(draw<S>(rng, d, d, 1.0));
  Vec<S> gain(d);
  for (int i = 0; i < d; ++i) gain(i) = S(2 * std::pow(4.0, d == 1 ? 0.0 : double(i) / (d - 1)));
  return U_M * gain.asDiagonal() * V_M.transpose();
}

// A Gaussian change of basis (entries N(0, 1/d)).
template <class S> ChangeOfBasis<S> random_basis(Rng& rng, Eigen::Index d) {
  return change_of_basis<S>(cast<S>(draw_basis(rng, d, 1.0 / std::sqrt(double(d)))));
}

// A basis whose last column is the first plus 10u times a random column:
// cond ≈ 1/(10u) at the working precision, beyond the singular threshold.
template <class S> Mat<S> near_singular(Rng& rng, Eigen::Index d) {
  Mat<S> T = draw<S>(rng, d, d, 1.0 / std::sqrt(double(d)));
  T.col(d - 1) = T.col(0) + S(10 * unit_roundoff<S>()) * draw<S>(rng, d, 1, 1.0);
  return T;
}

// Column convention (§8.3 onwards): max_j ‖a_j − b_j‖ / ‖a_j‖ over the columns,
// so that points of very different norms each count.
template <class S> double max_column_rel_err(const Mat<S>& a, const Mat<S>& b) {
  double e = 0;
  for (Eigen::Index j = 0; j < a.cols(); ++j) e = std::max(e, rel_err<S>(a.col(j), b.col(j)));
  return e;
}

// n Gaussian directions (columns) with norms 10^k, k spread evenly over [−3, 3].
MatD multiscale_inputs(Rng& rng, int d, int n);

// printf-style formatting of up to five numbers, for a check's one-line note.
std::string fmt(const char* format, double a, double b = 0, double c = 0, double d = 0, double e = 0);

}  // namespace qkvlab::theory
