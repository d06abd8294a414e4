// SkipMlpTrainer on a CUDA device: the model of gpu/skip_mlp_model.hpp (formulas
// there), every product through cuBLAS and every other step a kernel of
// gpu/ops.hpp. Plain C++: the CUDA lives behind gpu/ops.hpp.
#include "gpu/skip_mlp_model.hpp"

#include "gpu/device.hpp"
#include "gpu/ops.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace qkvlab::gpu {

namespace {

std::string shape(const MatF& M) { return std::to_string(M.rows()) + "x" + std::to_string(M.cols()); }

DeviceBuffer<float> to_device(const MatF& M) {
  DeviceBuffer<float> buffer(std::size_t(M.size()));
  buffer.upload(M.data(), std::size_t(M.size()));
  return buffer;
}

DeviceBuffer<float> zeros(std::size_t count) {
  DeviceBuffer<float> buffer(count);
  buffer.zero();
  return buffer;
}

void mark(PhaseTimer* timer, const char* phase) {
  if (timer) timer->mark(phase);
}

}  // namespace

SkipMlpModel::SkipMlpModel(const MatF& W1, const MatF& W2, const MatF& R, const MatF& U, const MatF& V,
                           const SkipMlpOptions& options)
    : options_(options), d_(int(W1.rows())), r_(int(W1.cols())), r_star_(int(U.cols())) {
  if (!device_status().available) throw std::runtime_error(device_status().description);
  if (W2.rows() != r_ || W2.cols() != d_ || R.rows() != d_ || R.cols() != d_ || U.rows() != d_ ||
      V.rows() != r_star_ || V.cols() != d_ || d_ == 0 || r_ == 0 || r_star_ == 0)
    throw std::invalid_argument("SkipMlpTrainer: need W1 d×r, W2 r×d, R d×d, U d×r*, V r*×d; got W1 " + shape(W1) +
                                ", W2 " + shape(W2) + ", R " + shape(R) + ", U " + shape(U) + ", V " + shape(V));
  if (options.batch <= 0) throw std::invalid_argument("SkipMlpTrainer: the batch must be positive");
  W1_ = to_device(W1), W2_ = to_device(W2), R_ = to_device(R), U_ = to_device(U), V_ = to_device(V);
  dW1_ = zeros(W1_.size()), dW2_ = zeros(W2_.size());
  mW1_ = zeros(W1_.size()), vW1_ = zeros(W1_.size()), mW2_ = zeros(W2_.size()), vW2_ = zeros(W2_.size());
  const std::size_t n = std::size_t(options.batch);
  X_ = DeviceBuffer<float>(n * d_), F_ = DeviceBuffer<float>(n * d_), Fs_ = DeviceBuffer<float>(n * d_);
  dF_ = DeviceBuffer<float>(n * d_);
  Z_ = DeviceBuffer<float>(n * r_), H_ = DeviceBuffer<float>(n * r_), dH_ = DeviceBuffer<float>(n * r_);
  dZ_ = DeviceBuffer<float>(n * r_);
  Zs_ = DeviceBuffer<float>(n * r_star_), Hs_ = DeviceBuffer<float>(n * r_star_);
}

void SkipMlpModel::upload_rows(const MatF& X, Eigen::Index begin, int rows) {
  if (begin == 0 && rows == X.rows()) {
    X_.upload(X.data(), std::size_t(X.size()));
  } else {
    const MatF block = X.middleRows(begin, rows);  // packed rows×d, column-major
    X_.upload(block.data(), std::size_t(block.size()));
  }
}

void SkipMlpModel::target(int n) {
  gemm(Op::none, Op::none, n, r_star_, d_, 1.0f, X_.data(), U_.data(), 0.0f, Zs_.data());  // Z* = X U
  gelu(std::size_t(n) * r_star_, Zs_.data(), Hs_.data());                                   // H* = GELU(Z*)
  gemm(Op::none, Op::none, n, d_, d_, 1.0f, X_.data(), R_.data(), 0.0f, Fs_.data());        // F* = X R
  gemm(Op::none, Op::none, n, d_, r_star_, 1.0f, Hs_.data(), V_.data(), 1.0f, Fs_.data());  //    + H* V
}

void SkipMlpModel::forward(int n) {
  gemm(Op::none, Op::none, n, r_, d_, 1.0f, X_.data(), W1_.data(), 0.0f, Z_.data());  // Z = X W1
  gelu(std::size_t(n) * r_, Z_.data(), H_.data());                                     // H = GELU(Z)
  copy(std::size_t(n) * d_, X_.data(), F_.data());                                     // F = X
  gemm(Op::none, Op::none, n, d_, r_, 1.0f, H_.data(), W2_.data(), 1.0f, F_.data());   //   + H W2
}

