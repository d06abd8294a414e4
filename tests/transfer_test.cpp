// qwe.exp8.4 (synthetic/transfer.hpp, cli/transfer_command.cpp): the streaming ridge
// baseline, the target and model (SkipMlp on the CPU backend) against a plain column-vector
// evaluation, training, reproducibility across thread counts, resuming from a checkpoint, the
// CLI contract, and the same model on the CUDA backend against the CPU backend (TransferCuda.*:
// skipped without a device, naming CUDA's reason; run on the CPU by scripts/cuda_emulation).
// Each check has a negative control that must fail by a wide margin.
#include "core/errors.hpp"
#include "core/rng.hpp"
#include "engine/blas.hpp"
#include "engine/cpu_backend.hpp"
#include "gpu/backend.hpp"
#include "gpu/device.hpp"
#include "synthetic/transfer.hpp"
#include "synthetic/transfer_report.hpp"
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
#include <vector>

namespace {

using namespace qkvlab;
using namespace qkvlab::transfer;
namespace fs = std::filesystem;

constexpr double kU64 = 0x1p-53;

double rel(const MatD& a, const MatD& b) { return (a - b).norm() / b.norm(); }

// f* of `t` on the CPU backend, as a ridge target.
ChunkTarget cpu_target(const Target& t) {
  auto be = std::make_shared<engine::CpuBackend<float>>(2);
  auto model = std::make_shared<SkipMlp>(*be, t, init_mlp(t.d(), 0), TrainConfig{});
  return [be, model](const MatF& X, std::int64_t) { return MatD(model->target(X).cast<double>()); };
}

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
  const MatD W = fit_ridge(d, cpu_target(t), {.samples = 200'000, .chunk_rows = 8192, .lambda = 1e-6}, 3,
                           "test/ridge", 2);
  const MatD population = population_linear_map(t);
  EXPECT_LT(rel(W, population), 0.02) << rel(W, population);
  EXPECT_GT(rel(t.R.cast<double>(), population), 0.2);
}

// f*(x) = R x + V GELU(U x) and f(x) = x + W̃2 GELU(W̃1 x) column by column in double with
// std::erf, against SkipMlp's row-form batch evaluation in float on the CPU backend (50 rows in
// pieces of a 16-row batch). Controls: R not transposed; no skip.
TEST(TransferModel, TargetAndMlpMatchColumnVectorDefinition) {
  const int d = 6;
  const Target t = draw_target(d, 4);
  const Mlp m = init_mlp(d, 4);
  engine::CpuBackend<float> be(2);
  TrainConfig config;
  config.batch = 16;
  SkipMlp model(be, t, m, config);
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
  const MatD target = model.target(X).cast<double>();
  EXPECT_LT(rel(target, column_form(Rp, Up, Vp, false)), 1e-5);
  EXPECT_GT(rel(target, column_form(Rp.transpose(), Up, Vp, false)), 0.1);
  const MatD mlp = model.predict(X).cast<double>();
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
  engine::CpuBackend<float> be(2);
  SkipMlp untrained_model(be, draw_target(8, 5), init_mlp(8, 5), c.train);
  const Metrics untrained = evaluate(
      8, [&](const MatF& X) { return MatD(untrained_model.target(X).cast<double>()); },
      [&](const MatF& X) { return MatD(untrained_model.predict(X).cast<double>()); }, c.eval_samples, c.seed, 2);
  EXPECT_LT(r.mlp.rel_l2, 0.7 * untrained.rel_l2) << r.mlp.rel_l2 << " vs " << untrained.rel_l2;
}

// Same seed: bit-identical losses and metrics on 1 and 2 threads (sampling, the CPU backend, OpenBLAS).
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

// A sweep checks every d's checkpoint before it trains any: a checkpoint of d = 8 written with another
// lr refuses the sweep {4, 8} with d = 4 untrained (no transfer_d4 checkpoint written, no step
// observed). Control: the sweep {4} alone, which reads no mismatched file, trains and checkpoints.
TEST(TransferTraining, SweepChecksEveryCheckpointBeforeTraining) {
  const qkvlab::test_support::ScratchDir scratch;
  const fs::path& dir = scratch.path();
  TransferConfig other = small_config(5, 2);
  other.train.checkpoint_dir = dir;
  other.train.lr *= 2;
  run_transfer(8, other, {});
  ASSERT_TRUE(fs::exists(dir / "transfer_d8.safetensors"));
  TransferConfig c = small_config(5, 2);
  c.train.checkpoint_dir = dir;
  int observed = 0;
  const auto count = [&](int, std::int64_t, double) { ++observed; };
  try {
    run_transfer_sweep({4, 8}, c, count);
    ADD_FAILURE() << "a checkpoint of another lr was accepted";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("transfer_d8.safetensors was written with lr"), std::string::npos) << e.what();
  }
  EXPECT_EQ(observed, 0);
  EXPECT_FALSE(fs::exists(dir / "transfer_d4.safetensors")) << "d = 4 trained before the refusal";
  run_transfer_sweep({4}, c, count);
  EXPECT_GT(observed, 0);
  EXPECT_TRUE(fs::exists(dir / "transfer_d4.safetensors"));
}

