// The trained models and experiments of docs/math/icl.md (experiments 2–5):
// engine/linear_attention.hpp against the scores-first formula and central
// differences, every model's gradient (per tensor) against central differences
// in double, forward equality with the column-convention models of
// core/icl/models.hpp and, for the stack, with the direct formula, the structural facts the estimators rely on
// (linearity in x_{n+1}) or the report states (parity in Y), the closed-form
// one-step GD loss against Monte Carlo, training, determinism, and the CLI.
// Every check has a negative control that must fail by a wide margin.
#include "core/errors.hpp"
#include "engine/cpu_backend.hpp"
#include "engine/linear_attention.hpp"
#include "synthetic/icl/anchor.hpp"
#include "synthetic/icl/depth.hpp"
#include "synthetic/icl/linear_attention_models.hpp"
#include "core/icl/models.hpp"
#include "synthetic/icl/train_experiment.hpp"
#include "synthetic/icl/train_report.hpp"
#include "tests/backend_gradient.hpp"
#include "tests/json_digits.hpp"
#include "tests/run_command.hpp"
#include "tests/scratch_dir.hpp"
#include "results/figure.hpp"

#include <gtest/gtest.h>


#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace {

using namespace qkvlab;
using namespace qkvlab::icl;
using qkvlab::test_support::expect_gradient_matches;

double rel(const MatD& a, const MatD& b) { return (a - b).norm() / a.norm(); }

std::vector<Prompt> prompts(const Task& task, int count, std::uint64_t stream) {
  Rng rng(7, stream);
  std::vector<Prompt> p;
  for (int i = 0; i < count; ++i) p.push_back(draw_prompt(task, rng));
  return p;
}

// ---------------------------------------------------------------- the linear-attention operation

using RowMatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Host matrices in and out of the backend (row-major).
engine::Buffer<double> on_backend(engine::Backend<double>& be, const MatD& M) {
  const RowMatD rows = M;
  engine::Buffer<double> b(be, std::size_t(rows.size()));
  b.upload(rows.data(), std::size_t(rows.size()));
  return b;
}
MatD from_backend(const engine::Buffer<double>& b, Eigen::Index rows, Eigen::Index cols) {
  RowMatD M(rows, cols);
  b.download(M.data(), std::size_t(M.size()));
  return M;
}

struct AttentionCase {
  Eigen::Index B = 3, T = 5, keys = 4, dk = 3, dv = 2;
  bool last = false;
  double c = 0.5;
  Eigen::Index q_rows() const { return last ? 1 : T; }
  engine::LinearAttentionShape shape() const {
    return {int(B), int(T), int(keys), int(q_rows()), int(dk), int(dv)};
  }
};

// O = c Q_b (K_bᵀ V_b) through engine/linear_attention.hpp, Q holding q_rows rows per prompt.
MatD attention_on_backend(engine::Backend<double>& be, const AttentionCase& s, const MatD& Q, const MatD& K,
                          const MatD& V) {
  auto q = on_backend(be, Q), k = on_backend(be, K), v = on_backend(be, V);
  engine::Buffer<double> G(be, std::size_t(s.B * s.dk * s.dv)), O(be, std::size_t(s.B * s.q_rows() * s.dv));
  engine::linear_attention_forward<double>(be, s.shape(), s.c, {q.data(), int(s.dk)}, {k.data(), int(s.dk)},
                                           {v.data(), int(s.dv)}, G.data(), {O.data(), int(s.dv)});
  return from_backend(O, s.B * s.q_rows(), s.dv);
}

// The query rows of every prompt (all rows, or the last of each block of T).
MatD query_rows(const MatD& X, const AttentionCase& s) {
  if (!s.last) return X;
  MatD out(s.B, X.cols());
  for (Eigen::Index b = 0; b < s.B; ++b) out.row(b) = X.row(b * s.T + s.T - 1);
  return out;
}

TEST(IclLinearAttention, MatchesTheScoresOrderPerPrompt) {
  engine::CpuBackend<double> be(2);
  Rng rng(1, "batched");
  for (bool last : {false, true}) {
    AttentionCase s;
    s.last = last;
    const MatD K = rng.gaussian(s.B * s.T, s.dk), V = rng.gaussian(s.B * s.T, s.dv);
    const MatD Q = query_rows(rng.gaussian(s.B * s.T, s.dk), s);
    const MatD out = attention_on_backend(be, s, Q, K, V);
    for (Eigen::Index b = 0; b < s.B; ++b) {
      // c (Q_b K_bᵀ) V_b, scores first, over the first `keys` rows (or, as a control, all T).
      const auto reference = [&](Eigen::Index keys) {
        const MatD scores = Q.middleRows(b * s.q_rows(), s.q_rows()) * K.middleRows(b * s.T, keys).transpose();
        return MatD(s.c * scores * V.middleRows(b * s.T, keys));
      };
      const MatD mine = out.middleRows(b * s.q_rows(), s.q_rows());
      EXPECT_LT(rel(reference(s.keys), mine), 1e-14);
      EXPECT_GT(rel(reference(s.T), mine), 1e-2);  // control: the query token as a key/value source
    }
  }
}

