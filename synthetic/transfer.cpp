// qwe.exp8.4: see transfer.hpp for the formulas and the convention (row vectors).
#include "synthetic/transfer.hpp"

#include "core/errors.hpp"
#include "core/parallel.hpp"
#include "core/rng.hpp"
#include "engine/adamw_state.hpp"
#include "engine/blas.hpp"
#include "engine/linear.hpp"
#include "engine/make_backend.hpp"
#include "engine/optimizer.hpp"
#include "engine/relative_error.hpp"
#include "engine/rng.hpp"
#include "engine/schedule.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>

namespace qkvlab::transfer {
namespace {

using engine::Op;

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

Metrics evaluate(int d, const Predictor& target, const Predictor& predict, std::int64_t samples,
                 std::uint64_t seed, int threads) {
  constexpr Eigen::Index kEvalChunk = 8192;
  double squared_error = 0, squared_target = 0, cosine = 0;
  for (std::int64_t c = 0; c * kEvalChunk < samples; ++c) {
    const Eigen::Index rows = std::min<std::int64_t>(kEvalChunk, samples - c * kEvalChunk);
    const MatF X = draw_inputs(d, rows, seed, stream_name(d, "eval/chunk=" + std::to_string(c)), threads);
    const MatD Y = target(X);
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

// ---- SkipMlp: the model on a backend ---------------------------------------------------------

namespace {

using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using engine::Buffer;
using engine::View;

engine::ParameterLayout skip_mlp_layout(int d, int r) {
  engine::ParameterLayout layout;
  layout.add("W1", {d, r}, true);
  layout.add("W2", {r, d}, true);
  return layout;
}

// A host matrix as the backend's row-major buffer.
Buffer<float> to_backend(engine::Backend<float>& be, const MatF& M) {
  const RowMatF rows = M;
  Buffer<float> buffer(be, std::size_t(rows.size()));
  buffer.upload(rows.data(), std::size_t(rows.size()));
  return buffer;
}

}  // namespace

struct SkipMlp::Impl {
  Impl(engine::Backend<float>& be_, const Target& t, const Mlp& init, const TrainConfig& config)
      : be(be_), d(t.d()), r(int(init.W1.cols())), rs(t.r()), batch(config.batch),
        params(be_, skip_mlp_layout(d, r)), adamw(be_, params.layout.total()),
        adamw_config{.weight_decay = config.weight_decay}, clip_norm(config.clip_norm),
        R(to_backend(be_, t.R)), U(to_backend(be_, t.U)), V(to_backend(be_, t.V)),
        X(be_, rows(d)), Z(be_, rows(r)), H(be_, rows(r)), F(be_, rows(d)), Zs(be_, rows(rs)), Hs(be_, rows(rs)),
        Fs(be_, rows(d)), D(be_, rows(d)), dH(be_, rows(r)), dZ(be_, rows(r)), staging(rows(d)) {
    if (init.W1.rows() != d || init.W2.rows() != r || init.W2.cols() != d || batch < 1)
      throw std::invalid_argument("SkipMlp: need W1 d×r and W2 r×d for the target's d, and a positive batch");
    set(params.values, init);
    W1 = params.value("W1"), W2 = params.value("W2"), dW1 = params.grad("W1"), dW2 = params.grad("W2");
  }

  std::size_t rows(int width) const { return std::size_t(batch) * width; }

  void set(Buffer<float>& values, const Mlp& m) {
    const RowMatF w1 = m.W1, w2 = m.W2;
    values.upload(w1.data(), std::size_t(w1.size()), params.layout.at("W1").offset);
    values.upload(w2.data(), std::size_t(w2.size()), params.layout.at("W2").offset);
  }

  // Rows begin … begin + n − 1 of X into the buffer X.
  void upload_rows(const MatF& host, Eigen::Index begin, int n) {
    Eigen::Map<RowMatF>(staging.data(), n, d) = host.middleRows(begin, n);
    X.upload(staging.data(), std::size_t(n) * d);
  }

  void download_rows(const Buffer<float>& from, MatF& host, Eigen::Index begin, int n) {
    from.download(staging.data(), std::size_t(n) * d);
    host.middleRows(begin, n) = Eigen::Map<const RowMatF>(staging.data(), n, d);
  }

  // Fs = X R + GELU(X U) V for the first n rows.
  void target(int n) {
    engine::linear_forward<float>(be, n, d, rs, {X.data(), d}, U.data(), nullptr, {Zs.data(), rs});
    be.gelu_forward(std::size_t(n) * rs, engine::GeluForm::erf, Zs.data(), Hs.data());
    engine::linear_forward<float>(be, n, d, d, {X.data(), d}, R.data(), nullptr, {Fs.data(), d});
    engine::linear_forward<float>(be, n, rs, d, {Hs.data(), rs}, V.data(), nullptr, {Fs.data(), d}, true);
  }

  // F = X + GELU(X W1) W2 for the first n rows.
  void forward(int n) {
    engine::linear_forward<float>(be, n, d, r, {X.data(), d}, W1, nullptr, {Z.data(), r});
    be.gelu_forward(std::size_t(n) * r, engine::GeluForm::erf, Z.data(), H.data());
    be.axpby(n, d, 1.0f, X.data(), d, 0.0f, F.data(), d);
    engine::linear_forward<float>(be, n, r, d, {H.data(), r}, W2, nullptr, {F.data(), d}, true);
  }

  // The loss of the batch in X; D holds dF = 2 (F − F*)/S* on return.
  double loss() { return engine::relative_squared_error<float>(be, batch, d, F.data(), Fs.data(), D.data()); }

  void backward() {
    const int n = batch;
    be.fill(params.grads.size(), 0.0f, params.grads.data());
    engine::linear_backward<float>(be, n, r, d, {H.data(), r}, W2, {D.data(), d}, {dH.data(), r}, dW2, nullptr);
    be.fill(rows(r), 0.0f, dZ.data());
    be.gelu_backward(rows(r), engine::GeluForm::erf, Z.data(), dH.data(), dZ.data());
    engine::linear_backward<float>(be, n, d, r, {X.data(), d}, W1, {dZ.data(), r}, {nullptr, 0}, dW1, nullptr);
  }

  template <class Pass>
  MatF over_rows(const MatF& host, Pass pass, const Buffer<float>& result) {
    if (host.cols() != d)
      throw std::invalid_argument("SkipMlp: X has " + std::to_string(host.cols()) + " columns, expected " +
                                  std::to_string(d));
    MatF out(host.rows(), d);
    for (Eigen::Index begin = 0; begin < host.rows(); begin += batch) {
      const int n = int(std::min<Eigen::Index>(batch, host.rows() - begin));
      upload_rows(host, begin, n);
      pass(n);
      download_rows(result, out, begin, n);
    }
    return out;
  }

  engine::Backend<float>& be;
  int d, r, rs, batch;
  engine::ParameterSet<float> params;
  engine::AdamWState<float> adamw;
  engine::AdamWConfig adamw_config;
  double clip_norm;
  Buffer<float> R, U, V;                          // the target, row-major
  Buffer<float> X, Z, H, F, Zs, Hs, Fs, D, dH, dZ;  // batch rows each
  std::vector<float> staging;                     // host rows, row-major
  float *W1 = nullptr, *W2 = nullptr, *dW1 = nullptr, *dW2 = nullptr;
};

SkipMlp::SkipMlp(engine::Backend<float>& backend, const Target& target, const Mlp& init, const TrainConfig& config)
    : impl_(std::make_unique<Impl>(backend, target, init, config)) {}
SkipMlp::~SkipMlp() = default;

MatF SkipMlp::target(const MatF& X) {
  return impl_->over_rows(X, [&](int n) { impl_->target(n); }, impl_->Fs);
}

MatF SkipMlp::predict(const MatF& X) {
  return impl_->over_rows(X, [&](int n) { impl_->forward(n); }, impl_->F);
}

float SkipMlp::step(const MatF& X, double lr) {
  Impl& m = *impl_;
  if (X.rows() != m.batch || X.cols() != m.d)
    throw std::invalid_argument("SkipMlp::step: X is " + std::to_string(X.rows()) + "x" + std::to_string(X.cols()) +
                                ", expected " + std::to_string(m.batch) + "x" + std::to_string(m.d));
  m.upload_rows(X, 0, m.batch);
  m.target(m.batch);
  m.forward(m.batch);
  const double value = m.loss();
  m.backward();
  if (m.clip_norm > 0) engine::clip_gradients(m.be, m.params, m.clip_norm);
  m.adamw.step(m.be, m.params, m.adamw_config, lr);
  return float(value);
}

Mlp SkipMlp::weights() const {
  const std::vector<float> values = impl_->params.values.to_host();
  const auto& layout = impl_->params.layout;
  const int d = impl_->d, r = impl_->r;
  return {Eigen::Map<const RowMatF>(values.data() + layout.at("W1").offset, d, r),
          Eigen::Map<const RowMatF>(values.data() + layout.at("W2").offset, r, d)};
}

std::int64_t SkipMlp::steps() const { return impl_->adamw.t; }

namespace {

// engine/safetensors.hpp's restore_matrix checks (present, F32, the shape), into the flat array.
void read_tensor(const engine::SafeTensors& file, const std::string& name, const engine::ParameterSpec& spec,
                 std::vector<float>& values) {
  const RowMatF M = engine::restore_matrix<float>(file, name, spec.shape[0], spec.shape[1]);
  std::memcpy(values.data() + spec.offset, M.data(), spec.size() * sizeof(float));
}

// Checkpoints written before the optimizer's state had one format (engine/adamw_state.hpp) named the
// moments "adamw.m/NAME", "adamw.v/NAME" and the step count "adamw.steps": such a file, renamed to
// the format; nullopt for any other file.
std::optional<engine::SafeTensors> from_legacy_format(const engine::SafeTensors& file) {
  const auto steps = file.metadata.find("adamw.steps");
  if (steps == file.metadata.end()) return std::nullopt;
  engine::SafeTensors renamed = file;
  renamed.metadata.erase("adamw.steps");
  renamed.metadata[engine::kAdamWStepKey] = steps->second;
  for (const auto& [name, tensor] : file.tensors)
    if (name.rfind("adamw.", 0) == 0) renamed.tensors.erase(name), renamed.tensors[name.substr(6)] = tensor;
  return renamed;
}

}  // namespace

void SkipMlp::save(engine::SafeTensors& file) const {
  const Impl& m = *impl_;
  const std::vector<float> values = m.params.values.to_host();
  for (const auto& spec : m.params.layout.specs()) file.tensors[spec.name] = engine::tensor_of(spec, values);
  engine::write_adamw_state(file, m.params.layout, {m.adamw.m.to_host(), m.adamw.v.to_host(), m.adamw.t});
}

void SkipMlp::restore(const engine::SafeTensors& file) {
  if (const auto current = from_legacy_format(file)) return restore(*current);
  Impl& m = *impl_;
  const engine::AdamWHostState state = engine::read_adamw_state(file, m.params.layout);
  std::vector<float> values(m.params.layout.total(), 0.0f);
  for (const auto& spec : m.params.layout.specs()) read_tensor(file, spec.name, spec, values);
  m.params.values.upload(values);
  m.adamw.m.upload(state.m);
  m.adamw.v.upload(state.v);
  m.adamw.t = state.t;
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
          {"weight_decay", text(t.weight_decay)}, {"clip_norm", text(t.clip_norm)},
          {"device", t.device == engine::Device::cuda ? "cuda" : "cpu"}};
}

std::filesystem::path checkpoint_path(const TrainConfig& t, int d) {
  return t.checkpoint_dir / ("transfer_d" + std::to_string(d) + ".safetensors");
}

// Runs `use` on the checkpoint of this d if there is one, read and checked: a checkpoint that cannot
// be used (malformed, another configuration, a loss history that is longer than the run or holds a
// non-finite value, which training never saves, or one that `use` refuses) is a CheckpointError
// naming the file.
void with_checkpoint(int d, const TransferConfig& c,
                     const std::function<void(const engine::SafeTensors&, const MatD& losses)>& use) {
  const auto path = checkpoint_path(c.train, d);
  if (c.train.checkpoint_dir.empty() || !std::filesystem::exists(path)) return;
  try {
    const engine::SafeTensors file = engine::load_safetensors(path);
    for (const auto& [key, value] : checkpoint_identity(d, c)) {
      const auto it = file.metadata.find(key);
      if (it == file.metadata.end() || it->second != value)
        throw CheckpointError(path.string() + " was written with " + key + " = " +
                         (it == file.metadata.end() ? std::string("(none)") : it->second) + ", this run has " +
                         value + " (use another directory)");
    }
    const auto L = file.tensors.find("loss");
    if (L == file.tensors.end()) throw std::runtime_error("no tensor \"loss\"");
    const MatD losses = engine::to_matrix<double>(L->second, "loss");
    for (Eigen::Index k = 0; k < losses.size(); ++k)
      if (!std::isfinite(losses.data()[k]))
        throw std::runtime_error("the loss history holds a non-finite value at step " + std::to_string(k + 1));
    if (losses.size() > c.train.steps)
      throw std::runtime_error("the loss history has " + std::to_string(losses.size()) + " steps, more than this run's " + std::to_string(c.train.steps));
    use(file, losses);
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (why.rfind("safetensors: ", 0) == 0) why = why.substr(13);
    if (why.rfind(path.string() + ": ", 0) == 0) why = why.substr(path.string().size() + 2);
    throw CheckpointError(path.string() + ": " + why + " (a corrupt checkpoint; use another directory)");
  }
}

// Resumes from the checkpoint of this d if there is one; returns the step to start at.
std::int64_t resume(SkipMlp& trainer, int d, const TransferConfig& c, std::vector<double>& loss) {
  with_checkpoint(d, c, [&](const engine::SafeTensors& file, const MatD& losses) {
    trainer.restore(file);
    if (losses.size() != trainer.steps()) throw std::runtime_error("the loss history and the optimizer's step count \"t\" disagree");
    loss.assign(losses.data(), losses.data() + losses.size());
  });
  return std::int64_t(loss.size());
}

void save_checkpoint(const SkipMlp& trainer, int d, const TransferConfig& c,
                     const std::vector<double>& loss) {
  engine::SafeTensors file;
  trainer.save(file);
  for (const auto& [key, value] : checkpoint_identity(d, c)) file.metadata[key] = value;
  file.tensors["loss"] = engine::to_tensor<double>(Eigen::Map<const MatD>(loss.data(), 1, Eigen::Index(loss.size())));
  engine::save_safetensors(checkpoint_path(c.train, d), file);
}

void train(SkipMlp& trainer, int d, const TransferConfig& c, std::int64_t start, std::vector<double>& loss,
           const StepObserver& observe, const std::function<void()>& checkpoint) {
  const auto& t = c.train;
  const std::int64_t warmup = std::min<std::int64_t>(t.steps - 1, std::int64_t(std::llround(t.warmup * t.steps)));
  const engine::WarmupCosine schedule(t.lr, t.lr * t.lr_floor, warmup, t.steps);
  for (std::int64_t s = start; s < t.steps; ++s) {
    const MatF X = draw_inputs(d, t.batch, c.seed, stream_name(d, "train/step=" + std::to_string(s)), c.threads);
    const double value = trainer.step(X, schedule(s));
    require_finite(value, "training loss at d = " + std::to_string(d) + ", step " + std::to_string(s));
    loss.push_back(value);
    if (observe) observe(s + 1, value);
    if (checkpoint && ((s + 1) % t.checkpoint_every == 0 || s + 1 == t.steps)) checkpoint();
  }
}

}  // namespace

void check_checkpoints(const std::vector<int>& ds, const TransferConfig& c) {
  for (int d : ds) with_checkpoint(d, c, [](const engine::SafeTensors&, const MatD&) {});
}

TransferResult run_transfer(int d, const TransferConfig& c, const StepObserver& observe) {
  if (d < 1) throw UsageError("every d must be at least 1, got " + std::to_string(d));
  if (c.train.steps < 1) throw UsageError("steps must be at least 1");
  if (c.train.batch < 1) throw UsageError("batch must be at least 1");
  TransferResult result;
  result.d = d;
  const Target target = draw_target(d, c.seed);
  const std::unique_ptr<engine::Backend<float>> backend = engine::make_backend(c.train.device, c.threads);
  SkipMlp model(*backend, target, init_mlp(d, c.seed), c.train);
  const Predictor target_values = [&](const MatF& X) { return MatD(model.target(X).cast<double>()); };

  auto start = std::chrono::steady_clock::now();
  const MatD W = fit_ridge(
      d, [&](const MatF& X, std::int64_t) { return target_values(X); }, c.ridge, c.seed, stream_name(d, "ridge"),
      c.threads);
  const MatD W_population = population_linear_map(target);
  result.ridge_distance = (W - W_population).norm() / W_population.norm();
  result.ridge_seconds = seconds_since(start);

  start = std::chrono::steady_clock::now();
  result.resumed_from = resume(model, d, c, result.loss);
  std::function<void()> checkpoint;
  if (!c.train.checkpoint_dir.empty()) checkpoint = [&] { save_checkpoint(model, d, c, result.loss); };
  train(model, d, c, result.resumed_from, result.loss, observe, checkpoint);
  result.steps = c.train.steps;
  const std::size_t tail = std::max<std::size_t>(1, result.loss.size() / 20);
  for (std::size_t i = result.loss.size() - tail; i < result.loss.size(); ++i) result.final_loss += result.loss[i];
  result.final_loss /= double(tail);
  result.train_seconds = seconds_since(start);

  start = std::chrono::steady_clock::now();
  result.mlp = evaluate(
      d, target_values, [&](const MatF& X) { return MatD(model.predict(X).cast<double>()); }, c.eval_samples,
      c.seed, c.threads);
  result.linear = evaluate(
      d, target_values, [&](const MatF& X) { return MatD(X.cast<double>() * W); }, c.eval_samples, c.seed,
      c.threads);
  result.population_linear_rel_l2 =
      evaluate(d, target_values, [&](const MatF& X) { return MatD(X.cast<double>() * W_population); },
               c.eval_samples, c.seed, c.threads)
          .rel_l2;
  result.eval_seconds = seconds_since(start);
  return result;
}

}  // namespace qkvlab::transfer