// SkipMlp::restore is all-or-nothing: a file without AdamW's state, or with W1 of another shape,
// throws std::runtime_error and leaves the weights as they were (from the tape's
// EngineTraining.RestoreRejectsMissingOrMisshapenState). Control: the complete file restores.
TEST(TransferTraining, RestoreRejectsMissingOrMisshapenState) {
  engine::CpuBackend<float> be(1);
  TrainConfig t;
  t.batch = 16;
  SkipMlp source(be, draw_target(4, 1), init_mlp(4, 2), t), model(be, draw_target(4, 1), init_mlp(4, 3), t);
  engine::SafeTensors full;
  source.save(full);
  const Mlp before = model.weights();
  engine::SafeTensors no_state = full;
  no_state.tensors.erase("m/W1");
  EXPECT_THROW(model.restore(no_state), std::runtime_error);
  engine::SafeTensors misshapen = full;
  misshapen.tensors["W1"] = engine::to_tensor<float>(MatF::Zero(4, 3));
  EXPECT_THROW(model.restore(misshapen), std::runtime_error);
  EXPECT_EQ(model.weights().W1, before.W1);
  EXPECT_EQ(model.weights().W2, before.W2);
  model.restore(full);
  EXPECT_EQ(model.weights().W1, source.weights().W1);
}

// Checkpoints written before AdamW's state had one format (engine/adamw_state.hpp) named it
// "adamw.m/NAME", "adamw.v/NAME" and "adamw.steps": such a file (the format's names renamed back)
// still restores, bit for bit: the next step from it equals the next step of the model that wrote
// it. Controls: the old file without a moment is refused; a model that did not restore the moments
// (the same weights, fresh state) takes another step.
TEST(TransferTraining, RestoresTheFormatWrittenBefore) {
  engine::CpuBackend<float> be(1);
  TrainConfig t;
  t.batch = 16;
  SkipMlp source(be, draw_target(4, 1), init_mlp(4, 2), t), model(be, draw_target(4, 1), init_mlp(4, 3), t);
  const MatF X = MatF::NullaryExpr(16, 4, [](Eigen::Index i, Eigen::Index j) { return std::sin(float(3 * i + j)); });
  for (int k = 0; k < 3; ++k) source.step(X, 1e-2);
  engine::SafeTensors current;
  source.save(current);
  engine::SafeTensors old;
  for (const auto& [name, tensor] : current.tensors)
    old.tensors[name.rfind("m/", 0) == 0 || name.rfind("v/", 0) == 0 ? "adamw." + name : name] = tensor;
  old.metadata["adamw.steps"] = current.metadata.at("t");
  ASSERT_FALSE(old.metadata.count("t") || old.tensors.count("m/W1"));
  engine::SafeTensors incomplete = old;
  incomplete.tensors.erase("adamw.v/W2");
  EXPECT_THROW(model.restore(incomplete), std::runtime_error);
  SkipMlp fresh(be, draw_target(4, 1), source.weights(), t);
  model.restore(old);
  EXPECT_EQ(model.steps(), 3);
  EXPECT_EQ(model.weights().W1, source.weights().W1);
  for (SkipMlp* m : {&source, &model, &fresh}) m->step(X, 1e-2);
  EXPECT_EQ(model.weights().W1, source.weights().W1);
  EXPECT_EQ(model.weights().W2, source.weights().W2);
  EXPECT_GT((fresh.weights().W1 - source.weights().W1).norm(), 1e-6);
}