// φ = Σ R ⊙ O against central differences in every entry of Q, K and V;
// drop_dk: the backward given a scratch for dK instead (a wrong backward).
double attention_gradient_error(const AttentionCase& s, bool drop_dk) {
  engine::CpuBackend<double> be(1);
  Rng rng(2, "gradcheck");
  std::vector<MatD> x{query_rows(rng.gaussian(s.B * s.T, s.dk), s), rng.gaussian(s.B * s.T, s.dk),
                      rng.gaussian(s.B * s.T, s.dv)};
  const MatD R = rng.gaussian(s.B * s.q_rows(), s.dv);
  const auto phi = [&] { return (R.array() * attention_on_backend(be, s, x[0], x[1], x[2]).array()).sum(); };
  auto q = on_backend(be, x[0]), k = on_backend(be, x[1]), v = on_backend(be, x[2]), dO = on_backend(be, R);
  engine::Buffer<double> G(be, std::size_t(s.B * s.dk * s.dv)), O(be, std::size_t(s.B * s.q_rows() * s.dv)),
      dG(be, G.size()), scratch(be, k.size());
  std::vector<engine::Buffer<double>> grads;
  for (const auto& b : {&q, &k, &v}) grads.emplace_back(be, b->size());
  const int dk = int(s.dk), dv = int(s.dv);
  engine::linear_attention_forward<double>(be, s.shape(), s.c, {q.data(), dk}, {k.data(), dk}, {v.data(), dv},
                                           G.data(), {O.data(), dv});
  engine::linear_attention_backward<double>(be, s.shape(), s.c, {q.data(), dk}, {k.data(), dk}, {v.data(), dv},
                                            G.data(), {dO.data(), dv}, {grads[0].data(), dk},
                                            {(drop_dk ? scratch : grads[1]).data(), dk}, {grads[2].data(), dv},
                                            dG.data());
  double num = 0, den = 0;
  const double h = 1e-5;
  for (std::size_t t = 0; t < x.size(); ++t) {
    const MatD analytic = from_backend(grads[t], x[t].rows(), x[t].cols());
    for (Eigen::Index i = 0; i < x[t].size(); ++i) {
      const double keep = x[t](i);
      x[t](i) = keep + h;
      const double up = phi();
      x[t](i) = keep - h;
      const double down = phi();
      x[t](i) = keep;
      const double fd = (up - down) / (2 * h);
      num += (fd - analytic(i)) * (fd - analytic(i)), den += fd * fd;
    }
  }
  return std::sqrt(num / den);
}

TEST(IclLinearAttention, GradientsMatchFiniteDifferences) {
  for (bool last : {false, true}) {
    AttentionCase s;
    s.last = last, s.B = 2, s.T = 4, s.keys = 3, s.c = 0.7;
    EXPECT_LT(attention_gradient_error(s, false), 1e-8) << (last ? "last query" : "all queries");
    EXPECT_GT(attention_gradient_error(s, true), 1e-2);  // control: the key gradient left out
  }
}

// ---------------------------------------------------------------- models: gradients

TEST(IclModels, TwoLayerGradientsMatchFiniteDifferences) {
  engine::CpuBackend<double> be(2);
  const Task task{3, 3, 0.5, {}};
  const TokenBatch batch = make_token_batch(prompts(task, 3, 1)), other = make_token_batch(prompts(task, 3, 2));
  for (FirstLayer first : {FirstLayer::copying_fixed, FirstLayer::copying_learned, FirstLayer::attention})
    for (VariantKind v : {VariantKind::vanilla, VariantKind::skipv1, VariantKind::resformer, VariantKind::svformer}) {
      Rng rng(3, variant_name(v) + first_layer_name(first));
      TwoLayerModel m(be, {v, first, 3, 3, 2}, rng);
      if (first == FirstLayer::copying_learned)  // move A, B away from the coordinate start
        for (const char* name : {"A", "B"})
          set_weight(m.params(), name, weight(m.params(), name) + rng.gaussian(3, weight(m.params(), name).cols(), 0.3));
      expect_gradient_matches(m, batch, other, variant_name(v) + " " + first_layer_name(first));
    }
}

// The stack takes its value sources from the plan of MHA or SkipV1; any other variant is refused.
TEST(IclModels, StackIsMhaOrSkipV1) {
  EXPECT_NO_THROW(validate(StackConfig{2, 4, 3, 2, VariantKind::skipv1}));
  EXPECT_THROW(validate(StackConfig{2, 4, 3, 2, VariantKind::resformer}), UsageError);
  EXPECT_THROW(validate(StackConfig{2, 4, 3, 1, VariantKind::skipv1}), UsageError);
}

TEST(IclModels, StackGradientsMatchFiniteDifferences) {
  engine::CpuBackend<double> be(2);
  const Task task{2, 4, 0.5, {}};
  const ConcatBatch batch = make_concat_batch(prompts(task, 3, 3)), other = make_concat_batch(prompts(task, 3, 4));
  for (const StackConfig& c : {StackConfig{2, 4, 1, 1, VariantKind::vanilla},
                               StackConfig{2, 4, 3, 2, VariantKind::vanilla},
                               StackConfig{2, 4, 3, 2, VariantKind::skipv1}}) {
    const bool skipv1 = c.variant == VariantKind::skipv1;
    Rng rng(4, skipv1 ? "skip" : "mha");
    LinearAttentionStack m(be, c, rng);
    expect_gradient_matches(m, batch, other,
                            "L=" + std::to_string(c.layers) + (skipv1 ? " skipv1" : " mha"));
  }
}

// ---------------------------------------------------------------- models: forward against direct formulas

LayerTwo<double> layer_two_of(const TwoLayerModel& m) {
  LayerTwo<double> w;
  for (int h = 1; h <= 2; ++h) {
    const std::string p = "l2.h" + std::to_string(h) + ".";
    auto& head = w.heads[std::size_t(h - 1)];
    head.W_Q = to_column_weight(weight(m.params(), p + "WQ"));
    head.W_K = to_column_weight(weight(m.params(), p + "WK"));
    const bool from_E = m.config().variant == VariantKind::skipv1 && h == 2;
    head.W_V = to_column_weight(weight(m.params(), p + (from_E ? "WV_E" : "WV_F")));
  }
  w.H = to_column_weight(weight(m.params(), "H"));
  return w;
}

