// qwe.cor8.4.1, empirical half: see absorb_fit.hpp for the convention and formulas.
//
// Precision. On a representable pair the problem is realizable: the gradient
// vanishes on every batch at the optimum, so there is no noise floor, and the exact
// fits end at rel_err ≈ 2e-16, double's rounding (the loss at ≈ 1e-32). Adam's ε is
// 1e-30 so that its normalized step is not what stops it; the usual 1e-8 was
// checked to end at rounding level too (d = 3, seeds 1–3, 4 restarts), so neither ε
// nor the learning-rate floor limits the precision: what limits a fit is whether its
// restart reaches the right basin at all (docs/claims.md, qwe.cor8.4.1).
#include "synthetic/absorb_fit.hpp"

#include "core/errors.hpp"
#include "core/limits.hpp"
#include "core/linalg.hpp"
#include "engine/cpu_backend.hpp"
#include "engine/linear.hpp"
#include "engine/optimizer.hpp"
#include "engine/relative_error.hpp"
#include "engine/rng.hpp"
#include "engine/schedule.hpp"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace qkvlab::synthetic {
namespace {

MatD relu(const MatD& H) { return H.cwiseMax(0.0); }

std::vector<int> random_subset(Rng& rng, int m, int k) {
  std::vector<int> p(std::size_t(m), 0);
  std::iota(p.begin(), p.end(), 0);
  for (int i = m - 1; i > 0; --i) std::swap(p[std::size_t(i)], p[std::size_t(rng.uniform_int(i + 1))]);
  std::vector<int> J(p.begin(), p.begin() + k);
  std::sort(J.begin(), J.end());
  return J;
}

double cond2(const MatD& A) {
  const auto sv = Eigen::JacobiSVD<MatD>(A).singularValues();
  return sv(0) / sv(sv.size() - 1);
}

void check_shapes(const SkipNetwork& f) {
  const Eigen::Index m = f.W_1.rows(), d = f.W_1.cols();
  if (m == 0 || d == 0 || f.W_2.rows() != d || f.W_2.cols() != m || f.R.rows() != d || f.R.cols() != d)
    throw std::invalid_argument("absorb fit: shapes do not fit (W_1 m×d, W_2 d×m, R d×d)");
}

// Σ‖g − f‖² / Σ‖f‖² on the inputs X (columns), with F = f(X) given.
double relative_squared_error(const SkiplessMlp<double>& g, const MatD& X, const MatD& F) {
  return (apply(g, X) - F).squaredNorm() / F.squaredNorm();
}

RestartFit fit_restart(const SkipNetwork& f, const FitConfig& c, engine::Backend<double>& be, Rng& rng,
                       const MatD& X_select, const MatD& F_select) {
  const Eigen::Index m = f.W_1.rows(), d = f.W_1.cols();
  const MatD A = engine::normal_matrix<double>(d, m, 1 / std::sqrt(double(d)), rng);
  const MatD B = engine::normal_matrix<double>(m, d, 1 / std::sqrt(double(m)), rng);
  SkiplessTrainer trainer(be, A, B, c);
  const auto warmup = std::int64_t(c.warmup * c.steps);
  const engine::WarmupCosine schedule(c.lr, c.lr * c.lr_floor, warmup, c.steps);
  const MatD f_rows_R = f.R.transpose(), f_rows_W1 = f.W_1.transpose(), f_rows_W2 = f.W_2.transpose();

  RestartFit r;
  double window_sum = 0;
  int window_count = 0, next_point = 0;
  for (int step = 0; step < c.steps; ++step) {
    const MatD X = rng.gaussian(c.batch, d);
    const double value = trainer.step({X, X * f_rows_R + relu(X * f_rows_W1) * f_rows_W2}, schedule(step));
    if (!std::isfinite(value))
      throw NumericalError("absorb fit: the loss is not finite at step " + std::to_string(step));
    window_sum += value;
    ++window_count;
    if (step + 1 == (next_point + 1) * c.steps / c.trace_points) {
      r.trace_steps.push_back(step + 1);
      r.trace_loss.push_back(window_sum / window_count);
      window_sum = 0;
      window_count = 0;
      ++next_point;
    }
  }
  r.g = trainer.weights();
  r.loss = relative_squared_error(r.g, X_select, F_select);
  if (!std::isfinite(r.loss)) throw NumericalError("absorb fit: the selection loss is not finite");
  r.matched_units = matched_units(f.W_1, r.g.W_1);
  return r;
}

void check_config(const FitConfig& c) {
  if (c.restarts < 1 || c.steps < 1 || c.batch < 1 || c.select_samples < 1 || c.heldout_samples < 1 ||
      c.trace_points < 1 || c.trace_points > c.steps)
    throw std::invalid_argument("absorb fit: restarts, steps, batch, samples and trace points must be positive");
  if (!(c.lr > 0) || !(c.lr_floor >= 0 && c.lr_floor <= 1) || !(c.warmup >= 0 && c.warmup < 1) || !(c.clip > 0) ||
      !(c.adam_eps > 0))
    throw std::invalid_argument("absorb fit: lr > 0, lr_floor in [0, 1], warmup in [0, 1), clip > 0, eps > 0");
}

}  // namespace

