// The trained models and experiments of docs/math/icl.md (experiments 2–5):
// the batched linear-attention operation against the engine's, gradients by
// central differences, forward equality with the column-convention models of
// core/icl/models.hpp, the structural facts the estimators rely on
// (linearity in x_{n+1}) or the report states (parity in Y), the closed-form
// one-step GD loss against Monte Carlo, training, determinism, and the CLI.
// Every check has a negative control that must fail by a wide margin.
#include "engine/gradcheck.hpp"
#include "engine/ops.hpp"
#include "engine/optim.hpp"
#include "synthetic/icl/anchor.hpp"
#include "synthetic/icl/batched_linear_attention.hpp"
#include "synthetic/icl/depth.hpp"
#include "synthetic/icl/linear_attention_models.hpp"
#include "core/icl/models.hpp"
#include "synthetic/icl/train_experiment.hpp"
#include "tests/json_digits.hpp"
#include "tests/run_command.hpp"
#include "tests/scratch_dir.hpp"

#include <gtest/gtest.h>


#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

using namespace qkvlab;
using namespace qkvlab::icl;
using engine::Tape;
using engine::Var;

double rel(const MatD& a, const MatD& b) { return (a - b).norm() / a.norm(); }

std::vector<Prompt> prompts(const Task& task, int count, std::uint64_t stream) {
  Rng rng(7, stream);
  std::vector<Prompt> p;
  for (int i = 0; i < count; ++i) p.push_back(draw_prompt(task, rng));
  return p;
}

// ---------------------------------------------------------------- the batched operation

TEST(IclBatchedAttention, MatchesEngineLinearAttentionPerPrompt) {
  Rng rng(1, "batched");
  const Eigen::Index B = 3, T = 5, keys = 4, dk = 3, dv = 2;
  const MatD Q = rng.gaussian(B * T, dk), K = rng.gaussian(B * T, dk), V = rng.gaussian(B * T, dv);
  for (Queries queries : {Queries::all_queries, Queries::last_query}) {
    Tape<double> tape;
    const MatD out = batched_linear_attention(tape.constant(Q), tape.constant(K), tape.constant(V), T, keys, queries,
                                              0.5).value();
    const Eigen::Index q_rows = queries == Queries::all_queries ? T : 1;
    for (Eigen::Index b = 0; b < B; ++b) {
      const auto reference = [&](Eigen::Index k) {
        Tape<double> t;
        return MatD(engine::scale(engine::linear_attention(t.constant(Q.middleRows(b * T + T - q_rows, q_rows)),
                                                           t.constant(K.middleRows(b * T, k)),
                                                           t.constant(V.middleRows(b * T, k)),
                                                           engine::Mask::bidirectional),
                                  0.5)
                        .value());
      };
      const MatD mine = out.middleRows(b * q_rows, q_rows);
      EXPECT_LT(rel(reference(keys), mine), 1e-14);
      EXPECT_GT(rel(reference(T), mine), 1e-2);  // control: the query token as a key/value source
    }
  }
}

TEST(IclBatchedAttention, GradientsByGradcheck) {
  Rng rng(2, "gradcheck");
  const Eigen::Index T = 4;
  const std::vector<MatD> inputs{rng.gaussian(2 * T, 3), rng.gaussian(2 * T, 3), rng.gaussian(2 * T, 2)};
  for (Queries queries : {Queries::all_queries, Queries::last_query}) {
    const double err = engine::gradcheck_rel_err(
        [&](Tape<double>&, const std::vector<Var<double>>& x) {
          return batched_linear_attention(x[0], x[1], x[2], T, T - 1, queries, 0.7);
        },
        inputs);
    EXPECT_LT(err, 1e-7);
  }
  // The query rows of every prompt, gathered (last_token_rows), after the attention.
  EXPECT_LT(engine::gradcheck_rel_err(
                [&](Tape<double>&, const std::vector<Var<double>>& x) {
                  return last_token_rows(batched_linear_attention(x[0], x[1], x[2], T, T - 1, Queries::all_queries), T);
                },
                inputs),
            1e-7);
  // Control: the same forward with the key gradient left out (K enters as a constant).
  const double control = engine::gradcheck_rel_err(
      [&](Tape<double>& tape, const std::vector<Var<double>>& x) {
        return batched_linear_attention(x[0], tape.constant(x[1].value()), x[2], T, T - 1, Queries::all_queries);
      },
      inputs);
  EXPECT_GT(control, 1e-2);
}

// ---------------------------------------------------------------- models: gradients

// Central differences of the loss in every parameter entry against the tape.
double parameter_gradcheck(ParameterSet& params, const std::function<Var<double>(Tape<double>&)>& loss) {
  auto list = params.list();
  engine::zero_grad(list);
  {
    Tape<double> tape;
    tape.backward(loss(tape));
  }
  double num = 0, den = 0;
  const double h = 1e-5;
  for (auto* p : list)
    for (Eigen::Index i = 0; i < p->value.size(); ++i) {
      const double keep = p->value(i);
      p->value(i) = keep + h;
      Tape<double> t1;
      const double up = loss(t1).value()(0, 0);
      p->value(i) = keep - h;
      Tape<double> t2;
      const double down = loss(t2).value()(0, 0);
      p->value(i) = keep;
      const double fd = (up - down) / (2 * h);
      num += (fd - p->grad(i)) * (fd - p->grad(i)), den += fd * fd;
    }
  return std::sqrt(num / den);
}