TEST(IclModels, ForwardEqualsColumnConventionModels) {
  engine::CpuBackend<double> be(2);
  const int d = 3, n = 4;
  const Task task{d, n, 0.5, {}};
  const auto ps = prompts(task, 4, 5);
  const TokenBatch batch = make_token_batch(ps);
  for (FirstLayer first : {FirstLayer::copying_fixed, FirstLayer::copying_learned, FirstLayer::attention})
    for (int a : {1, 2, 3})  // a = 0: the query token is 0 and every prediction is 0
      for (VariantKind v : {VariantKind::vanilla, VariantKind::skipv1}) {
        Rng rng(6, variant_name(v) + std::to_string(a) + first_layer_name(first));
        TwoLayerModel m(be, {v, first, d, n, a}, rng);
        if (first == FirstLayer::copying_learned)  // move A, B away from the coordinate start
          for (const char* name : {"A", "B"})
            if (m.params().layout.find(name))
              set_weight(m.params(), name, weight(m.params(), name) + rng.gaussian(d, weight(m.params(), name).cols(), 0.3));
        const MatD mine = m.predict(batch);
        const LayerTwo<double> w = layer_two_of(m);
        std::array<HeadWeights<double>, 2> first_heads;
        if (first == FirstLayer::attention)
          for (int h = 0; h < 2; ++h) {
            const std::string p = "l1.h" + std::to_string(h + 1) + ".";
            first_heads[std::size_t(h)] = {to_column_weight(weight(m.params(), p + "WQ")),
                                           to_column_weight(weight(m.params(), p + "WK")),
                                           to_column_weight(weight(m.params(), p + "WV"))};
          }
        const auto column_model = [&](qkv::VariantKind arch) {
          MatD out(Eigen::Index(ps.size()), d);
          for (std::size_t b = 0; b < ps.size(); ++b) {
            const MatD E = prompt_tokens(ps[b]);
            const MatD F = first == FirstLayer::attention ? tf_layer<double>(E, first_heads)
                                                          : copying_layer<double>(E, m.A(), m.B());
            out.row(Eigen::Index(b)) = (w.H * layer_two_output<double>(E, F, w, arch).col(E.cols() - 1)).transpose();
          }
          return out;
        };
        const qkv::VariantKind same = v == VariantKind::vanilla ? qkv::VariantKind::vanilla : qkv::VariantKind::skipv1;
        const qkv::VariantKind other = v == VariantKind::vanilla ? qkv::VariantKind::skipv1 : qkv::VariantKind::vanilla;
        EXPECT_LT(rel(column_model(same), mine), 1e-12) << variant_name(v) << " a=" << a << " " << first_layer_name(first);
        EXPECT_GT(rel(column_model(other), mine), 1e-2);  // control: the other architecture
        if (first == FirstLayer::copying_fixed) {
          MatD token(Eigen::Index(ps.size()), d);
          for (std::size_t b = 0; b < ps.size(); ++b)
            token.row(Eigen::Index(b)) =
                token_prediction<double>(prompt_tokens(ps[b]), m.A(), m.B(), w, same).transpose();
          EXPECT_LT(rel(token, mine), 1e-12);
        }
      }
}

// The stack's layer-by-layer query states against the scores-first formula per
// prompt: Z_l = Z_{l−1} + Σ_h (1/n) (Z Θ_Q)(Z_keys Θ_K)ᵀ (Z'_keys Θ_V).
std::vector<MatD> stack_states_directly(const LinearAttentionStack& m, const ConcatBatch& batch, bool skip_as_mha) {
  const StackConfig& c = m.config();
  const Eigen::Index T = c.n + 1, B = batch.prompts();
  std::vector<MatD> states(std::size_t(c.layers), MatD(B, 2 * c.d));
  for (Eigen::Index b = 0; b < B; ++b) {
    const MatD Z0 = batch.Z.middleRows(b * T, T);
    MatD Z = Z0;
    for (int l = 1; l <= c.layers; ++l) {
      MatD next = Z;
      for (int h = 1; h <= c.heads; ++h) {
        const std::string p = "l" + std::to_string(l) + ".h" + std::to_string(h) + ".";
        const bool from_first = c.variant == VariantKind::skipv1 && !skip_as_mha && l >= 2 && h > c.heads / 2;
        const MatD V = (from_first ? Z0 : Z).topRows(c.n) * weight(m.params(), p + "WV");
        const MatD scores = (Z * weight(m.params(), p + "WQ")) * (Z.topRows(c.n) * weight(m.params(), p + "WK")).transpose();
        next += scores * V / c.n;
      }
      Z = next;
      states[std::size_t(l - 1)].row(b) = Z.row(T - 1);
    }
  }
  return states;
}

TEST(IclModels, StackForwardEqualsTheDirectFormula) {
  engine::CpuBackend<double> be(2);
  const Task task{2, 5, 0.5, {}};
  const ConcatBatch batch = make_concat_batch(prompts(task, 4, 14));
  for (bool skip : {false, true}) {
    Rng rng(15, skip ? "skip" : "mha");
    LinearAttentionStack m(be, {2, 5, 3, 2, skip ? VariantKind::skipv1 : VariantKind::vanilla}, rng);
    const std::vector<MatD> mine = m.query_states(batch), direct = stack_states_directly(m, batch, false);
    for (std::size_t l = 0; l < mine.size(); ++l) EXPECT_LT(rel(direct[l], mine[l]), 1e-13) << "layer " << l + 1;
    EXPECT_LT(rel(direct.back().rightCols(2), m.predict(batch)), 1e-13);
    if (skip) {  // control: SkipV1's heads reading Z_{l−1} instead of Z_0
      EXPECT_GT(rel(stack_states_directly(m, batch, true).back(), mine.back()), 1e-3);
    }
  }
}

