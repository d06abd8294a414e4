// qwe.cor8.4.1, empirical half (docs/math/qkv.md, qwe.cor8.4.1): fit a skipless ReLU MLP of
// the same width to a skip ReLU MLP. Column-vector convention of that section:
//   target  f(x) = R x + W_2 σ(W_1 x),   W_1 ∈ R^{m×d}, W_2 ∈ R^{d×m}, R ∈ R^{d×d} invertible,
//   model   g(x) = W̃_2 σ(W̃_1 x),         W̃_1 ∈ R^{m×d}, W̃_2 ∈ R^{d×m}, σ = ReLU.
// By qwe.thm8.4, g = f is attainable iff W_2 P_J W_1 = −R for some |J| ≥ d (a
// "representable" pair, built with core/absorb.hpp's representable_w2); for a
// generic pair the best g stays a positive distance from f (qwe.cor8.4.1).
//
// The fit. Inputs x ~ N(0, I_d), a fresh batch every step; loss per batch
//   L = Σ_n ‖g(x_n) − f(x_n)‖² / Σ_n ‖f(x_n)‖²       (relative squared error),
// Adam (AdamW with weight decay 0: decay would pull g off an exact solution),
// linear warmup then cosine decay, clipping at global norm FitConfig::clip.
// Training runs on the engine's CPU backend in double, with the backward written out
// beside the forward (absorb_fit.cpp), in the row-vector layout: a batch X ∈ R^{n×d}
// holds inputs as rows, G = σ(X W̃_1ᵀ) W̃_2ᵀ. Each restart has
// its own stream Rng(seed, stream + "/restart/i") (init, then batches), so the
// numbers depend only on (seed, stream), never on threads or on other restarts.
// The restart with the lowest loss on a common selection sample (stream
// "/select") is the best one; every restart's held-out error
//   rel_err = sqrt(Σ ‖g − f‖² / Σ ‖f‖²)
// is measured on a separate large sample (stream "/heldout"). Selection and
// held-out samples are independent, so the best restart's error is not biased
// by having been selected on it.
#pragma once

#include "core/absorb.hpp"
#include "core/rng.hpp"
#include "core/types.hpp"
#include "engine/adamw_config.hpp"
#include "engine/optimizer.hpp"
#include "engine/parameters.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace qkvlab::synthetic {

// The statement checked (qwe.cor8.4.1, empirical), on the best restart's held-out rel_err:
// a representable pair is fitted to optimizer precision, rel_err ≤ optimizer_precision;
// a generic one stays above the floor, rel_err ≥ generic_floor (docs/math/conventions.md's margin
// for a negative control). Measured values: docs/claims.md, qwe.cor8.4.1.
inline constexpr double optimizer_precision = 1e-6;
inline constexpr double generic_floor = 1e-3;

// f(x) = R x + W_2 σ(W_1 x).
struct SkipNetwork {
  MatD R, W_1, W_2;
};

// f and g applied to the columns of X (d × n).
MatD apply(const SkipNetwork& f, const MatD& X);
MatD apply(const SkiplessMlp<double>& g, const MatD& X);

// Draws (column vectors): W_1 entries N(0, 1/d), W_2 entries N(0, 1/m), in that order.
// W_1 is redrawn until its rows are separated: the sine of the angle between any
// two rows is ≥ min_sine (the theorem's "pairwise non-collinear", with a margin;
// min_sine = 0 accepts every draw). Two kinks closer than that are where a
// same-width fit from random starts gets stuck (docs/claims.md, qwe.cor8.4.1).
// The redrawing is bounded: after core/limits.hpp's default_max_attempts draws a
// SamplingLimit names the condition (an infeasible one, such as d = 1 with m >= 2
// and min_sine > 0, or one too unlikely to meet).
// generic_network: the draw as it is (representable with probability 0).
// representable_network: J a uniformly random d-subset (sorted), W_1 redrawn also until
// cond₂(W_1[J,:]) ≤ max_basis_condition (core/linalg.hpp, as bases are), then the
// J-columns of W_2 set so that W_2 P_J W_1 = −R: W_2 = R · representable_w2(W_1, R⁻¹ W_2, J)
// (for R = I exactly core's construction). J is returned.
SkipNetwork generic_network(Rng& rng, int d, int m, const MatD& R, double min_sine);
SkipNetwork representable_network(Rng& rng, int d, int m, const MatD& R, double min_sine, std::vector<int>* J = nullptr);