// ---- The same model on the CUDA backend (skipped without a device) --------------------------
//
// Error model. Both backends run SkipMlp's one definition in float; they differ only in the order
// of their sums (cuBLAS against OpenBLAS tiles, block trees against row loops) and in expf/erff
// against the CPU's (a few ulp). A value reached through reductions of total length k then carries
// on each side a rounding error of about u·sqrt(k) relative (u = 2⁻²⁴, zero-mean data: Higham &
// Mary 2019), so the two agree to
//     rel = ‖cpu − cuda‖ / ‖cpu‖ ≤ 16 · u · sqrt(k),
// as tests/gpu_agreement_test.cpp allowed the trainer this replaces. One step's loss chains
// k_step = batch·d (the sums over the batch) + 2·batch (dW) + d (dH) + r (H W2); over s steps the
// errors of the weights add, k = s·k_step. Controls: a perturbed input, another learning rate, a
// checkpoint of the other device: each must fail the same check.
class TransferCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!qkvlab::gpu::device_status().available) GTEST_SKIP() << qkvlab::gpu::device_status().description;
  }
  static double tolerance(double k) { return 16 * 0x1p-24 * std::sqrt(k); }
};

double rel_vec(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += a[i] * a[i];
  return std::sqrt(num / den);
}

// Three steps of SkipMlp on both backends from the same weights (d = 8, r = 32, batch 64,
// weight decay and clipping active), then predict and target on 150 rows (two full batches and
// a partial one). The moved GpuSkipMlp.TrainerAgreesWithEngine.
TEST_F(TransferCuda, StepsAgreeWithCpu) {
  const int d = 8, steps = 3;
  TrainConfig config;
  config.batch = 64, config.weight_decay = 0.01, config.clip_norm = 0.5;
  const Target t = draw_target(d, 31);
  engine::CpuBackend<float> cpu_be(2);
  const auto cuda_be = qkvlab::gpu::make_cuda_backend();
  SkipMlp cpu(cpu_be, t, init_mlp(d, 31), config), cuda(*cuda_be, t, init_mlp(d, 31), config),
      other_lr(*cuda_be, t, init_mlp(d, 31), config);
  const double k_step = config.batch * d + 2 * config.batch + d + 4 * d;
  for (int s = 0; s < steps; ++s) {
    const MatF X = draw_inputs(d, config.batch, 31, "test/steps/" + std::to_string(s), 1);
    MatF X_off = X;
    X_off(5, 3) += 1.0f;
    SkipMlp probe(*cuda_be, t, cpu.weights(), config);  // control: the same weights, one input moved
    const double lc = cpu.step(X, 0.02), lg = cuda.step(X, 0.02), lp = probe.step(X_off, 0.02);
    other_lr.step(X, 0.03);
    EXPECT_LE(std::abs(lg - lc) / lc, tolerance((s + 1) * k_step)) << "step " << s;
    EXPECT_GT(std::abs(lp - lc) / lc, tolerance((s + 1) * k_step)) << "control, step " << s;
  }
  const auto W = [](const Mlp& m) { return MatD(m.W1.cast<double>()); };
  EXPECT_LE(rel(W(cuda.weights()), W(cpu.weights())), tolerance(steps * k_step));
  EXPECT_LE(rel(MatD(cuda.weights().W2.cast<double>()), MatD(cpu.weights().W2.cast<double>())),
            tolerance(steps * k_step));
  EXPECT_GT(rel(W(other_lr.weights()), W(cpu.weights())), tolerance(steps * k_step)) << "control: lr 0.03";
  const MatF X = draw_inputs(d, 150, 31, "test/eval", 1);
  const double k_eval = 2 * d + 4 * d;  // X W1 (d), H W2 (r = 4d), X R + H* V (d + r)
  EXPECT_LE(rel(cuda.predict(X).cast<double>(), cpu.predict(X).cast<double>()), tolerance(k_eval));
  EXPECT_LE(rel(cuda.target(X).cast<double>(), cpu.target(X).cast<double>()), tolerance(k_eval));
  EXPECT_GT(rel(cuda.predict(X).cast<double>(), cpu.target(X).cast<double>()), tolerance(k_eval)) << "control";
}

