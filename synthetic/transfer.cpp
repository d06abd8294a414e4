// qwe.exp8.4: see transfer.hpp for the formulas and the convention (row vectors).
#include "synthetic/transfer.hpp"

#include "core/errors.hpp"
#include "core/parallel.hpp"
#include "core/rng.hpp"
#include "engine/blas.hpp"
#include "engine/checkpoint.hpp"
#include "engine/ops.hpp"
#include "engine/rng.hpp"
#include "engine/schedule.hpp"
#include "gpu/skip_mlp.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

namespace qkvlab::transfer {
namespace {

using engine::Op;
using engine::product;

std::string stream_name(int d, const std::string& purpose) {
  return "transfer/d=" + std::to_string(d) + "/" + purpose;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void require_finite(double value, const std::string& what) {
  if (!std::isfinite(value)) throw NumericalError(what + " is not finite");
}

}  // namespace

Target draw_target(int d, std::uint64_t seed) {
  if (d < 1) throw UsageError("transfer: d must be at least 1, got " + std::to_string(d));
  Rng rng(seed, stream_name(d, "target"));
  const int r = 4 * d;
  Target t;
  t.R = engine::normal_matrix<float>(d, d, 1 / std::sqrt(double(d)), rng);
  t.U = engine::normal_matrix<float>(d, r, 1 / std::sqrt(double(d)), rng);
  t.V = engine::normal_matrix<float>(r, d, 1 / std::sqrt(double(r)), rng);
  return t;
}

Mlp init_mlp(int d, std::uint64_t seed) {
  Rng rng(seed, stream_name(d, "init"));
  const int r = 4 * d;
  return {engine::normal_matrix<float>(d, r, 1 / std::sqrt(double(d)), rng),
          engine::normal_matrix<float>(r, d, 1 / std::sqrt(double(r)), rng)};
}

MatF gelu(const MatF& Z) { return Z.cwiseProduct(engine::normal_cdf(Z)); }

MatF evaluate_target(const Target& t, const MatF& X) {
  MatF Y = product(X, Op::none, t.R, Op::none);
  engine::add_product(Y, gelu(product(X, Op::none, t.U, Op::none)), Op::none, t.V, Op::none);
  return Y;
}

MatF evaluate_mlp(const Mlp& mlp, const MatF& X) {
  MatF Y = X;
  engine::add_product(Y, gelu(product(X, Op::none, mlp.W1, Op::none)), Op::none, mlp.W2, Op::none);
  return Y;
}

MatD population_linear_map(const Target& t) {
  return t.R.cast<double>() + 0.5 * t.U.cast<double>() * t.V.cast<double>();
}

MatF draw_inputs(int d, Eigen::Index rows, std::uint64_t seed, const std::string& stream, int threads) {
  MatF X(rows, d);
  const std::int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  parallel_for(chunks, threads, [&](std::int64_t c) {
    Rng rng(seed, stream + "/chunk=" + std::to_string(c));
    const Eigen::Index begin = c * kChunkRows, n = std::min<Eigen::Index>(kChunkRows, rows - begin);
    X.middleRows(begin, n) = engine::normal_matrix<float>(n, d, 1.0, rng);
  });
  return X;
}

MatD fit_ridge(int d, const ChunkTarget& target, const RidgeConfig& config, std::uint64_t seed,
               const std::string& stream, int threads) {
  if (config.samples < 1 || config.chunk_rows < 1 || !(config.lambda >= 0))
    throw std::invalid_argument("fit_ridge: need samples >= 1, chunk_rows >= 1, lambda >= 0");
  MatD G = MatD::Zero(d, d), B = MatD::Zero(d, d);
  const std::int64_t chunks = (config.samples + config.chunk_rows - 1) / config.chunk_rows;
  for (std::int64_t c = 0; c < chunks; ++c) {
    const Eigen::Index rows = std::min<std::int64_t>(config.chunk_rows, config.samples - c * config.chunk_rows);
    const MatF X = draw_inputs(d, rows, seed, stream + "/chunk=" + std::to_string(c), threads);
    const MatD Y = target(X, c);
    const MatD Xd = X.cast<double>();
    engine::add_product(G, Xd, Op::transpose, Xd, Op::none);
    engine::add_product(B, Xd, Op::transpose, Y, Op::none);
  }
  G.diagonal().array() += config.lambda * double(config.samples);
  const Eigen::LLT<MatD> llt(G);
  if (llt.info() != Eigen::Success) throw NumericalError("fit_ridge: X^T X + lambda n I is not positive definite");
  return llt.solve(B);
}

Metrics evaluate(const Target& target, const Predictor& predict, std::int64_t samples, std::uint64_t seed,
                 int threads) {
  const int d = target.d();
  constexpr Eigen::Index kEvalChunk = 8192;
  double squared_error = 0, squared_target = 0, cosine = 0;
  for (std::int64_t c = 0; c * kEvalChunk < samples; ++c) {
    const Eigen::Index rows = std::min<std::int64_t>(kEvalChunk, samples - c * kEvalChunk);
    const MatF X = draw_inputs(d, rows, seed, stream_name(d, "eval/chunk=" + std::to_string(c)), threads);
    const MatD Y = evaluate_target(target, X).cast<double>();
    const MatD P = predict(X);
    squared_error += (P - Y).squaredNorm();
    squared_target += Y.squaredNorm();
    const Eigen::ArrayXd dot = (P.cwiseProduct(Y)).rowwise().sum().array();
    cosine += (dot / (P.rowwise().norm().array() * Y.rowwise().norm().array())).sum();
  }
  Metrics m{std::sqrt(squared_error / squared_target), cosine / double(samples)};
  require_finite(m.rel_l2, "evaluation: relative L2 error");
  require_finite(m.mean_cosine, "evaluation: mean cosine similarity");
  return m;
}

CpuSkipMlpTrainer::CpuSkipMlpTrainer(const Mlp& init, const Target& target, const TrainConfig& config)
    : target_(target),
      W1_("W1", init.W1),
      W2_("W2", init.W2),
      adamw_({.weight_decay = config.weight_decay}),
      clip_norm_(config.clip_norm) {}

float CpuSkipMlpTrainer::step(const MatF& X, float lr) {
  MatF Y = evaluate_target(target_, X);
  const double target_energy = Y.cast<double>().squaredNorm();
  engine::Tape<float> tape;
  const engine::Var<float> x = tape.constant(X), y = tape.constant(std::move(Y));
  const engine::Var<float> f = x + engine::gelu(x * tape.parameter(W1_)) * tape.parameter(W2_);
  // mse_loss is Σ‖f − f*‖²/N over the N entries; scaled to Σ‖f − f*‖²/Σ‖f*‖².
  const engine::Var<float> loss =
      engine::scale(engine::mse_loss(f, y), float(double(X.size()) / target_energy));
  const engine::Parameters<float> params{&W1_, &W2_};
  engine::zero_grad(params);
  tape.backward(loss);
  if (clip_norm_ > 0) engine::clip_grad_norm(params, clip_norm_);
  adamw_.step(params, lr);
  return loss.value()(0, 0);
}

void CpuSkipMlpTrainer::save(engine::SafeTensors& file) const {
  const engine::Parameters<float> params{const_cast<engine::Parameter<float>*>(&W1_),
                                         const_cast<engine::Parameter<float>*>(&W2_)};
  engine::store_parameters(file, params);
  engine::store_state(file, params, adamw_);
}

void CpuSkipMlpTrainer::restore(const engine::SafeTensors& file) {
  const engine::Parameters<float> params{&W1_, &W2_};
  engine::restore_parameters(file, params);
  engine::restore_state(file, params, adamw_);
}

namespace {

// The configuration a checkpoint must match to be resumed (everything that changes the numbers).
std::map<std::string, std::string> checkpoint_identity(int d, const TransferConfig& c) {
  const auto& t = c.train;
  auto text = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return std::string(buf);
  };
  return {{"experiment", "qwe.exp8.4"},         {"d", std::to_string(d)},
          {"seed", std::to_string(c.seed)},     {"steps", std::to_string(t.steps)},
          {"batch", std::to_string(t.batch)},   {"lr", text(t.lr)},
          {"lr_floor", text(t.lr_floor)},       {"warmup", text(t.warmup)},
          {"weight_decay", text(t.weight_decay)}, {"clip_norm", text(t.clip_norm)}};
}

std::filesystem::path checkpoint_path(const TrainConfig& t, int d) {
  return t.checkpoint_dir / ("transfer_d" + std::to_string(d) + ".safetensors");
}

// Resumes from the checkpoint of this d if there is one; returns the step to start at.
std::int64_t resume(CpuSkipMlpTrainer& trainer, int d, const TransferConfig& c, std::vector<double>& loss) {
  const auto path = checkpoint_path(c.train, d);
  if (c.train.checkpoint_dir.empty() || !std::filesystem::exists(path)) return 0;
  const engine::SafeTensors file = engine::load_safetensors(path);
  for (const auto& [key, value] : checkpoint_identity(d, c)) {
    const auto it = file.metadata.find(key);
    if (it == file.metadata.end() || it->second != value)
      throw UsageError("--checkpoint: " + path.string() + " was written with " + key + " = " +
                       (it == file.metadata.end() ? std::string("(none)") : it->second) + ", this run has " +
                       value + " (use another directory)");
  }
  trainer.restore(file);
  const auto L = file.tensors.find("loss");
  if (L == file.tensors.end()) throw std::runtime_error("checkpoint " + path.string() + ": no tensor \"loss\"");
  const MatD losses = engine::to_matrix<double>(L->second, "loss");
  if (losses.size() != trainer.steps())
    throw std::runtime_error("checkpoint " + path.string() + ": the loss history and adamw.steps disagree");
  loss.assign(losses.data(), losses.data() + losses.size());
  return std::int64_t(loss.size());
}

void save_checkpoint(const CpuSkipMlpTrainer& trainer, int d, const TransferConfig& c,
                     const std::vector<double>& loss) {
  engine::SafeTensors file;
  trainer.save(file);
  for (const auto& [key, value] : checkpoint_identity(d, c)) file.metadata[key] = value;
  file.tensors["loss"] = engine::to_tensor<double>(Eigen::Map<const MatD>(loss.data(), 1, Eigen::Index(loss.size())));
  engine::save_safetensors(checkpoint_path(c.train, d), file);
}

template <class Trainer>
void train(Trainer& trainer, int d, const TransferConfig& c, std::int64_t start, std::vector<double>& loss,
           const StepObserver& observe, const std::function<void()>& checkpoint) {
  const auto& t = c.train;
  const std::int64_t warmup = std::min<std::int64_t>(t.steps - 1, std::int64_t(std::llround(t.warmup * t.steps)));
  const engine::WarmupCosine schedule(t.lr, t.lr * t.lr_floor, warmup, t.steps);
  for (std::int64_t s = start; s < t.steps; ++s) {
    const MatF X = draw_inputs(d, t.batch, c.seed, stream_name(d, "train/step=" + std::to_string(s)), c.threads);
    const double value = trainer.step(X, float(schedule(s)));
    require_finite(value, "training loss at d = " + std::to_string(d) + ", step " + std::to_string(s));
    loss.push_back(value);
    if (observe) observe(s + 1, value);
    if (checkpoint && ((s + 1) % t.checkpoint_every == 0 || s + 1 == t.steps)) checkpoint();
  }
}

}  // namespace

TransferResult run_transfer(int d, const TransferConfig& c, const StepObserver& observe) {
  if (d < 1) throw UsageError("--d: every d must be at least 1, got " + std::to_string(d));
  if (c.train.steps < 1) throw UsageError("--steps: must be at least 1");
  if (c.train.batch < 1) throw UsageError("--batch: must be at least 1");
  if (c.train.cuda && !c.train.checkpoint_dir.empty())
    throw UsageError("--checkpoint: works with --device cpu only (the CUDA trainer keeps its optimizer state on the device)");
  TransferResult result;
  result.d = d;
  const Target target = draw_target(d, c.seed);

  auto start = std::chrono::steady_clock::now();
  const MatD W = fit_ridge(
      d, [&](const MatF& X, std::int64_t) { return MatD(evaluate_target(target, X).cast<double>()); }, c.ridge,
      c.seed, stream_name(d, "ridge"), c.threads);
  const MatD W_population = population_linear_map(target);
  result.ridge_distance = (W - W_population).norm() / W_population.norm();
  result.ridge_seconds = seconds_since(start);

  start = std::chrono::steady_clock::now();
  const Mlp init = init_mlp(d, c.seed);
  Mlp trained;
  if (c.train.cuda) {
    gpu::SkipMlpTrainer trainer(init.W1, init.W2, target.R, target.U, target.V,
                                {.batch = c.train.batch, .weight_decay = float(c.train.weight_decay),
                                 .clip_norm = float(c.train.clip_norm)});
    train(trainer, d, c, 0, result.loss, observe, {});
    trainer.weights(trained.W1, trained.W2);
  } else {
    CpuSkipMlpTrainer trainer(init, target, c.train);
    result.resumed_from = resume(trainer, d, c, result.loss);
    std::function<void()> checkpoint;
    if (!c.train.checkpoint_dir.empty()) checkpoint = [&] { save_checkpoint(trainer, d, c, result.loss); };
    train(trainer, d, c, result.resumed_from, result.loss, observe, checkpoint);
    trained = trainer.weights();
  }
  result.steps = c.train.steps;
  const std::size_t tail = std::max<std::size_t>(1, result.loss.size() / 20);
  for (std::size_t i = result.loss.size() - tail; i < result.loss.size(); ++i) result.final_loss += result.loss[i];
  result.final_loss /= double(tail);
  result.train_seconds = seconds_since(start);

  start = std::chrono::steady_clock::now();
  result.mlp = evaluate(
      target, [&](const MatF& X) { return MatD(evaluate_mlp(trained, X).cast<double>()); }, c.eval_samples, c.seed,
      c.threads);
  result.linear = evaluate(
      target, [&](const MatF& X) { return MatD(X.cast<double>() * W); }, c.eval_samples, c.seed, c.threads);
  result.population_linear_rel_l2 =
      evaluate(target, [&](const MatF& X) { return MatD(X.cast<double>() * W_population); }, c.eval_samples,
               c.seed, c.threads)
          .rel_l2;
  result.eval_seconds = seconds_since(start);
  return result;
}

}  // namespace qkvlab::transfer