// ---------------------------------------------------------------- structure

std::vector<Prompt> with_query(std::vector<Prompt> ps, const std::function<VecD(const Prompt&)>& x) {
  for (auto& p : ps) p.x_query = x(p);
  return ps;
}

// Every model is linear in x_{n+1} (held_out_loss relies on it).
TEST(IclModels, PredictionsAreLinearInTheQuery) {
  engine::CpuBackend<double> be(2);
  const Task task{3, 4, 0.5, {}};
  const auto ps = prompts(task, 3, 8);
  Rng rng(9, "queries");
  const MatD u = rng.gaussian(3, 3), w = rng.gaussian(3, 3);
  for (FirstLayer first : {FirstLayer::copying_fixed, FirstLayer::attention})
    for (VariantKind v : {VariantKind::vanilla, VariantKind::skipv1, VariantKind::resformer, VariantKind::svformer}) {
      TwoLayerModel m(be, {v, first, 3, 4, 2}, rng);
      const auto predict = [&](const std::vector<Prompt>& p) { return m.predict(make_token_batch(p)); };
      std::size_t i = 0;
      const MatD a = predict(with_query(ps, [&](const Prompt&) { return VecD(u.col(Eigen::Index(i++ % 3))); }));
      i = 0;
      const MatD b = predict(with_query(ps, [&](const Prompt&) { return VecD(w.col(Eigen::Index(i++ % 3))); }));
      i = 0;
      const MatD ab = predict(with_query(ps, [&](const Prompt&) {
        const Eigen::Index k = Eigen::Index(i++ % 3);
        return VecD(u.col(k) + 2 * w.col(k));
      }));
      EXPECT_LT(rel(ab, a + 2 * b), 1e-12);
      EXPECT_GT(rel(ab, a + b), 1e-2);  // control
    }
  LinearAttentionStack s(be, {3, 4, 3, 2, VariantKind::skipv1}, rng);
  const auto predict = [&](const std::vector<Prompt>& p) { return s.predict(make_concat_batch(p)); };
  const MatD a = predict(with_query(ps, [&](const Prompt&) { return VecD(u.col(0)); }));
  const MatD b = predict(with_query(ps, [&](const Prompt&) { return VecD(w.col(0)); }));
  const MatD ab = predict(with_query(ps, [&](const Prompt&) { return VecD(u.col(0) + 2 * w.col(0)); }));
  EXPECT_LT(rel(ab, a + 2 * b), 1e-12);
}

// Without Assumption 1 (a learned TF_1, no residual, P = diag(I_2n, 0)) every
// layer-2 Gram pairs a token with itself, so ŷ is even in Y: at W_0 = 0 no model
// can beat the zero predictor. With the copying layer SkipV1 is not even (control).
TEST(IclModels, LearnedFirstLayerGivesPredictionsEvenInY) {
  engine::CpuBackend<double> be(2);
  const Task task{3, 4, 0.5, {}};
  const auto ps = prompts(task, 4, 10);
  auto flipped = ps;
  for (auto& p : flipped) p.Y = -p.Y;
  Rng rng(11, "parity");
  for (VariantKind v : {VariantKind::vanilla, VariantKind::skipv1, VariantKind::resformer, VariantKind::svformer}) {
    TwoLayerModel m(be, {v, FirstLayer::attention, 3, 4, 3}, rng);
    EXPECT_LT(rel(m.predict(make_token_batch(ps)), m.predict(make_token_batch(flipped))), 1e-12);
  }
  TwoLayerModel m(be, {VariantKind::skipv1, FirstLayer::copying_fixed, 3, 4, 3}, rng);
  EXPECT_GT(rel(m.predict(make_token_batch(ps)), m.predict(make_token_batch(flipped))), 1e-2);
}

// ---------------------------------------------------------------- one-step GD

TEST(IclAnchor, OneStepGdLossMatchesMonteCarlo) {
  for (const Task& task : {Task{4, 16, 0.5, {}}, Task{2, 5, 1.0, {}}}) {
    const OneStepGd best = best_one_step_gd(task.d, task.n, task.sigma);
    const auto ps = prompts(task, 20000, 12);
    for (double eta : {best.eta, 0.5 * best.eta, 1.5 * best.eta}) {
      const MatD y_hat = one_step_gd_predictions(ps, eta);
      std::vector<double> loss;
      for (std::size_t b = 0; b < ps.size(); ++b)
        loss.push_back((y_hat.row(Eigen::Index(b)).transpose() - ps[b].y_query).squaredNorm());
      const LossEstimate mc = estimate(loss);
      const double analytic = one_step_gd_loss(task.d, task.n, task.sigma, eta);
      EXPECT_LT(std::abs(mc.value - analytic), 4 * mc.se) << "eta " << eta;
      if (eta < best.eta) continue;
      // Control: E S² = n² I (dropping the Wishart's (d + 1) n term).
      const double s2 = task.sigma * task.sigma, dd = double(task.d) * task.d;
      const double wrong = eta * eta * task.n * dd * (task.n + s2) - 2 * eta * task.n * dd + dd + task.d * s2;
      EXPECT_GT(std::abs(mc.value - wrong), 10 * mc.se);
    }
    EXPECT_LT(best.loss, one_step_gd_loss(task.d, task.n, task.sigma, 0.9 * best.eta));
    EXPECT_LT(best.loss, one_step_gd_loss(task.d, task.n, task.sigma, 1.1 * best.eta));
  }
}