TransferConfig tiny_config(engine::Device device, std::uint64_t seed = 21) {
  TransferConfig c;
  c.seed = seed;
  c.threads = 2;
  c.train.steps = 12;
  c.train.batch = 64;
  c.train.device = device;
  c.ridge.samples = 2048;
  c.ridge.chunk_rows = 1024;
  c.eval_samples = 512;
  return c;
}

// The whole experiment on both devices: the loss curve and the held-out errors agree (12 steps:
// k = 12·k_step). Control: another seed on the CUDA backend.
TEST_F(TransferCuda, RunAgreesWithCpu) {
  const int d = 4;
  const TransferResult cpu = run_transfer(d, tiny_config(engine::Device::cpu), {});
  const TransferResult cuda = run_transfer(d, tiny_config(engine::Device::cuda), {});
  const double k = 12.0 * (64 * d + 2 * 64 + d + 4 * d);
  EXPECT_LE(rel_vec(cpu.loss, cuda.loss), tolerance(k));
  EXPECT_LE(std::abs(cuda.mlp.rel_l2 - cpu.mlp.rel_l2) / cpu.mlp.rel_l2, tolerance(k));
  EXPECT_LE(std::abs(cuda.linear.rel_l2 - cpu.linear.rel_l2) / cpu.linear.rel_l2, tolerance(k));
  const TransferResult other = run_transfer(d, tiny_config(engine::Device::cuda, 22), {});
  EXPECT_GT(rel_vec(cpu.loss, other.loss), tolerance(k)) << "control: seed 22";
}