TEST(IclModels, TwoLayerGradientsMatchFiniteDifferences) {
  const Task task{3, 3, 0.5, {}};
  const TokenBatch batch = make_token_batch(prompts(task, 3, 1)), other = make_token_batch(prompts(task, 3, 2));
  for (FirstLayer first : {FirstLayer::copying_fixed, FirstLayer::copying_learned, FirstLayer::attention})
    for (Variant v : {Variant::mha, Variant::skipv1, Variant::resformer, Variant::svformer}) {
      Rng rng(3, variant_name(v) + first_layer_name(first));
      TwoLayerModel m = make_two_layer_model({v, first, 3, 3, 2}, rng);
      const double err = parameter_gradcheck(
          m.params, [&](Tape<double>& t) { return squared_error_loss(m.predict(t, batch), batch.target); });
      EXPECT_LT(err, 1e-6) << variant_name(v) << " " << first_layer_name(first);
      // Control: the tape's gradient on one batch against differences on another.
      auto list = m.params.list();
      engine::zero_grad(list);
      {
        Tape<double> t;
        t.backward(squared_error_loss(m.predict(t, batch), batch.target));
      }
      MatD g0 = list.front()->grad;
      engine::zero_grad(list);
      {
        Tape<double> t;
        t.backward(squared_error_loss(m.predict(t, other), other.target));
      }
      EXPECT_GT(rel(g0, list.front()->grad), 1e-2);
    }
}

TEST(IclModels, StackGradientsMatchFiniteDifferences) {
  const Task task{2, 4, 0.5, {}};
  const ConcatBatch batch = make_concat_batch(prompts(task, 3, 3));
  for (bool skip : {false, true}) {
    Rng rng(4, skip ? "skip" : "mha");
    LinearAttentionStack m = make_stack({2, 4, 2, 2, skip}, rng);
    const double err = parameter_gradcheck(
        m.params, [&](Tape<double>& t) { return squared_error_loss(m.predict(t, batch), batch.target); });
    EXPECT_LT(err, 1e-6);
  }
}

// ---------------------------------------------------------------- models: forward against models.hpp

LayerTwo<double> layer_two_of(const TwoLayerModel& m) {
  LayerTwo<double> w;
  for (int h = 1; h <= 2; ++h) {
    const std::string p = "l2.h" + std::to_string(h) + ".";
    auto& head = w.heads[std::size_t(h - 1)];
    head.W_Q = to_column_weight(m.params.at(p + "WQ").value);
    head.W_K = to_column_weight(m.params.at(p + "WK").value);
    const bool from_E = m.config.variant == Variant::skipv1 && h == 2;
    head.W_V = to_column_weight(m.params.at(p + (from_E ? "WV_E" : "WV_F")).value);
  }
  w.H = to_column_weight(m.params.at("H").value);
  return w;
}