// The best restart has the lowest loss on the selection prompts, drawn apart from the held-out
// ones (each run's two losses differ), so the held-out loss reported for it is not biased by the
// choice.
template <class Run, class HeldOut>
void expect_best_chosen_on_other_prompts(const std::vector<Run>& runs, int best, HeldOut held_out) {
  ASSERT_GE(runs.size(), 2u);
  for (const Run& run : runs) EXPECT_NE(run.selection_loss, held_out(run));
  for (const Run& run : runs) EXPECT_LE(runs[std::size_t(best)].selection_loss, run.selection_loss);
}

TEST(IclAnchor, ShortTrainingReachesTheOneStepLossAndIsDeterministic) {
  AnchorConfig c;
  c.task = {2, 8, 0.5, {}};
  c.train.steps = 300, c.train.batch = 64, c.train.lr = 1e-2, c.train.log_every = 50;
  c.restarts = 2, c.eval_samples = 2000, c.seed = 3, c.threads = 1;
  const AnchorResult r1 = run_anchor(c);
  const double zero_predictor = c.task.d * c.task.d + c.task.d * 0.25;
  EXPECT_LT(r1.runs[0].curve.loss.back(), 0.7 * r1.runs[0].curve.loss.front());
  EXPECT_LT(r1.runs[std::size_t(r1.best)].trained.value, 0.5 * zero_predictor);
  EXPECT_LT(r1.relative_gap(), 0.10);
  expect_best_chosen_on_other_prompts(r1.runs, r1.best, [](const AnchorRun& run) { return run.trained.value; });
  c.threads = 2;
  const AnchorResult r2 = run_anchor(c);
  for (std::size_t i = 0; i < r1.runs.size(); ++i) {
    EXPECT_EQ(r1.runs[i].trained.value, r2.runs[i].trained.value);
    EXPECT_EQ(r1.runs[i].curve.loss, r2.runs[i].curve.loss);
  }
  c.seed = 4;  // control: another seed gives other numbers
  EXPECT_NE(run_anchor(c).runs[0].trained.value, r1.runs[0].trained.value);
}

TEST(IclTrain, SkipV1UnderAssumption1LearnsAndMhaCannotSeeY) {
  TrainExperimentConfig c;
  c.task = {2, 6, 0.5, {}};
  c.a = 2, c.models = {VariantKind::vanilla, VariantKind::skipv1};
  c.train.steps = 300, c.train.batch = 32, c.train.lr = 1e-2, c.train.log_every = 50;
  c.restarts = 2, c.eval_samples = 2000, c.theory_prompts = 5000, c.seed = 5, c.threads = 2;
  const TrainExperimentResult r = run_train_experiment(c);
  for (int m = 0; m < 2; ++m) {
    const std::vector<TrainRun> runs(r.runs.begin() + 2 * m, r.runs.begin() + 2 * m + 2);
    expect_best_chosen_on_other_prompts(runs, r.models[std::size_t(m)].best - 2 * m,
                                        [](const TrainRun& run) { return run.loss.value; });
  }
  const double zero_predictor = c.task.d * c.task.d + c.task.d * 0.25;
  // SkipV1 learns; MHA at a = d sees no y (F holds only x's), so it stays at the zero predictor's loss.
  EXPECT_LT(r.models[1].best_loss, 0.6 * zero_predictor);
  EXPECT_GT(r.models[0].best_loss, 0.9 * zero_predictor);
  ASSERT_TRUE(r.models[0].reference && r.models[1].reference);
  // The tables' model codes are docs/figures.md's (0 mha, 1 skipv1), whatever VariantKind's order.
  const ExperimentTables tables = train_tables(r);
  const results::Column* code = tables.main.find("model");
  ASSERT_NE(code, nullptr);
  EXPECT_EQ(code->values, (std::vector<double>{0, 0, 1, 1}));
  EXPECT_EQ(decoder_accounting(VariantKind::vanilla, FirstLayer::attention, 4).kv_cache_per_token, 32);
  EXPECT_EQ(decoder_accounting(VariantKind::skipv1, FirstLayer::attention, 4).kv_cache_per_token, 28);  // −1/8
}

TEST(IclDepth, GdIteratesAndBestStep) {
  const Task task{2, 8, 0.5, {}};
  const auto ps = prompts(task, 2000, 13);
  const GdStep one = best_gd_step(ps, 1);
  const OneStepGd analytic = best_one_step_gd(2, 8, 0.5);
  EXPECT_NEAR(one.eta, analytic.eta, 0.1 * analytic.eta);
  const auto it = gd_predictions(ps, 0.01, 2);
  // Two steps by hand for the first prompt.
  const Prompt& p = ps[0];
  MatD W = 0.01 * p.Y * p.X.transpose();
  W -= 0.01 * (W * p.X - p.Y) * p.X.transpose();
  EXPECT_LT(rel(W * p.x_query, it[1].row(0).transpose()), 1e-12);
  EXPECT_GT(rel(W * p.x_query, it[0].row(0).transpose()), 1e-2);  // control: the first iterate
  EXPECT_LT(best_gd_step(ps, 3).loss, one.loss);
}

// ---------------------------------------------------------------- CLI

using CliRun = qkvlab::test_support::CommandResult;
CliRun run(const std::string& args) { return qkvlab::test_support::run_qkvlab(args); }