// Checkpointing on the CUDA backend: interrupted after step 8 (checkpoints every 5 steps), the run
// resumes at step 5 and ends bit-identical to an uninterrupted CUDA run. Control: the checkpoint
// is refused by a CPU run (it records the device).
TEST_F(TransferCuda, ResumesBitIdenticalFromCheckpoint) {
  const qkvlab::test_support::ScratchDir scratch;
  const fs::path& dir = scratch.path();
  const TransferResult straight = run_transfer(4, tiny_config(engine::Device::cuda), {});
  TransferConfig c = tiny_config(engine::Device::cuda);
  c.train.checkpoint_dir = dir;
  c.train.checkpoint_every = 5;
  EXPECT_THROW(run_transfer(4, c,
                            [](std::int64_t step, double) {
                              if (step == 8) throw std::runtime_error("interrupted");
                            }),
               std::runtime_error);
  fs::copy_file(dir / "transfer_d4.safetensors", dir / "at_step_5");
  const TransferResult resumed = run_transfer(4, c, {});
  EXPECT_EQ(resumed.resumed_from, 5);
  EXPECT_EQ(resumed.loss, straight.loss);
  EXPECT_EQ(resumed.mlp.rel_l2, straight.mlp.rel_l2);
  fs::remove(dir / "transfer_d4.safetensors");
  fs::copy_file(dir / "at_step_5", dir / "transfer_d4.safetensors");
  TransferConfig on_cpu = c;
  on_cpu.train.device = engine::Device::cpu;
  EXPECT_THROW(run_transfer(4, on_cpu, {}), UsageError);
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

// Every file the run writes (--figure's STEM.svg, STEM.png and STEM.csv too) is checked before the
// work: a run that would train for minutes is refused at once (under a 60 s bound), nothing written.
// A file given as --checkpoint is called one. Control: the same outputs given distinct names are
// accepted and written (a 3-step run).
TEST(TransferCli, FigureFilesAreCheckedBeforeTheRun) {
  const qkvlab::test_support::ScratchDir scratch;
  const fs::path o = scratch.path();
  fs::create_directory(o / "d.svg");
  fs::create_symlink(o / "nothing", o / "l.png");
  const std::string q = qkvlab::test_support::shell_quoted(o);
  const std::string slow = "transfer --d 8 --steps 1000000 --batch 512 --threads 1 --quiet ";
  const std::pair<std::string, std::string> cases[] = {
      {"--out " + q + "/r.svg --figure " + q + "/r", "is also --out's file"},
      {"--csv " + q + "/r.svg --figure " + q + "/r", "is also --csv's file"},
      {"--figure " + q + "/d", "d.svg"},
      {"--figure " + q + "/l", "l.png"},
      {"--figure " + q + "/", "--figure: "},
      {"--figure " + q + "/none/fig", "none does not exist"},
      {"--out " + q + "/none/r.h5", "--out: directory"},
  };
  for (const auto& [args, names] : cases) {
    const RunResult r = qkvlab::test_support::run_bounded(slow + args, 60);
    qkvlab::test_support::expect_usage_error(r, args, names);
  }
  std::ofstream(o / "file") << "x";
  qkvlab::test_support::expect_usage_error(run("--checkpoint " + q + "/file"), "--checkpoint FILE",
                                           "--checkpoint: " + (o / "file").string() + " is not a directory");
  for (const char* left : {"r.svg", "r.png", "r.csv", "r.h5"}) EXPECT_FALSE(fs::exists(o / left)) << left;
  const RunResult ok = run("--d 2 --steps 3 --batch 16 --quiet --out " + q + "/r.h5 --figure " + q + "/r");
  EXPECT_TRUE(ok.status == 0 || ok.status == 1) << ok.err;
  EXPECT_TRUE(fs::exists(o / "r.h5") && fs::exists(o / "r.csv"));
}

// --figure's names, the rule of cli/plot_common.hpp: a stem's own dots stay (fig.v2 -> fig.v2.csv), a
// stem ending in .svg is taken without it (fig.svg -> fig.csv, fig.svg), and a stem naming a directory
// is refused. Control: the plain stem writes STEM.csv.
TEST(TransferCli, FigureStemNamesItsFiles) {
  const qkvlab::test_support::ScratchDir scratch;
  const fs::path o = scratch.path();
  const std::string q = qkvlab::test_support::shell_quoted(o), small = "--d 2 --steps 3 --batch 16 --quiet --figure ";
  for (const char* stem : {"fig.v2", "plain", "drawn.svg"}) {
    const RunResult r = run(small + q + "/" + stem);
    EXPECT_TRUE(r.status == 0 || r.status == 1) << stem << ": " << r.err;
  }
  EXPECT_TRUE(fs::exists(o / "fig.v2.csv"));
  EXPECT_FALSE(fs::exists(o / "fig.csv"));
  EXPECT_TRUE(fs::exists(o / "plain.csv"));
  EXPECT_TRUE(fs::exists(o / "drawn.csv"));
  EXPECT_FALSE(fs::exists(o / "drawn.svg.csv"));
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    EXPECT_TRUE(fs::exists(o / "fig.v2.svg") && fs::exists(o / "fig.v2.png"));
    EXPECT_TRUE(fs::exists(o / "drawn.svg") && fs::exists(o / "drawn.png"));
    EXPECT_FALSE(fs::exists(o / "drawn.svg.svg"));
  }
  fs::create_directory(o / "sub");
  for (const std::string& stem : {q + "/sub/", q + "/sub", q + "/."})
    qkvlab::test_support::expect_usage_error(run(small + stem), stem, "names a directory");
  EXPECT_TRUE(fs::is_empty(o / "sub"));
}

