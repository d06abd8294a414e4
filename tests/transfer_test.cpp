// qwe.exp8.4 (synthetic/transfer.hpp, cli/transfer_command.cpp): the streaming ridge
// baseline, the target and model against a plain column-vector evaluation, training,
// reproducibility across thread counts, resuming from a checkpoint, and the CLI contract.
// Each check has a negative control that must fail by a wide margin.
#include "core/errors.hpp"
#include "core/rng.hpp"
#include "engine/blas.hpp"
#include "gpu/device.hpp"
#include "synthetic/transfer.hpp"
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
#include <vector>

namespace {

using namespace qkvlab;
using namespace qkvlab::transfer;
namespace fs = std::filesystem;

constexpr double kU64 = 0x1p-53;

double rel(const MatD& a, const MatD& b) { return (a - b).norm() / b.norm(); }

// Ridge on an exact linear target Y = X A recovers A to rounding (λ = 0); λ = 1e-2 must not.
TEST(TransferRidge, RecoversExactLinearMap) {
  const int d = 8;
  Rng rng(11, "test/A");
  const MatD A = rng.gaussian(d, d);
  const ChunkTarget linear = [&](const MatF& X, std::int64_t) { return MatD(X.cast<double>() * A); };
  RidgeConfig config{.samples = 20'000, .chunk_rows = 3000, .lambda = 0.0};
  const double exact = rel(fit_ridge(d, linear, config, 1, "test/ridge", 2), A);
  EXPECT_LT(exact, 1e3 * kU64) << exact;
  config.lambda = 1e-2;
  const double biased = rel(fit_ridge(d, linear, config, 1, "test/ridge", 2), A);
  EXPECT_GT(biased, 1e-3) << biased;
}

// With noise Y = X A + σ E, Ŵ − A has entries of variance σ²/n (G/n ≈ I), so
// z = ‖Ŵ − A‖_F² n / (d² σ²) is 1 within its spread sqrt(2/d²) ≈ 0.09 (d = 16).
// Control: a target whose noise is correlated with x (Y = X (A + 0.02) + σ E) is off by many SEs.
TEST(TransferRidge, NoisyLinearTargetWithinStandardError) {
  const int d = 16;
  const double sigma = 0.5;
  Rng rng(12, "test/A");
  const MatD A = rng.gaussian(d, d);
  const RidgeConfig config{.samples = 40'000, .chunk_rows = 4096, .lambda = 0.0};
  auto noisy = [&](const MatD& shift) {
    return ChunkTarget([&, shift](const MatF& X, std::int64_t chunk) {
      Rng noise(12, "test/noise/chunk=" + std::to_string(chunk));
      return MatD(X.cast<double>() * (A + shift) + noise.gaussian(X.rows(), d, sigma));
    });
  };
  const double scale = double(d) * d * sigma * sigma / double(config.samples);
  const MatD W = fit_ridge(d, noisy(MatD::Zero(d, d)), config, 2, "test/ridge", 2);
  const double z = (W - A).squaredNorm() / scale;
  EXPECT_GT(z, 0.6) << z;
  EXPECT_LT(z, 1.4) << z;
  const MatD W_off = fit_ridge(d, noisy(MatD::Constant(d, d, 0.02)), config, 2, "test/ridge", 2);
  const double z_off = (W_off - A).squaredNorm() / scale;
  EXPECT_GT(z_off, 10.0) << z_off;
}

// The ridge fit on the transfer target converges to R + ½ U V (Stein's lemma); the map R
// alone (leaving out the GELU's linear part) is far from it.
TEST(TransferRidge, ConvergesToPopulationLinearMap) {
  const int d = 8;
  const Target t = draw_target(d, 3);
  const MatD W = fit_ridge(
      d, [&](const MatF& X, std::int64_t) { return MatD(evaluate_target(t, X).cast<double>()); },
      {.samples = 200'000, .chunk_rows = 8192, .lambda = 1e-6}, 3, "test/ridge", 2);
  const MatD population = population_linear_map(t);
  EXPECT_LT(rel(W, population), 0.02) << rel(W, population);
  EXPECT_GT(rel(t.R.cast<double>(), population), 0.2);
}

// f*(x) = R x + V GELU(U x) and f(x) = x + W̃2 GELU(W̃1 x) column by column in double with
// std::erf, against the row-form batch evaluation in float. Controls: R not transposed; no skip.
TEST(TransferModel, TargetAndMlpMatchColumnVectorDefinition) {
  const int d = 6;
  const Target t = draw_target(d, 4);
  const Mlp m = init_mlp(d, 4);
  EXPECT_EQ(t.r(), 4 * d);
  const MatF X = draw_inputs(d, 50, 4, "test/x", 1);
  auto gelu = [](double z) { return 0.5 * z * (1 + std::erf(z / std::sqrt(2.0))); };
  // The paper's matrices: R_paper = t.Rᵀ (d×d), U_paper = t.Uᵀ (r×d), V_paper = t.Vᵀ (d×r).
  auto column_form = [&](const MatD& R_paper, const MatD& U_paper, const MatD& V_paper, bool skip) {
    MatD Y(X.rows(), d);
    for (Eigen::Index i = 0; i < X.rows(); ++i) {
      const VecD x = X.row(i).transpose().cast<double>();
      const VecD y = (skip ? x : VecD(R_paper * x)) + V_paper * (U_paper * x).unaryExpr(gelu);
      Y.row(i) = y.transpose();
    }
    return Y;
  };
  const MatD Rp = t.R.cast<double>().transpose(), Up = t.U.cast<double>().transpose(),
             Vp = t.V.cast<double>().transpose();
  const MatD target = evaluate_target(t, X).cast<double>();
  EXPECT_LT(rel(target, column_form(Rp, Up, Vp, false)), 1e-5);
  EXPECT_GT(rel(target, column_form(Rp.transpose(), Up, Vp, false)), 0.1);
  const MatD mlp = evaluate_mlp(m, X).cast<double>();
  EXPECT_LT(rel(mlp, column_form(Rp, m.W1.cast<double>().transpose(), m.W2.cast<double>().transpose(), true)), 1e-5);
  // Control: the same MLP without its skip connection.
  EXPECT_GT(rel(mlp, column_form(MatD::Zero(d, d), m.W1.cast<double>().transpose(),
                                 m.W2.cast<double>().transpose(), false)),
            0.1);
}

TransferConfig small_config(std::uint64_t seed, int threads) {
  TransferConfig c;
  c.seed = seed;
  c.threads = threads;
  c.train.steps = 60;
  c.train.batch = 512;
  c.ridge.samples = 20'000;
  c.eval_samples = 4096;
  return c;
}

TEST(TransferTraining, ShortRunReducesLoss) {
  TransferConfig c = small_config(5, 2);
  c.train.steps = 300;
  const TransferResult r = run_transfer(8, c, {});
  ASSERT_EQ(r.loss.size(), 300u);
  EXPECT_LT(r.final_loss, 0.5 * r.loss.front()) << r.loss.front() << " -> " << r.final_loss;
  // The trained MLP beats the untrained one on held-out data.
  const Target t = draw_target(8, 5);
  const Mlp init = init_mlp(8, 5);
  const Metrics untrained = evaluate(
      t, [&](const MatF& X) { return MatD(evaluate_mlp(init, X).cast<double>()); }, c.eval_samples, c.seed, 2);
  EXPECT_LT(r.mlp.rel_l2, 0.7 * untrained.rel_l2) << r.mlp.rel_l2 << " vs " << untrained.rel_l2;
}

// Same seed: bit-identical losses and metrics on 1 and 2 threads (sampling and OpenBLAS).
// Control: another seed gives other numbers.
TEST(TransferTraining, SameSeedBitIdenticalAcrossThreads) {
  engine::set_blas_threads(1);
  const TransferResult one = run_transfer(16, small_config(6, 1), {});
  engine::set_blas_threads(2);
  const TransferResult two = run_transfer(16, small_config(6, 2), {});
  EXPECT_EQ(one.loss, two.loss);
  EXPECT_EQ(one.mlp.rel_l2, two.mlp.rel_l2);
  EXPECT_EQ(one.mlp.mean_cosine, two.mlp.mean_cosine);
  EXPECT_EQ(one.linear.rel_l2, two.linear.rel_l2);
  const TransferResult other = run_transfer(16, small_config(7, 2), {});
  EXPECT_NE(one.loss, other.loss);
  EXPECT_NE(one.mlp.rel_l2, other.mlp.rel_l2);
}

// A run interrupted after step 45 (checkpoints every 20 steps) resumes at step 40 and ends
// bit-identical to an uninterrupted run. Control: a checkpoint of another seed is refused.
TEST(TransferTraining, ResumesBitIdenticalFromCheckpoint) {
  const qkvlab::test_support::ScratchDir scratch;
  const fs::path& dir = scratch.path();
  const TransferResult straight = run_transfer(8, small_config(8, 2), {});
  TransferConfig c = small_config(8, 2);
  c.train.checkpoint_dir = dir;
  c.train.checkpoint_every = 20;
  EXPECT_THROW(run_transfer(8, c,
                            [](std::int64_t step, double) {
                              if (step == 45) throw std::runtime_error("interrupted");
                            }),
               std::runtime_error);
  const TransferResult resumed = run_transfer(8, c, {});
  EXPECT_EQ(resumed.resumed_from, 40);
  EXPECT_EQ(resumed.loss, straight.loss);
  EXPECT_EQ(resumed.mlp.rel_l2, straight.mlp.rel_l2);
  TransferConfig other = c;
  other.seed = 9;
  fs::rename(dir / "transfer_d8.safetensors", dir / "keep");
  fs::copy_file(dir / "keep", dir / "transfer_d8.safetensors");
  EXPECT_THROW(run_transfer(8, other, {}), UsageError);
}

using RunResult = qkvlab::test_support::CommandResult;
RunResult run(const std::string& args) { return qkvlab::test_support::run_qkvlab("transfer " + args); }

TEST(TransferCli, BadInputExitsTwoWithOneLine) {
  std::vector<std::string> bad{"--d 0",  "--d 8,-3",    "--steps 0",    "--batch 0",
                               "--device tpu", "--lr -1", "--format xml", "--checkpoint /nonexistent/dir"};
  // --device cuda is a usage error only where no CUDA device can be used.
  if (!qkvlab::gpu::device_status().available) bad.push_back("--device cuda");
  for (const std::string& args : bad) {
    const RunResult r = run(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << args;
  }
  const RunResult ok = run("--d 2 --steps 3 --batch 16 --format json");
  EXPECT_NE(ok.status, 2) << ok.err;
}

TEST(TransferCli, JsonFieldsPresent) {
  const RunResult r = run("--d 4,8 --steps 300 --batch 256 --seed 3 --threads 2 --format json");
  ASSERT_TRUE(r.status == 0 || r.status == 1) << r.err;
  for (const char* field : {"\"experiment\": \"qwe.exp8.4\"", "\"seed\": 3", "\"device\": \"cpu\"", "\"steps\": 300",
                            "\"batch\": 256", "\"mlp_beats_linear\": ", "\"results\": [", "\"d\": 4", "\"d\": 8",
                            "\"mlp_rel_l2\": ", "\"mlp_cosine\": ", "\"linear_rel_l2\": ", "\"linear_cosine\": ",
                            "\"population_linear_rel_l2\": ", "\"command_line\": "})
    EXPECT_NE(r.out.find(field), std::string::npos) << field << " missing in " << r.out;
  EXPECT_EQ(r.out.find("nan"), std::string::npos);
  EXPECT_EQ(r.status == 0, r.out.find("\"mlp_beats_linear\": true") != std::string::npos);
}

}  // namespace