TEST(IclCli, BadInputExitsTwoWithOneLineAndWritesNothing) {
  const qkvlab::test_support::ScratchDir scratch;
  const auto h5 = scratch / "bad.h5";
  for (const std::string& args : std::vector<std::string>{"icl train --d 0", "icl train --learn-ab --out " + h5.string(),
                                 "icl train --assumption1 --a 9 --d 4 --out " + h5.string(),
                                 "icl train --models gpt --out " + h5.string(), "icl anchor --lr -1",
                                 "icl depth --heads 3 --out " + h5.string(), "icl sweep --format xml",
                                 "icl anchor --csv /nonexistent_dir/x.csv", "icl train --device cuda --out " + h5.string(),
                                 // --a is Assumption 1's copy width: without it, refused as --learn-ab is (not ignored)
                                 "icl train --a 2 --out " + h5.string(),
                                 // C needs the posterior mean: sigma = 0 needs n >= d, refused before training
                                 "icl train --sigma 0 --n 2 --out " + h5.string(),
                                 "icl sweep --sigma-list 0.5,0 --n-list 2 --out " + h5.string(),
                                 // a loss scale E|y|^2 that overflows a double: refused, not "lambda is not finite"
                                 "icl train --assumption1 --w0-scale 1e200 --out " + h5.string(),
                                 "icl sweep --sigma-list 1e200 --out " + h5.string(), "icl depth --sigma 1e200 --out " + h5.string(),
                                 "icl anchor --sigma 1e160 --out " + h5.string()}) {
    const CliRun r = run(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(h5)) << args;
  }
  EXPECT_EQ(run("icl anchor --steps 5 --restarts 1 --eval-samples 10 --quiet").status, 0);  // control
  // control: sigma = 0 with n < d is refused only where the posterior mean is used (anchor has none)
  EXPECT_EQ(run("icl anchor --sigma 0 --n 2 --steps 5 --restarts 1 --eval-samples 10 --quiet").status, 0);
  EXPECT_EQ(run("icl train --assumption1 --a 2 --models mha --steps 5 --restarts 1 --eval-samples 10 --theory-prompts 100 "
                "--quiet").status,
            0);  // control: --a with --assumption1
}

// The outputs are written before anything is printed (as icl train and theory do): a failed write
// (/dev/full) prints nothing and exits 3. Control: the same runs with a writable --csv print their table.
TEST(IclCli, SweepAndDepthWriteBeforeTheyPrint) {
  const qkvlab::test_support::ScratchDir scratch;
  const std::string csv = (scratch / "ok.csv").string();
  for (const std::string& args :
       {std::string("icl sweep --d-list 2 --steps 5 --restarts 1 --eval-samples 200 --theory-prompts 200 --quiet"),
        std::string("icl depth --layers 2 --steps 5 --eval-samples 200 --quiet")}) {
    const CliRun failed = run(args + " --csv /dev/full");
    EXPECT_EQ(failed.status, 3) << args;
    EXPECT_EQ(failed.out, "") << args;
    EXPECT_NE(failed.err.find("/dev/full"), std::string::npos) << failed.err;
    const CliRun written = run(args + " --csv '" + csv + "'");
    EXPECT_EQ(written.status, 0) << args << written.err;
    EXPECT_NE(written.out, "") << args;
    EXPECT_TRUE(std::filesystem::exists(csv)) << args;
  }
}

// --figure STEM's files (STEM.svg, STEM.png, STEM.csv) are checked against the other outputs before the
// training (a clash with --out was found only after it: a million steps would run first). Control: a stem
// that clashes with nothing runs and writes them.
TEST(IclCli, FigureFilesAreCheckedBeforeTheTraining) {
  const qkvlab::test_support::ScratchDir scratch;
  const std::string stem = (scratch / "fig").string();
  for (const std::string& args : {std::string("icl train --models mha --restarts 1"), std::string("icl depth --layers 1")}) {
    const CliRun clash =  // bounded: the old order trained first
        qkvlab::test_support::run_bounded(args + " --steps 1000000 --quiet --out '" + stem + ".svg' --figure '" + stem + "'", 60);
    EXPECT_EQ(clash.status, 2) << args << ": " << clash.err;
    EXPECT_NE(clash.err.find("--figure " + stem + ".svg is also --out's file"), std::string::npos) << clash.err;
    const CliRun csv_clash =
        qkvlab::test_support::run_bounded(args + " --steps 1000000 --quiet --out '" + stem + ".csv' --figure '" + stem + "'", 60);
    EXPECT_EQ(csv_clash.status, 2) << args << ": " << csv_clash.err;
  }
  if (!qkvlab::results::gnuplot_available()) return;
  const CliRun ok = run("icl depth --layers 1 --steps 5 --eval-samples 200 --quiet --figure '" + stem + "'");
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_TRUE(std::filesystem::exists(stem + ".svg") && std::filesystem::exists(stem + ".csv"));
}

// A run whose held-out loss stays finite but ends orders of magnitude above both its loss before
// training and the zero predictor's is a diverged run: exit 3 with a one-line message, not a number
// (lr 10 ends at a held-out loss of about 6e18). Control: the same run at the default lr exits 0.
TEST(IclCli, FiniteDivergedRunExitsThree) {
  const std::string args = "icl train --steps 300 --models mha --restarts 1 --eval-samples 2000 --theory-prompts 2000 --quiet";
  const CliRun diverged = run(args + " --lr 10");
  EXPECT_EQ(diverged.status, 3) << diverged.out;
  EXPECT_NE(diverged.err.find("diverged"), std::string::npos) << diverged.err;
  const CliRun normal = run(args);
  EXPECT_EQ(normal.status, 0) << normal.err;
}