// ---- SkiplessTrainer: the model on the backend -----------------------------------------------

namespace {

using RowMatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

engine::ParameterLayout skipless_layout(Eigen::Index d, Eigen::Index m) {
  engine::ParameterLayout layout;
  layout.add("A", {d, m}, false);  // no weight decay: it would pull g off an exact solution
  layout.add("B", {m, d}, false);
  return layout;
}

// M as the backend's row-major array, at `offset` of `to`.
void upload_rows(engine::Buffer<double>& to, const MatD& M, std::size_t offset = 0) {
  const RowMatD rows = M;
  to.upload(rows.data(), std::size_t(rows.size()), offset);
}

}  // namespace

SkiplessTrainer::SkiplessTrainer(engine::Backend<double>& be, const MatD& A, const MatD& B, const FitConfig& c)
    : be_(be), d_(int(A.rows())), m_(int(A.cols())), n_(c.batch), params_(be, skipless_layout(A.rows(), A.cols())),
      adam_(be, params_.layout.total()), adam_config_{.eps = c.adam_eps, .weight_decay = 0.0}, clip_(c.clip),
      X_(be, rows(d_)), F_(be, rows(d_)), Z_(be, rows(m_)), H_(be, rows(m_)), G_(be, rows(d_)), dG_(be, rows(d_)),
      dH_(be, rows(m_)), dZ_(be, rows(m_)) {
  if (B.rows() != m_ || B.cols() != d_ || n_ < 1)
    throw std::invalid_argument("SkiplessTrainer: need A d×m, B m×d and a positive batch");
  upload_rows(params_.values, A, params_.layout.at("A").offset);
  upload_rows(params_.values, B, params_.layout.at("B").offset);
}

std::size_t SkiplessTrainer::rows(int width) const { return std::size_t(n_) * std::size_t(width); }

double SkiplessTrainer::forward(const SkiplessBatch& batch) {
  if (batch.X.rows() != n_ || batch.X.cols() != d_ || batch.F.rows() != n_ || batch.F.cols() != d_)
    throw std::invalid_argument("SkiplessTrainer: a batch is " + std::to_string(n_) + "x" + std::to_string(d_));
  upload_rows(X_, batch.X), upload_rows(F_, batch.F);
  engine::linear_forward<double>(be_, n_, d_, m_, {X_.data(), d_}, params_.value("A"), nullptr, {Z_.data(), m_});
  be_.relu_forward(rows(m_), Z_.data(), H_.data());
  engine::linear_forward<double>(be_, n_, m_, d_, {H_.data(), m_}, params_.value("B"), nullptr, {G_.data(), d_});
  return engine::relative_squared_error<double>(be_, n_, d_, G_.data(), F_.data(), dG_.data());
}

void SkiplessTrainer::backward() {
  engine::linear_backward<double>(be_, n_, m_, d_, {H_.data(), m_}, params_.value("B"), {dG_.data(), d_},
                                  {dH_.data(), m_}, params_.grad("B"), nullptr);
  be_.fill(rows(m_), 0.0, dZ_.data());
  be_.relu_backward(rows(m_), Z_.data(), dH_.data(), dZ_.data());
  engine::linear_backward<double>(be_, n_, d_, m_, {X_.data(), d_}, params_.value("A"), {dZ_.data(), m_},
                                  {nullptr, 0}, params_.grad("A"), nullptr);
}

double SkiplessTrainer::loss(const SkiplessBatch& batch) { return forward(batch); }

void SkiplessTrainer::add_gradient(const SkiplessBatch& batch) {
  forward(batch);
  backward();
}

double SkiplessTrainer::step(const SkiplessBatch& batch, double lr) {
  const double value = forward(batch);
  if (!std::isfinite(value)) return value;
  be_.fill(params_.grads.size(), 0.0, params_.grads.data());
  backward();
  engine::clip_gradients(be_, params_, clip_);
  adam_.step(be_, params_, adam_config_, lr);
  return value;
}

SkiplessMlp<double> SkiplessTrainer::weights() const {
  const std::vector<double> v = params_.values.to_host();
  const RowMatD A = Eigen::Map<const RowMatD>(v.data() + params_.layout.at("A").offset, d_, m_);
  const RowMatD B = Eigen::Map<const RowMatD>(v.data() + params_.layout.at("B").offset, m_, d_);
  return {A.transpose(), B.transpose()};
}

MatD apply(const SkipNetwork& f, const MatD& X) { return f.R * X + f.W_2 * relu(f.W_1 * X); }

MatD apply(const SkiplessMlp<double>& g, const MatD& X) { return g.W_2 * relu(g.W_1 * X); }

double min_row_sine(const MatD& W) {
  double sine = 1;
  for (Eigen::Index i = 0; i < W.rows(); ++i) {
    const VecD u = W.row(i).transpose().normalized();
    for (Eigen::Index j = i + 1; j < W.rows(); ++j) {
      const VecD w = W.row(j).transpose().normalized();
      sine = std::min(sine, (w - w.dot(u) * u).norm());
    }
  }
  return sine;
}