float SkipMlpModel::step(const MatF& X, float lr, PhaseTimer* timer) {
  const int n = options_.batch;
  if (X.rows() != n || X.cols() != d_)
    throw std::invalid_argument("SkipMlpTrainer::step: X is " + shape(X) + ", expected " + std::to_string(n) + "x" +
                                std::to_string(d_));
  if (timer) timer->start();
  upload_rows(X, 0, n);
  mark(timer, "upload");
  target(n);
  mark(timer, "target");
  forward(n);
  mark(timer, "forward");
  const RowComparison sums = row_comparison(n, d_, F_.data(), Fs_.data());
  const float loss = float(sums.squared_error / sums.squared_target);
  mark(timer, "loss");

  const std::size_t nd = std::size_t(n) * d_, nr = std::size_t(n) * r_;
  dW1_.zero(), dW2_.zero(), dF_.zero(), dZ_.zero();
  // dF = 2 (F − F*)/S*: mse_loss_backward's 2 dL (F − F*)/N with dL = N/S*.
  mse_loss_backward(nd, F_.data(), Fs_.data(), float(double(nd) / sums.squared_target), dF_.data());
  gemm(Op::transpose, Op::none, r_, d_, n, 1.0f, H_.data(), dF_.data(), 1.0f, dW2_.data());  // dW2 += Hᵀ dF
  gemm(Op::none, Op::transpose, n, r_, d_, 1.0f, dF_.data(), W2_.data(), 0.0f, dH_.data());  // dH = dF W2ᵀ
  gelu_backward(nr, Z_.data(), dH_.data(), dZ_.data());                                      // dZ = dH ⊙ GELU'(Z)
  gemm(Op::transpose, Op::none, d_, r_, n, 1.0f, X_.data(), dZ_.data(), 1.0f, dW1_.data());  // dW1 += Xᵀ dZ
  mark(timer, "backward");

  if (options_.clip_norm > 0)
    clip_grad_norm<float>({{dW1_.data(), dW1_.size()}, {dW2_.data(), dW2_.size()}}, options_.clip_norm);
  mark(timer, "clip");

  const AdamWStep adamw{.lr = lr,
                        .beta1 = options_.beta1,
                        .beta2 = options_.beta2,
                        .eps = options_.eps,
                        .weight_decay = options_.weight_decay,
                        .t = ++t_,
                        .decay = true};
  adamw_update(W1_.size(), adamw, W1_.data(), dW1_.data(), mW1_.data(), vW1_.data());
  adamw_update(W2_.size(), adamw, W2_.data(), dW2_.data(), mW2_.data(), vW2_.data());
  mark(timer, "adamw");
  return loss;
}

SkipMlpSums SkipMlpModel::evaluate(const MatF& X) {
  if (X.cols() != d_)
    throw std::invalid_argument("SkipMlpTrainer::evaluate: X has " + std::to_string(X.cols()) + " columns, expected " +
                                std::to_string(d_));
  SkipMlpSums total;
  for (Eigen::Index begin = 0; begin < X.rows(); begin += options_.batch) {
    const int rows = int(std::min<Eigen::Index>(options_.batch, X.rows() - begin));
    upload_rows(X, begin, rows);
    target(rows);
    forward(rows);
    const RowComparison sums = row_comparison(rows, d_, F_.data(), Fs_.data());
    total.squared_error += sums.squared_error;
    total.squared_target += sums.squared_target;
    total.cosine += sums.cosine;
  }
  return total;
}

void SkipMlpModel::weights(MatF& W1, MatF& W2) const {
  W1.resize(d_, r_);
  W2.resize(r_, d_);
  W1_.download(W1.data(), W1_.size());
  W2_.download(W2.data(), W2_.size());
}

// ---- SkipMlpTrainer: the public face (gpu/skip_mlp.hpp) --------------------------

struct SkipMlpTrainer::Impl : SkipMlpModel {
  using SkipMlpModel::SkipMlpModel;
};

SkipMlpTrainer::SkipMlpTrainer(const MatF& W1, const MatF& W2, const MatF& R, const MatF& U, const MatF& V,
                               const SkipMlpOptions& options)
    : impl_(std::make_unique<Impl>(W1, W2, R, U, V, options)) {}
SkipMlpTrainer::~SkipMlpTrainer() = default;
float SkipMlpTrainer::step(const MatF& X, float lr) { return impl_->step(X, lr); }
SkipMlpSums SkipMlpTrainer::evaluate(const MatF& X) const { return impl_->evaluate(X); }
void SkipMlpTrainer::weights(MatF& W1, MatF& W2) const { impl_->weights(W1, W2); }

}  // namespace qkvlab::gpu