// MHA's reference is a lower bound only at W_0 = 0 (the proof's Lemmas 2–4); at W_0 = 6I the printed
// table says it is the formula's value, not a bound; at a = d it is C + E|W_D|^2, not C + C3 + c_a.
TEST(IclCli, MhaBoundIsLabelledABoundOnlyWhereItIsOne) {
  const std::string args = "icl train --assumption1 --models mha --steps 5 --restarts 1 --eval-samples 10 --theory-prompts 200 --quiet";
  const CliRun w0 = run(args + " --w0-scale 6");
  ASSERT_EQ(w0.status, 0) << w0.err;
  EXPECT_EQ(w0.out.find("lower bound"), std::string::npos) << w0.out;
  EXPECT_NE(w0.out.find("MHA bound formula C + E|W_D|^2 (not a bound: W_0 != 0)"), std::string::npos) << w0.out;
  const CliRun zero = run(args);  // control
  ASSERT_EQ(zero.status, 0) << zero.err;
  EXPECT_NE(zero.out.find("MHA lower bound C + E|W_D|^2"), std::string::npos) << zero.out;
  EXPECT_NE(run(args + " --a 2").out.find("MHA lower bound C + C3 + c_a"), std::string::npos);
  const CliRun json = run(args + " --w0-scale 6 --format json");
  EXPECT_NE(json.out.find("\"lower_bound_holds\": false"), std::string::npos) << json.out;
}

// The rule itself: more than ten times both the zero predictor's loss and the run's own starting
// loss (a learned first layer starts near 1e6–1e9, so an untrained run is not diverged).
TEST(IclTrain, DivergenceIsAnOrderOfMagnitudeAboveTheStartAndTheZeroPredictor) {
  const Task t{4, 16, 0.5, {}};
  EXPECT_DOUBLE_EQ(zero_predictor_loss(t), 17);
  EXPECT_TRUE(diverged(t, 6.3e18, 1e6));
  EXPECT_FALSE(diverged(t, 5e6, 1e6));    // untrained, a little above its start: not diverged
  EXPECT_FALSE(diverged(t, 169, 16.95));  // below ten times the zero predictor's 17
  EXPECT_TRUE(diverged(t, 171, 16.95));
  EXPECT_TRUE(diverged(t, std::nan(""), 17));
}

TEST(IclCli, JsonHasTheDocumentedFields) {
  const qkvlab::test_support::ScratchDir scratch;
  const auto json = scratch / "report.json";
  const std::string check =
      "python3 -c \"import json,sys; d=json.load(open(sys.argv[1])); missing=[k for k in sys.argv[2:] if k not in d]; "
      "print(missing); sys.exit(1 if missing else 0)\" ";
  const std::pair<std::string, std::string> cases[] = {
      {"icl anchor --steps 20 --restarts 1 --eval-samples 100",
       "seed analytic_optimum eta_star trained relative_gap paired_gap gd_monte_carlo"},
      {"icl train --assumption1 --models mha skipv1 --steps 20 --restarts 1 --eval-samples 100 --theory-prompts 1000",
       "seed C runs models skipv1_minus_mha first_layer"},
      {"icl depth --layers 1 2 --steps 20 --eval-samples 100", "seed runs"},
      {"icl sweep --d-list 2 --n-list 4 --steps 10 --restarts 1 --eval-samples 50 --theory-prompts 500", "seed points"}};
  for (const auto& [args, keys] : cases) {
    const CliRun r = run(args + " --quiet --format json");
    ASSERT_EQ(r.status, 0) << args << ": " << r.err;
    std::ofstream(json) << r.out;
    EXPECT_EQ(std::system((check + json.string() + " " + keys + " >/dev/null").c_str()), 0) << args << ": " << r.out;
    EXPECT_EQ(qkvlab::test_support::short_json_numbers(r.out), std::vector<std::string>{}) << args;  // 17 digits
  }
  EXPECT_NE(std::system((check + json.string() + " no_such_field >/dev/null").c_str()), 0);  // control
}

// The tables print a large value as the number it is (results::short_number from 1e6 up): a held-out loss
// of 1e32 ± 4e30 was printed cut to 31 characters, "1000000000000000005366162204393" (a hundredth of it at
// 4e32). Control: an ordinary value keeps its four decimals.
TEST(IclReport, LargeValuesPrintAsTheNumbersTheyAre) {
  const auto depth_row = [](double loss, double se) {
    DepthConfig c;
    c.task = Task{4, 16, 0.5, {}}, c.layers = {1};
    DepthRun r;
    r.layers = 1, r.trained.value = loss, r.trained.se = se;
    LayerProbe p;
    p.layer = 1, p.gd = {1, 0.047, 4.97}, p.model_loss = loss, p.cosine = 0.5, p.relative_distance = 2;
    r.probes = {p};
    return depth_text(c, {r});
  };
  const std::string large = depth_row(1e32, 4e30);
  EXPECT_NE(large.find("1  mha      1e+32 (4e+30)"), std::string::npos) << large;
  EXPECT_NE(large.find("layer 1: 1e+32, GD-1 4.9700"), std::string::npos) << large;
  const std::string ordinary = depth_row(16.9375, 0.0123);  // control
  EXPECT_NE(ordinary.find("1  mha      16.9375 (0.0123)"), std::string::npos) << ordinary;
  AnchorConfig c;
  c.task = Task{4, 16, 0.5, {}};
  AnchorResult r;
  r.analytic = best_one_step_gd(4, 16, 0.5);
  r.runs.resize(1);
  r.runs[0].trained.value = 4e30, r.runs[0].trained.se = 1e29;
  const std::string anchor = anchor_text(c, r);
  EXPECT_NE(anchor.find("trained 4e+30 +- 1e+29"), std::string::npos) << anchor;
  EXPECT_NE(anchor.find("L(eta*) = 4.9529"), std::string::npos) << anchor;  // control
}