// min over pairs i ≠ j of the sine of the angle between rows i and j of W (1 for one row).
double min_row_sine(const MatD& W);
// min_row_sine(W) >= min_sine, stopping at the first pair closer than that.
bool rows_separated(const MatD& W, double min_sine);

struct FitConfig {
  int restarts = 16;
  int steps = 10000;
  int batch = 256;
  double lr = 0.3;              // peak learning rate (Adam's step is about lr per coordinate)
  double lr_floor = 1e-4;       // final learning rate, as a fraction of lr
  double warmup = 0.05;         // fraction of steps spent warming up
  double clip = 1.0;            // global gradient-norm clip
  double adam_eps = 1e-30;      // Adam's ε; see absorb_fit.cpp's file comment
  int select_samples = 4096;    // common sample on which restarts are compared
  int heldout_samples = 65536;  // fresh sample for the reported rel_err
  int trace_points = 10;        // loss recorded at this many evenly spaced steps
};

struct RestartFit {
  SkiplessMlp<double> g;
  double loss = 0;     // relative squared error on the selection sample
  double rel_err = 0;  // held-out sqrt(Σ‖g − f‖² / Σ‖f‖²)
  int matched_units = 0;          // rows of W̃_1 collinear (sine ≤ 1e-6) with a row of W_1
  std::vector<int> trace_steps;   // steps at which the batch loss was recorded
  std::vector<double> trace_loss; // mean batch loss over the steps since the previous point
};

struct FitResult {
  std::vector<RestartFit> restarts;
  std::size_t best = 0;  // index of the lowest selection loss
  const RestartFit& best_fit() const { return restarts[best]; }
};

// One batch of the fit, row layout: inputs X (batch × d) one a row, and their targets F = f(X).
struct SkiplessBatch {
  MatD X, F;
};

// The skipless MLP on a backend in double, row layout A = W̃_1ᵀ (d×m), B = W̃_2ᵀ (m×d), with its
// backward written out beside the forward (llm.c style):
//   forward   Z = X A,  H = σ(Z),  G = H B
//   loss      L = Σ‖G − F‖² / Σ‖F‖²,  dG = 2 (G − F) / Σ‖F‖²          (engine/relative_error.hpp)
//   backward  dB += Hᵀ dG,  dH = dG Bᵀ,  dZ = dH ⊙ [Z > 0],  dA += Xᵀ dZ   (engine/linear.hpp; σ'(0) = 0)
// step(): zero the gradients, backward, clip by the global norm of (dA, dB) at FitConfig::clip,
// then Adam (engine/optimizer.hpp: AdamW with ε = FitConfig::adam_eps, no weight decay).
class SkiplessTrainer {
 public:
  // A (d×m) and B (m×d) the initial weights; batches of config.batch rows.
  SkiplessTrainer(engine::Backend<double>& be, const MatD& A, const MatD& B, const FitConfig& config);
  SkiplessTrainer(const SkiplessTrainer&) = delete;
  SkiplessTrainer& operator=(const SkiplessTrainer&) = delete;

  double loss(const SkiplessBatch& batch);          // L, the forward pass only
  void add_gradient(const SkiplessBatch& batch);    // forward and backward, adding into params().grads
  double step(const SkiplessBatch& batch, double lr);  // L before the update (non-finite: no update)
  SkiplessMlp<double> weights() const;              // W̃_1 = Aᵀ, W̃_2 = Bᵀ
  engine::ParameterSet<double>& params() { return params_; }  // "A", "B"
  engine::Backend<double>& backend() { return be_; }

 private:
  double forward(const SkiplessBatch& batch);
  void backward();
  std::size_t rows(int width) const;

  engine::Backend<double>& be_;
  int d_, m_, n_;
  engine::ParameterSet<double> params_;
  engine::AdamWState<double> adam_;
  engine::AdamWConfig adam_config_;
  double clip_;
  engine::Buffer<double> X_, F_, Z_, H_, G_, dG_, dH_, dZ_;  // batch rows each
};

// Fits width-m skipless MLPs to f (m = f.W_1.rows()) from config.restarts random
// initializations. Throws NumericalError when a loss turns non-finite and
// std::invalid_argument on shapes that do not fit or a bad configuration.
FitResult fit_skipless(const SkipNetwork& f, const FitConfig& config, std::uint64_t seed, const std::string& stream);

// rows of W̃_1 collinear (sine of the angle ≤ tol) with some row of W_1, counted once each.
int matched_units(const MatD& W_1, const MatD& fitted_W_1, double tol = 1e-6);

}  // namespace qkvlab::synthetic