// A repeated or empty --d element is a usage error before any training. Control: distinct widths run.
TEST(TransferCli, RepeatedOrEmptyWidthsAreRefused) {
  const std::pair<const char*, const char*> cases[] = {
      {"--d 8,8", "--d: 8 is given twice"}, {"--d 4 --d 4", "--d: 4 is given twice"},
      {"--d 4,", "has an empty element"},   {"--d ,4", "has an empty element"},
      {"--d ''", "--d: the list is empty"}, {"--d 2,0", "--d: must be an integer from 1 to 4096"}};
  for (const auto& [args, names] : cases)
    qkvlab::test_support::expect_usage_error(qkvlab::test_support::run_bounded(std::string("transfer --steps 1000000 ") + args, 60),
                                             args, names);
  const RunResult ok = run("--d 2,3 --steps 3 --batch 16 --format json");
  EXPECT_TRUE(ok.status == 0 || ok.status == 1) << ok.err;
  EXPECT_NE(ok.out.find("\"d\": 3"), std::string::npos) << ok.out;
}

TEST(JsonDigits, CheckerFlagsASixDigitWriterAndNonNumbers) {
  using qkvlab::test_support::short_json_numbers;
  std::string six = "[", seventeen = "[";
  for (double x : {0.1, 1.0 / 3, 2.0 / 7, 0.123456789012345, 6.25}) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", x);  // the writer transfer used to have
    six += std::string(six.size() > 1 ? ", " : "") + buf;
    seventeen += (seventeen.size() > 1 ? ", " : "") + qkvlab::json_number(x);
  }
  six += "]", seventeen += "]";
  EXPECT_EQ(short_json_numbers(six), (std::vector<std::string>{"0.1", "0.333333", "0.285714"})) << six;
  EXPECT_TRUE(short_json_numbers(seventeen).empty()) << seventeen;
  EXPECT_TRUE(short_json_numbers("{\"n\": -3, \"s\": \"0.1 nan\", \"b\": true}").empty());
  EXPECT_EQ(short_json_numbers("{\"a\": nan, \"b\": -inf, \"c\": null}"), (std::vector<std::string>{"nan", "-inf"}));
}

TEST(TransferCli, JsonNumbersCarry17Digits) {
  const RunResult r = run("--d 2 --steps 3 --batch 16 --format json");
  ASSERT_TRUE(r.status == 0 || r.status == 1) << r.err;
  EXPECT_NE(r.out.find("\"mlp_rel_l2\": "), std::string::npos) << r.out;
  EXPECT_EQ(qkvlab::test_support::short_json_numbers(r.out), std::vector<std::string>{}) << r.out;
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

// transfer_report.hpp's check on the reported values: the first one that is not finite is
// named with its d; finite ones pass (the negative control).
TEST(TransferReport, NamesTheFirstValueThatIsNotFinite) {
  std::vector<qkvlab::transfer::TransferResult> runs(2);
  runs[0].d = 16, runs[1].d = 32;
  EXPECT_EQ(qkvlab::transfer::non_finite_value(runs), "");
  runs[1].linear.mean_cosine = std::nan("");
  runs[1].final_loss = INFINITY;
  EXPECT_EQ(qkvlab::transfer::non_finite_value(runs), "linear_cosine at d = 32");
}