TEST(IclModels, ForwardEqualsColumnConventionModels) {
  const int d = 3, n = 4;
  const Task task{d, n, 0.5, {}};
  const auto ps = prompts(task, 4, 5);
  const TokenBatch batch = make_token_batch(ps);
  for (FirstLayer first : {FirstLayer::copying_fixed, FirstLayer::copying_learned, FirstLayer::attention})
    for (int a : {1, 2, 3})  // a = 0: the query token is 0 and every prediction is 0
      for (Variant v : {Variant::mha, Variant::skipv1}) {
        Rng rng(6, variant_name(v) + std::to_string(a) + first_layer_name(first));
        TwoLayerModel m = make_two_layer_model({v, first, d, n, a}, rng);
        if (first == FirstLayer::copying_learned)  // move A, B away from the coordinate start
          for (const char* name : {"A", "B"}) m.params.at(name).value += rng.gaussian(d, m.params.at(name).value.cols(), 0.3);
        Tape<double> tape;
        const MatD mine = m.predict(tape, batch).value();
        const LayerTwo<double> w = layer_two_of(m);
        std::array<HeadWeights<double>, 2> first_heads;
        if (first == FirstLayer::attention)
          for (int h = 0; h < 2; ++h) {
            const std::string p = "l1.h" + std::to_string(h + 1) + ".";
            first_heads[std::size_t(h)] = {to_column_weight(m.params.at(p + "WQ").value),
                                           to_column_weight(m.params.at(p + "WK").value),
                                           to_column_weight(m.params.at(p + "WV").value)};
          }
        const auto column_model = [&](Architecture arch) {
          MatD out(Eigen::Index(ps.size()), d);
          for (std::size_t b = 0; b < ps.size(); ++b) {
            const MatD E = prompt_tokens(ps[b]);
            const MatD F = first == FirstLayer::attention ? tf_layer<double>(E, first_heads)
                                                          : copying_layer<double>(E, m.A(), m.B());
            out.row(Eigen::Index(b)) = (w.H * layer_two_output<double>(E, F, w, arch).col(E.cols() - 1)).transpose();
          }
          return out;
        };
        const Architecture same = v == Variant::mha ? Architecture::mha : Architecture::skipv1;
        const Architecture other = v == Variant::mha ? Architecture::skipv1 : Architecture::mha;
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

// ---------------------------------------------------------------- structure

std::vector<Prompt> with_query(std::vector<Prompt> ps, const std::function<VecD(const Prompt&)>& x) {
  for (auto& p : ps) p.x_query = x(p);
  return ps;
}

// Every model is linear in x_{n+1} (held_out_loss relies on it).
TEST(IclModels, PredictionsAreLinearInTheQuery) {
  const Task task{3, 4, 0.5, {}};
  const auto ps = prompts(task, 3, 8);
  Rng rng(9, "queries");
  const MatD u = rng.gaussian(3, 3), w = rng.gaussian(3, 3);
  for (FirstLayer first : {FirstLayer::copying_fixed, FirstLayer::attention})
    for (Variant v : {Variant::mha, Variant::skipv1, Variant::resformer, Variant::svformer}) {
      TwoLayerModel m = make_two_layer_model({v, first, 3, 4, 2}, rng);
      const auto predict = [&](const std::vector<Prompt>& p) {
        Tape<double> t;
        return MatD(m.predict(t, make_token_batch(p)).value());
      };
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
  LinearAttentionStack s = make_stack({3, 4, 3, 2, true}, rng);
  const auto predict = [&](const std::vector<Prompt>& p) {
    Tape<double> t;
    return MatD(s.predict(t, make_concat_batch(p)).value());
  };
  const MatD a = predict(with_query(ps, [&](const Prompt&) { return VecD(u.col(0)); }));
  const MatD b = predict(with_query(ps, [&](const Prompt&) { return VecD(w.col(0)); }));
  const MatD ab = predict(with_query(ps, [&](const Prompt&) { return VecD(u.col(0) + 2 * w.col(0)); }));
  EXPECT_LT(rel(ab, a + 2 * b), 1e-12);
}

// Without Assumption 1 (a learned TF_1, no residual, P = diag(I_2n, 0)) every
// layer-2 Gram pairs a token with itself, so ŷ is even in Y: at W_0 = 0 no model
// can beat the zero predictor. With the copying layer SkipV1 is not even (control).
TEST(IclModels, LearnedFirstLayerGivesPredictionsEvenInY) {
  const Task task{3, 4, 0.5, {}};
  const auto ps = prompts(task, 4, 10);
  auto flipped = ps;
  for (auto& p : flipped) p.Y = -p.Y;
  Rng rng(11, "parity");
  for (Variant v : {Variant::mha, Variant::skipv1, Variant::resformer, Variant::svformer}) {
    TwoLayerModel m = make_two_layer_model({v, FirstLayer::attention, 3, 4, 3}, rng);
    Tape<double> t1, t2;
    EXPECT_LT(rel(m.predict(t1, make_token_batch(ps)).value(), m.predict(t2, make_token_batch(flipped)).value()), 1e-12);
  }
  TwoLayerModel m = make_two_layer_model({Variant::skipv1, FirstLayer::copying_fixed, 3, 4, 3}, rng);
  Tape<double> t1, t2;
  EXPECT_GT(rel(m.predict(t1, make_token_batch(ps)).value(), m.predict(t2, make_token_batch(flipped)).value()), 1e-2);
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
  c.a = 2, c.models = {Variant::mha, Variant::skipv1};
  c.train.steps = 300, c.train.batch = 32, c.train.lr = 1e-2, c.train.log_every = 50;
  c.restarts = 1, c.eval_samples = 2000, c.theory_prompts = 5000, c.seed = 5, c.threads = 2;
  const TrainExperimentResult r = run_train_experiment(c);
  const double zero_predictor = c.task.d * c.task.d + c.task.d * 0.25;
  // SkipV1 learns; MHA at a = d sees no y (F holds only x's), so it stays at the zero predictor's loss.
  EXPECT_LT(r.models[1].best_loss, 0.6 * zero_predictor);
  EXPECT_GT(r.models[0].best_loss, 0.9 * zero_predictor);
  ASSERT_TRUE(r.models[0].reference && r.models[1].reference);
  EXPECT_EQ(decoder_accounting(Variant::mha, FirstLayer::attention, 4).kv_cache_per_token, 32);
  EXPECT_EQ(decoder_accounting(Variant::skipv1, FirstLayer::attention, 4).kv_cache_per_token, 28);  // −1/8
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
                                 "icl anchor --csv /nonexistent_dir/x.csv", "icl train --device cuda --out " + h5.string()}) {
    const CliRun r = run(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(h5)) << args;
  }
  EXPECT_EQ(run("icl anchor --steps 5 --restarts 1 --eval-samples 10 --quiet").status, 0);  // control
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

}  // namespace