bool rows_separated(const MatD& W, double min_sine) {
  if (!(min_sine >= 0 && min_sine <= 1)) throw std::invalid_argument("absorb fit: min_sine must be in [0, 1]");
  if (min_sine == 0) return true;
  std::vector<VecD> unit;
  for (Eigen::Index i = 0; i < W.rows(); ++i) unit.push_back(W.row(i).transpose().normalized());
  for (std::size_t i = 0; i < unit.size(); ++i)
    for (std::size_t j = i + 1; j < unit.size(); ++j)
      if (!((unit[j] - unit[j].dot(unit[i]) * unit[i]).norm() >= min_sine)) return false;
  return true;
}

namespace {

std::string separation_condition(int m, int d, double min_sine) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "rows of a %dx%d W_1 pairwise at least %g (sine) from collinear", m, d, min_sine);
  return buf;
}

}  // namespace

SkipNetwork generic_network(Rng& rng, int d, int m, const MatD& R, double min_sine) {
  const MatD W_1 = draw_until(
      default_max_attempts, separation_condition(m, d, min_sine),
      [&] { return rng.gaussian(m, d, 1 / std::sqrt(double(d))); },
      [&](const MatD& W) { return rows_separated(W, min_sine); });
  SkipNetwork f{R, W_1, rng.gaussian(d, m, 1 / std::sqrt(double(m)))};
  check_shapes(f);
  return f;
}

SkipNetwork representable_network(Rng& rng, int d, int m, const MatD& R, double min_sine, std::vector<int>* J_out) {
  if (m < d) throw std::invalid_argument("absorb fit: a representable pair needs m >= d");
  const std::vector<int> J = random_subset(rng, m, d);
  // Condition the rows that get inverted, as bases are (core/linalg.hpp).
  const MatD W_1 = draw_until(
      default_max_attempts, separation_condition(m, d, min_sine) + " with cond_2(W_1[J,:]) <= 1.7e4",
      [&] { return rng.gaussian(m, d, 1 / std::sqrt(double(d))); },
      [&](const MatD& W) {
        MatD rows(d, d);
        for (int k = 0; k < d; ++k) rows.row(k) = W.row(J[std::size_t(k)]);
        return cond2(rows) <= max_basis_condition && rows_separated(W, min_sine);
      });
  const MatD W_2 = rng.gaussian(d, m, 1 / std::sqrt(double(m)));
  // W_2' P_J W_1 = R · (R⁻¹W_2 with J-columns −W_1[J,:]⁻¹) P_J W_1 = R · (−I) = −R.
  const MatD R_inv_W_2 = R.partialPivLu().solve(W_2);
  SkipNetwork f{R, W_1, R * representable_w2<double>(W_1, R_inv_W_2, J)};
  check_shapes(f);
  if (J_out) *J_out = J;
  return f;
}

int matched_units(const MatD& W_1, const MatD& fitted_W_1, double tol) {
  int matched = 0;
  std::vector<bool> used(std::size_t(fitted_W_1.rows()), false);
  for (Eigen::Index i = 0; i < W_1.rows(); ++i) {
    const VecD u = W_1.row(i).transpose().normalized();
    for (Eigen::Index k = 0; k < fitted_W_1.rows(); ++k) {
      const VecD w = fitted_W_1.row(k).transpose();
      if (used[std::size_t(k)] || !(w.norm() > 0)) continue;
      if ((w - w.dot(u) * u).norm() <= tol * w.norm()) {
        used[std::size_t(k)] = true;
        ++matched;
        break;
      }
    }
  }
  return matched;
}

FitResult fit_skipless(const SkipNetwork& f, const FitConfig& config, std::uint64_t seed, const std::string& stream) {
  check_shapes(f);
  check_config(config);
  const Eigen::Index d = f.W_1.cols();
  Rng select_rng(seed, stream + "/select"), heldout_rng(seed, stream + "/heldout");
  const MatD X_select = select_rng.gaussian(d, config.select_samples);
  const MatD F_select = apply(f, X_select);
  const MatD X_heldout = heldout_rng.gaussian(d, config.heldout_samples);
  const MatD F_heldout = apply(f, X_heldout);

  // One thread: the products are d×m, too small to split (the numbers do not depend on it).
  engine::CpuBackend<double> backend(1);
  FitResult out;
  for (int i = 0; i < config.restarts; ++i) {
    Rng rng(seed, stream + "/restart/" + std::to_string(i));
    RestartFit r = fit_restart(f, config, backend, rng, X_select, F_select);
    r.rel_err = std::sqrt(relative_squared_error(r.g, X_heldout, F_heldout));
    if (!std::isfinite(r.rel_err)) throw NumericalError("absorb fit: the held-out error is not finite");
    out.restarts.push_back(std::move(r));
  }
  for (std::size_t i = 1; i < out.restarts.size(); ++i)
    if (out.restarts[i].loss < out.restarts[out.best].loss) out.best = i;
  return out;
}

}  // namespace qkvlab::synthetic