// icl depth and icl anchor apply icl train's divergence rule (train.hpp: divergence): a run whose held-out
// loss ends more than 10 times above both its start and E|y|^2 is refused, exit 3, nothing written, not
// printed as a loss with exit 0 (depth at lr 0.5 ended at 7.4e15, anchor at lr 5 at 1.7e5 against 4.95).
// Control: the same runs at the default lr exit 0 and write their table.
TEST(IclCli, DepthAndAnchorApplyTrainsDivergenceRule) {
  const qkvlab::test_support::ScratchDir scratch;
  const std::string csv = (scratch / "t.csv").string();
  for (const auto& [args, lr] : std::vector<std::pair<std::string, std::string>>{
           {"icl depth --layers 1,2 --steps 20 --eval-samples 200 --threads 1 --quiet", "0.5"},
           {"icl anchor --steps 20 --restarts 1 --eval-samples 200 --threads 1 --quiet", "5"}}) {
    const CliRun diverged = run(args + " --lr " + lr + " --csv '" + csv + "'");
    EXPECT_EQ(diverged.status, 3) << args << ": " << diverged.out;
    EXPECT_EQ(std::count(diverged.err.begin(), diverged.err.end(), '\n'), 1) << diverged.err;
    EXPECT_NE(diverged.err.find("training diverged: "), std::string::npos) << diverged.err;
    EXPECT_NE(diverged.err.find("more than 10 times both its loss before training"), std::string::npos) << diverged.err;
    EXPECT_EQ(diverged.out, "") << args;
    EXPECT_FALSE(std::filesystem::exists(csv)) << args;
    const CliRun normal = run(args + " --csv '" + csv + "'");  // control
    EXPECT_EQ(normal.status, 0) << args << ": " << normal.err;
    EXPECT_TRUE(std::filesystem::exists(csv)) << args;
    std::filesystem::remove(csv);
  }
}

// run_depth marks a diverged run (for reproduce icl-depth, which records it as diverged) rather than
// throwing, with icl train's message; the runs that did not diverge carry no mark (control).
TEST(IclDepth, ADivergedRunIsMarkedWithTrainsRule) {
  DepthConfig c;
  c.task = Task{4, 16, 0.5, {}}, c.layers = {1, 2}, c.eval_samples = 200, c.train.steps = 20, c.train.batch = 64;
  c.train.lr = 0.5, c.train.log_every = 1;
  const std::vector<DepthRun> hot = run_depth(c);
  ASSERT_EQ(hot.size(), 3u);
  bool any = false;
  for (const DepthRun& r : hot)
    if (!r.diverged.empty()) {
      any = true;
      EXPECT_EQ(r.diverged.rfind("training diverged: ", 0), 0u) << r.diverged;
      EXPECT_GT(r.trained.value, 10 * 17.0);
    }
  EXPECT_TRUE(any);
  c.train.lr = 5e-3;
  for (const DepthRun& r : run_depth(c)) EXPECT_EQ(r.diverged, "") << r.layers;
}

// icl depth's memory check counts the held-out prompts it keeps (about 1.5 KB each at d = 4, n = 16),
// so --eval-samples past the budget is refused before the work (exit 2, one line); the old estimate of
// 16 bytes a prompt let 1,000,000 prompts start under 1 GB and end "out of memory" (exit 3). Control:
// 20,000 prompts fit and run under the same limit.
TEST(IclCli, DepthRefusesHeldOutPromptsPastTheMemoryBudget) {
  const auto limited = [](const std::string& samples) {
    return qkvlab::test_support::run_command(
        "ulimit -v 1000000; timeout -s KILL 120 " + qkvlab::test_support::shell_quoted(QKVLAB_BINARY) +
        " icl depth --layers 1 --steps 1 --threads 1 --quiet --eval-samples " + samples);
  };
  const CliRun big = limited("1000000");
  EXPECT_EQ(big.status, 2) << big.err;
  EXPECT_EQ(std::count(big.err.begin(), big.err.end(), '\n'), 1) << big.err;
  EXPECT_NE(big.err.find("--eval-samples 1000000 needs about"), std::string::npos) << big.err;
  EXPECT_EQ(big.out, "");
  const CliRun fits = limited("20000");
  EXPECT_EQ(fits.status, 0) << fits.err;
}

// Under an address-space limit too small for OpenBLAS's own server thread to get its buffer (ulimit -v
// 200000), that thread retries forever and exit's handlers joined it: "out of memory" was printed, then
// the process hung (killed at the timeout: 137), and so did a refusal. Now the process ends through
// std::_Exit: exit 3 with its one line, exit 2 for the refusal. Control: without the limit the run succeeds.
TEST(IclCli, OutOfMemoryExitsThreeInsteadOfHanging) {
  const std::string args = "icl depth --layers 1 --steps 1 --threads 1 --quiet --eval-samples ";
  const auto limited = [&](const std::string& samples) {
    return qkvlab::test_support::run_command("ulimit -v 200000; timeout -s KILL 60 " +
                                             qkvlab::test_support::shell_quoted(QKVLAB_BINARY) + " " + args + samples);
  };
  const CliRun out_of_memory = limited("70000");  // within the budget (154 MB): runs, then cannot allocate
  EXPECT_EQ(out_of_memory.status, 3) << out_of_memory.err;
  EXPECT_EQ(out_of_memory.err, "qkvlab: error: out of memory\n");
  const CliRun refused = limited("100000");  // past the budget: refused before the work
  EXPECT_EQ(refused.status, 2) << refused.err;
  EXPECT_NE(refused.err.find("more than the budget of"), std::string::npos) << refused.err;
  const CliRun free = qkvlab::test_support::run_bounded(args + "70000", 120);
  EXPECT_EQ(free.status, 0) << free.err;
}

}  // namespace
