// GPU against CPU: every operation of gpu/ops.hpp against the engine's
// operation (engine/ops/*.hpp, engine/optim.hpp) on the same random inputs,
// forward values and gradients, in float and double; and SkipMlpTrainer
// against the same training steps done with the engine.
//
// Tolerance. Both sides compute the same formulas in the same precision T
// (unit roundoff u), in different summation orders. A k-term sum of
// zero-mean random terms carries a rounding error of about u·sqrt(k) relative
// to its size (the probabilistic bound of Higham and Mary, 2019), and so does
// each side; k is the total length of the reductions chained in an operation
// (stated in each test). A test passes when
//   rel_err = ‖cpu − gpu‖_F / ‖cpu‖_F ≤ 16 · u · sqrt(k),
// the 16 covering two independent errors of a few u·sqrt(k) each and the
// engine's float erf (within 2e-7 ≈ 3.4 u of Φ). These are set from the
// error model, not from runs: none of these tests has run on a device yet.
// Every test has a negative control (a hypothesis broken: wrong mask, wrong
// transpose, no centering, no bias correction, no skip) that must disagree by
// rel_err ≥ 1e-3.
//
// Without a CUDA device every GPU test skips with device_status().description;
// GpuDevice.* always run.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "engine/ops.hpp"
#include "engine/optim.hpp"
#include "engine/rng.hpp"
#include "gpu/device.hpp"
#include "gpu/skip_mlp.hpp"
#ifdef QKVLAB_HAVE_CUDA
#include "gpu/device_buffer.hpp"
#include "gpu/ops.hpp"
#endif

namespace {

using namespace qkvlab;
namespace eng = qkvlab::engine;
using gpu::device_status;

constexpr double tolerance_constant = 16;
constexpr double control_min_error = 1e-3;

template <class T>
double tolerance(double k) {
  return tolerance_constant * unit_roundoff<T>() * std::sqrt(k);
}

template <class T>
Mat<T> draw(Eigen::Index rows, Eigen::Index cols, std::uint64_t stream, double stddev = 1.0) {
  Rng rng(4242, stream);
  return eng::normal_matrix<T>(rows, cols, stddev, rng);
}

// ‖reference − x‖_F / ‖reference‖_F in double.
template <class T>
double rel_err(const Mat<T>& reference, const Mat<T>& x) {
  EXPECT_EQ(reference.rows(), x.rows());
  EXPECT_EQ(reference.cols(), x.cols());
  const Mat<double> r = reference.template cast<double>();
  return (r - x.template cast<double>()).norm() / r.norm();
}

// ---- Always run ---------------------------------------------------------------

TEST(GpuDevice, StatusIsConsistent) {
  const gpu::DeviceStatus& status = device_status();
  EXPECT_EQ(&status, &device_status()) << "device_status() is queried once and cached";
  ASSERT_FALSE(status.description.empty());
  if (status.available)
    EXPECT_NE(status.description.find("compute"), std::string::npos) << status.description;
  else
    std::printf("%s\n", status.description.c_str());
}

// Without a device the trainer refuses with the reason (no crash); with one it trains.
TEST(GpuDevice, TrainerNeedsADevice) {
  const int d = 4, r = 8, batch = 16;
  const Mat<float> W1 = draw<float>(d, r, 1, 0.5), W2 = draw<float>(r, d, 2, 0.35), R = draw<float>(d, d, 3, 0.5),
                   U = draw<float>(d, r, 4, 0.5), V = draw<float>(r, d, 5, 0.35), X = draw<float>(batch, d, 6);
  const gpu::SkipMlpOptions options{.batch = batch};
  if (!device_status().available) {
    try {
      gpu::SkipMlpTrainer trainer(W1, W2, R, U, V, options);
      FAIL() << "SkipMlpTrainer was constructed without a CUDA device";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), device_status().description);
    }
  } else {
    gpu::SkipMlpTrainer trainer(W1, W2, R, U, V, options);
    EXPECT_TRUE(std::isfinite(trainer.step(X, 1e-3f)));
  }
}

#ifdef QKVLAB_HAVE_CUDA

TEST(GpuDevice, BufferNeedsADevice) {
  if (!device_status().available) {
    try {
      gpu::DeviceBuffer<float> buffer(16);
      FAIL() << "device memory was allocated without a CUDA device";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), device_status().description);
    }
  } else {
    gpu::DeviceBuffer<double> buffer(16);
    const std::vector<double> up(16, 2.5);
    std::vector<double> down(16, 0.0);
    buffer.upload(up.data(), up.size());
    buffer.download(down.data(), down.size());
    EXPECT_EQ(up, down);
    EXPECT_THROW(buffer.upload(up.data(), 17), std::invalid_argument);
  }
}

// ---- Helpers for the GPU tests ------------------------------------------------

template <class T>
gpu::DeviceBuffer<T> to_device(const Mat<T>& M) {
  gpu::DeviceBuffer<T> buffer(std::size_t(M.size()));
  buffer.upload(M.data(), std::size_t(M.size()));
  return buffer;
}

template <class T>
Mat<T> to_host(const gpu::DeviceBuffer<T>& buffer, Eigen::Index rows, Eigen::Index cols) {
  Mat<T> M(rows, cols);
  buffer.download(M.data(), std::size_t(M.size()));
  return M;
}

// A batch of equally shaped matrices, one after another (the layout of gpu/ops.hpp).
template <class T>
Mat<T> stack(const std::vector<Mat<T>>& blocks) {
  Mat<T> packed(blocks.front().size(), Eigen::Index(blocks.size()));
  for (std::size_t b = 0; b < blocks.size(); ++b)
    packed.col(Eigen::Index(b)) = blocks[b].reshaped();
  return packed;
}

template <class T>
std::vector<Mat<T>> unstack(const Mat<T>& packed, Eigen::Index rows, Eigen::Index cols) {
  std::vector<Mat<T>> blocks;
  for (Eigen::Index b = 0; b < packed.cols(); ++b) blocks.push_back(packed.col(b).reshaped(rows, cols));
  return blocks;
}

template <class T>
std::vector<Mat<T>> draw_batch(int batch, Eigen::Index rows, Eigen::Index cols, std::uint64_t stream) {
  std::vector<Mat<T>> blocks;
  for (int b = 0; b < batch; ++b) blocks.push_back(draw<T>(rows, cols, stream * 100 + b));
  return blocks;
}

// Single statements, so a message can be streamed after them.
#define EXPECT_AGREE(reference, gpu_value, k) \
  EXPECT_LE(rel_err<T>((reference), (gpu_value)), tolerance<T>(k)) << #gpu_value << " vs " << #reference << " (k = " << (k) << ") "

#define EXPECT_DISAGREE(reference, gpu_value)                                                 \
  EXPECT_GE(rel_err<T>((reference), (gpu_value)), control_min_error) << "control: " << #gpu_value \
                                                                     << " should differ from " << #reference

template <class T>
class GpuOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!device_status().available) GTEST_SKIP() << device_status().description;
  }
};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GpuOps, Scalars);

// ---- Products -------------------------------------------------------------------

template <class T>
Mat<T> op(const Mat<T>& M, gpu::Op o) {
  return o == gpu::Op::none ? M : Mat<T>(M.transpose());
}

template <class T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// C = α op(A) op(B) + β C for both op flags and both layouts; k = 53 terms.
TYPED_TEST(GpuOps, Gemm) {
  using T = TypeParam;
  const int m = 37, n = 29, k = 53;
  const T alpha = T(0.75), beta = T(-0.5);
  for (gpu::Layout layout : {gpu::Layout::col_major, gpu::Layout::row_major})
    for (gpu::Op op_a : {gpu::Op::none, gpu::Op::transpose})
      for (gpu::Op op_b : {gpu::Op::none, gpu::Op::transpose}) {
        const Mat<T> A = op_a == gpu::Op::none ? draw<T>(m, k, 1) : draw<T>(k, m, 1);
        const Mat<T> B = op_b == gpu::Op::none ? draw<T>(k, n, 2) : draw<T>(n, k, 2);
        const Mat<T> C0 = draw<T>(m, n, 3);
        const Mat<T> expected = alpha * op(A, op_a) * op(B, op_b) + beta * C0;
        Mat<T> C(m, n);
        if (layout == gpu::Layout::col_major) {
          gpu::DeviceBuffer<T> dA = to_device(A), dB = to_device(B), dC = to_device(C0);
          gpu::gemm(op_a, op_b, m, n, k, alpha, dA.data(), dB.data(), beta, dC.data(), layout);
          C = to_host(dC, m, n);
        } else {
          const RowMajor<T> Ar = A, Br = B, Cr0 = C0;
          gpu::DeviceBuffer<T> dA(Ar.size()), dB(Br.size()), dC(Cr0.size());
          dA.upload(Ar.data(), Ar.size()), dB.upload(Br.data(), Br.size()), dC.upload(Cr0.data(), Cr0.size());
          gpu::gemm(op_a, op_b, m, n, k, alpha, dA.data(), dB.data(), beta, dC.data(), layout);
          RowMajor<T> Cr(m, n);
          dC.download(Cr.data(), Cr.size());
          C = Cr;
        }
        EXPECT_AGREE(expected, C, k);
      }
  // Control: a square product with the transpose flag of A wrong.
  const Mat<T> A = draw<T>(k, k, 4), B = draw<T>(k, k, 5);
  gpu::DeviceBuffer<T> dA = to_device(A), dB = to_device(B), dC(std::size_t(k) * k);
  gpu::gemm(gpu::Op::transpose, gpu::Op::none, k, k, k, T(1), dA.data(), dB.data(), T(0), dC.data());
  const Mat<T> expected = A * B, wrong_flag = to_host(dC, k, k);
  EXPECT_DISAGREE(expected, wrong_flag);
}

// Three products at once; k = 41 terms. Control: stride 0 reuses B_0 for every product.
TYPED_TEST(GpuOps, GemmStridedBatched) {
  using T = TypeParam;
  const int m = 19, n = 23, k = 41, batch = 3;
  const auto A = draw_batch<T>(batch, m, k, 1), B = draw_batch<T>(batch, k, n, 2);
  gpu::DeviceBuffer<T> dA = to_device(stack(A)), dB = to_device(stack(B)), dC(std::size_t(batch) * m * n);
  gpu::gemm_strided_batched(gpu::Op::none, gpu::Op::none, m, n, k, T(1), dA.data(), std::int64_t(m) * k, dB.data(),
                            std::int64_t(k) * n, T(0), dC.data(), std::int64_t(m) * n, batch);
  const auto C = unstack(to_host(dC, m * n, batch), m, n);
  for (int b = 0; b < batch; ++b) {
    const Mat<T> expected = A[b] * B[b];
    EXPECT_AGREE(expected, C[b], k);
  }
  gpu::gemm_strided_batched(gpu::Op::none, gpu::Op::none, m, n, k, T(1), dA.data(), std::int64_t(m) * k, dB.data(),
                            0, T(0), dC.data(), std::int64_t(m) * n, batch);
  const Mat<T> expected_last = A[2] * B[2], reused_B0 = unstack(to_host(dC, m * n, batch), m, n)[2];
  EXPECT_DISAGREE(expected_last, reused_B0);
}

// ---- Elementwise -----------------------------------------------------------------

// Y = X + 1 b, db += Σ_rows dY (k = n = 57 terms). Control: the bias left out.
TYPED_TEST(GpuOps, AddBias) {
  using T = TypeParam;
  const int n = 57, d = 13;
  const Mat<T> X = draw<T>(n, d, 1), b = draw<T>(1, d, 2), dY = draw<T>(n, d, 3), db0 = draw<T>(1, d, 4);
  eng::Tape<T> tape;
  eng::Var<T> x = tape.variable(X), bias = tape.variable(b);
  eng::Var<T> Y = eng::add_bias(x, bias);
  tape.backward(Y, dY);
  const Mat<T> expected_db = db0 + bias.grad();

  gpu::DeviceBuffer<T> gX = to_device(X), gb = to_device(b), gY(X.size()), gdY = to_device(dY), gdb = to_device(db0);
  gpu::add_bias(n, d, gX.data(), gb.data(), gY.data());
  gpu::add_bias_backward(n, d, gdY.data(), gdb.data());
  const Mat<T> Y_gpu = to_host(gY, n, d), db_gpu = to_host(gdb, 1, d);
  EXPECT_AGREE(Y.value(), Y_gpu, 1);
  EXPECT_AGREE(expected_db, db_gpu, n);
  EXPECT_DISAGREE(Y.value(), X);
}

// GELU and ReLU, values and dX += dY ⊙ σ'(X) (k = 1). Control: ReLU where GELU is meant.
TYPED_TEST(GpuOps, GeluAndRelu) {
  using T = TypeParam;
  const int n = 41, d = 17;
  const std::size_t N = std::size_t(n) * d;
  const Mat<T> X = draw<T>(n, d, 1, 2.0), dY = draw<T>(n, d, 2), dX0 = draw<T>(n, d, 3);
  for (bool is_gelu : {true, false}) {
    eng::Tape<T> tape;
    eng::Var<T> x = tape.variable(X);
    eng::Var<T> Y = is_gelu ? eng::gelu(x) : eng::relu(x);
    tape.backward(Y, dY);
    const Mat<T> expected_dX = dX0 + x.grad();

    gpu::DeviceBuffer<T> gX = to_device(X), gY(N), gdY = to_device(dY), gdX = to_device(dX0);
    if (is_gelu) {
      gpu::gelu(N, gX.data(), gY.data());
      gpu::gelu_backward(N, gX.data(), gdY.data(), gdX.data());
    } else {
      gpu::relu(N, gX.data(), gY.data());
      gpu::relu_backward(N, gX.data(), gdY.data(), gdX.data());
    }
    const Mat<T> Y_gpu = to_host(gY, n, d), dX_gpu = to_host(gdX, n, d);
    EXPECT_AGREE(Y.value(), Y_gpu, 1) << (is_gelu ? "gelu" : "relu");
    EXPECT_AGREE(expected_dX, dX_gpu, 1) << (is_gelu ? "gelu" : "relu");
    if (is_gelu) {
      gpu::relu(N, gX.data(), gY.data());
      const Mat<T> relu_instead = to_host(gY, n, d);
      EXPECT_DISAGREE(Y.value(), relu_instead);
    }
  }
}

// ---- Attention -------------------------------------------------------------------------

struct AttentionCase {
  gpu::Mask mask;
  int batch, n, m, d_h, d_v;
};
constexpr AttentionCase attention_cases[] = {{gpu::Mask::causal, 2, 12, 12, 8, 6},
                                             {gpu::Mask::bidirectional, 3, 10, 14, 8, 5}};

eng::Mask engine_mask(gpu::Mask mask) {
  return mask == gpu::Mask::causal ? eng::Mask::causal : eng::Mask::bidirectional;
}

// Runs the engine's head (softmax or linear) on each batch entry and the GPU
// op on the whole batch, and compares outputs and the three gradients. The
// reductions chained: scores (d_h), softmax (m), A V (m), backward dA (d_v)
// and dQ, dK, dV (m or n): k = d_h + d_v + 2 max(n, m).
template <class T>
void check_attention(bool softmax, const AttentionCase& c, gpu::Mask gpu_mask) {
  const auto Q = draw_batch<T>(c.batch, c.n, c.d_h, 1), K = draw_batch<T>(c.batch, c.m, c.d_h, 2),
             V = draw_batch<T>(c.batch, c.m, c.d_v, 3), dH = draw_batch<T>(c.batch, c.n, c.d_v, 4);
  std::vector<Mat<T>> H, dQ, dK, dV;
  for (int b = 0; b < c.batch; ++b) {
    eng::Tape<T> tape;
    eng::Var<T> q = tape.variable(Q[b]), k = tape.variable(K[b]), v = tape.variable(V[b]);
    eng::Var<T> h = softmax ? eng::attention_head(q, k, v, engine_mask(c.mask))
                            : eng::linear_attention(q, k, v, engine_mask(c.mask));
    tape.backward(h, dH[b]);
    H.push_back(h.value()), dQ.push_back(q.grad()), dK.push_back(k.grad()), dV.push_back(v.grad());
  }
  const gpu::AttentionShape shape{c.batch, c.n, c.m, c.d_h, c.d_v};
  const std::size_t weights = std::size_t(c.batch) * c.n * c.m;
  gpu::DeviceBuffer<T> gQ = to_device(stack(Q)), gK = to_device(stack(K)), gV = to_device(stack(V)),
                       gdH = to_device(stack(dH)), gA(weights), gH(std::size_t(c.batch) * c.n * c.d_v),
                       work(weights), gdQ(gQ.size()), gdK(gK.size()), gdV(gV.size());
  gdQ.zero(), gdK.zero(), gdV.zero();
  if (softmax) {
    gpu::attention_head(shape, gpu_mask, gQ.data(), gK.data(), gV.data(), gA.data(), gH.data());
    gpu::attention_head_backward(shape, gQ.data(), gK.data(), gV.data(), gA.data(), gdH.data(), gdQ.data(),
                                 gdK.data(), gdV.data(), work.data());
  } else {
    gpu::linear_attention(shape, gpu_mask, gQ.data(), gK.data(), gV.data(), gA.data(), gH.data());
    gpu::linear_attention_backward(shape, gpu_mask, gQ.data(), gK.data(), gV.data(), gA.data(), gdH.data(),
                                   gdQ.data(), gdK.data(), gdV.data(), work.data());
  }
  const Mat<T> H_cpu = stack(H), dQ_cpu = stack(dQ), dK_cpu = stack(dK), dV_cpu = stack(dV);
  const Mat<T> H_gpu = to_host(gH, H_cpu.rows(), c.batch), dQ_gpu = to_host(gdQ, dQ_cpu.rows(), c.batch),
               dK_gpu = to_host(gdK, dK_cpu.rows(), c.batch), dV_gpu = to_host(gdV, dV_cpu.rows(), c.batch);
  const double k = c.d_h + c.d_v + 2 * std::max(c.n, c.m);
  if (gpu_mask == c.mask) {
    EXPECT_AGREE(H_cpu, H_gpu, k);
    EXPECT_AGREE(dQ_cpu, dQ_gpu, k);
    EXPECT_AGREE(dK_cpu, dK_gpu, k);
    EXPECT_AGREE(dV_cpu, dV_gpu, k);
  } else {
    EXPECT_DISAGREE(H_cpu, H_gpu);
  }
}

TYPED_TEST(GpuOps, AttentionHead) {
  for (const AttentionCase& c : attention_cases) check_attention<TypeParam>(true, c, c.mask);
}

TYPED_TEST(GpuOps, LinearAttention) {
  for (const AttentionCase& c : attention_cases) check_attention<TypeParam>(false, c, c.mask);
}

// Control: the causal case computed bidirectionally on the GPU.
TYPED_TEST(GpuOps, AttentionWrongMaskDisagrees) {
  const AttentionCase causal = attention_cases[0];
  check_attention<TypeParam>(true, causal, gpu::Mask::bidirectional);
  check_attention<TypeParam>(false, causal, gpu::Mask::bidirectional);
}

// ---- Normalization ---------------------------------------------------------------------

// LayerNorm and RMSNorm with gain; reductions over d = 24 features per row
// and n = 33 rows for dg: k = 2d + n. Control: RMSNorm where LayerNorm is meant
// (rows with a mean of about 1, so centering matters).
TYPED_TEST(GpuOps, Normalization) {
  using T = TypeParam;
  const int n = 33, d = 24;
  const T eps = T(1e-5);
  const Mat<T> X = (draw<T>(n, d, 1).array() + T(1)).matrix(), g = draw<T>(1, d, 2), dY = draw<T>(n, d, 3),
               dX0 = draw<T>(n, d, 4), dg0 = draw<T>(1, d, 5);
  for (gpu::Centering centering : {gpu::Centering::mean, gpu::Centering::none}) {
    eng::Tape<T> tape;
    eng::Var<T> x = tape.variable(X), gain = tape.variable(g);
    eng::Var<T> Y = centering == gpu::Centering::mean ? eng::layer_norm(x, gain, eps) : eng::rms_norm(x, gain, eps);
    tape.backward(Y, dY);
    const Mat<T> expected_dX = dX0 + x.grad(), expected_dg = dg0 + gain.grad();

    gpu::DeviceBuffer<T> gX = to_device(X), gg = to_device(g), gY(X.size()), gN(X.size()), gr(n),
                         gdY = to_device(dY), gdX = to_device(dX0), gdg = to_device(dg0);
    gpu::normalize_rows(n, d, gX.data(), gg.data(), eps, centering, gY.data(), gN.data(), gr.data());
    gpu::normalize_rows_backward(n, d, gdY.data(), gg.data(), gN.data(), gr.data(), centering, gdX.data(),
                                 gdg.data());
    const Mat<T> Y_gpu = to_host(gY, n, d), dX_gpu = to_host(gdX, n, d), dg_gpu = to_host(gdg, 1, d);
    EXPECT_AGREE(Y.value(), Y_gpu, 2 * d + n);
    EXPECT_AGREE(expected_dX, dX_gpu, 2 * d + n);
    EXPECT_AGREE(expected_dg, dg_gpu, 2 * d + n);
    if (centering == gpu::Centering::mean) {
      gpu::normalize_rows(n, d, gX.data(), gg.data(), eps, gpu::Centering::none, gY.data(), gN.data(), gr.data());
      const Mat<T> rms_instead = to_host(gY, n, d);
      EXPECT_DISAGREE(Y.value(), rms_instead);
    }
  }
}

// ---- Loss, clipping, AdamW -------------------------------------------------------------

// (1/N) Σ (P − T)² over N = 29·11 entries (k = N), dP += 2 dL (P − T)/N.
// Control: the loss of P against a target shifted by 1.
TYPED_TEST(GpuOps, MseLoss) {
  using T = TypeParam;
  const int n = 29, d = 11;
  const std::size_t N = std::size_t(n) * d;
  const Mat<T> P = draw<T>(n, d, 1), Y = draw<T>(n, d, 2), dP0 = draw<T>(n, d, 3);
  const T dL = T(1.7);
  eng::Tape<T> tape;
  eng::Var<T> p = tape.variable(P);
  eng::Var<T> L = eng::mse_loss(p, tape.constant(Y));
  tape.backward(L, Mat<T>::Constant(1, 1, dL));
  const Mat<T> expected_dP = dP0 + p.grad();

  gpu::DeviceBuffer<T> gP = to_device(P), gY = to_device(Y), gdP = to_device(dP0);
  const Mat<T> L_gpu = Mat<T>::Constant(1, 1, gpu::mse_loss(N, gP.data(), gY.data()));
  gpu::mse_loss_backward(N, gP.data(), gY.data(), dL, gdP.data());
  const Mat<T> dP_gpu = to_host(gdP, n, d);
  EXPECT_AGREE(L.value(), L_gpu, double(N));
  EXPECT_AGREE(expected_dP, dP_gpu, 1);
  gpu::DeviceBuffer<T> shifted = to_device(Mat<T>((Y.array() + T(1)).matrix()));
  const Mat<T> L_shifted = Mat<T>::Constant(1, 1, gpu::mse_loss(N, gP.data(), shifted.data()));
  EXPECT_DISAGREE(L.value(), L_shifted);
}

// Global norm over two gradients (k = 15·7 + 7 terms), scaled to max_norm when above it.
// Control: the gradients left unclipped.
TYPED_TEST(GpuOps, ClipGradNorm) {
  using T = TypeParam;
  eng::Parameter<T> W("W", draw<T>(15, 7, 1)), b("b", draw<T>(1, 7, 2));
  W.grad = draw<T>(15, 7, 3), b.grad = draw<T>(1, 7, 4);
  const Mat<T> W_grad = W.grad, b_grad = b.grad;
  const double max_norm = 2.0;
  const double norm_cpu = eng::clip_grad_norm<T>({&W, &b}, max_norm);
  ASSERT_GT(norm_cpu, 2 * max_norm) << "the draw must need clipping";

  gpu::DeviceBuffer<T> gW = to_device(W_grad), gb = to_device(b_grad);
  const double norm_gpu = gpu::clip_grad_norm<T>({{gW.data(), gW.size()}, {gb.data(), gb.size()}}, max_norm);
  const double k = 15 * 7 + 7;
  EXPECT_AGREE(Mat<T>::Constant(1, 1, T(norm_cpu)), Mat<T>::Constant(1, 1, T(norm_gpu)), k);
  const Mat<T> W_gpu = to_host(gW, 15, 7), b_gpu = to_host(gb, 1, 7);
  EXPECT_AGREE(W.grad, W_gpu, k);
  EXPECT_AGREE(b.grad, b_gpu, k);
  EXPECT_DISAGREE(W.grad, W_grad);
}

// Three AdamW steps with weight decay on W and not on b (elementwise, k = 3
// steps). Control: the GPU counting steps from 2, which changes the bias
// corrections 1/(1 − β^t).
TYPED_TEST(GpuOps, AdamW) {
  using T = TypeParam;
  const eng::AdamWConfig config{.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
  const double lr = 0.05;
  const int steps = 3;
  for (int offset : {0, 1}) {
    eng::Parameter<T> W("W", draw<T>(9, 5, 1)), b("b", draw<T>(1, 5, 2), false);
    eng::AdamW<T> adamw(config);
    gpu::DeviceBuffer<T> gW = to_device(W.value), gb = to_device(b.value), mW(W.value.size()), vW(W.value.size()),
                         mb(b.value.size()), vb(b.value.size());
    mW.zero(), vW.zero(), mb.zero(), vb.zero();
    for (int t = 1; t <= steps; ++t) {
      W.grad = draw<T>(9, 5, 10 + t), b.grad = draw<T>(1, 5, 20 + t);
      gpu::DeviceBuffer<T> gdW = to_device(W.grad), gdb = to_device(b.grad);
      adamw.step({&W, &b}, lr);
      gpu::AdamWStep step{lr, config.beta1, config.beta2, config.eps, config.weight_decay, t + offset, true};
      gpu::adamw_update(gW.size(), step, gW.data(), gdW.data(), mW.data(), vW.data());
      step.decay = false;
      gpu::adamw_update(gb.size(), step, gb.data(), gdb.data(), mb.data(), vb.data());
    }
    const Mat<T> W_gpu = to_host(gW, 9, 5), b_gpu = to_host(gb, 1, 5);
    if (offset == 0) {
      const Mat<T> mW_gpu = to_host(mW, 9, 5), vW_gpu = to_host(vW, 9, 5);
      EXPECT_AGREE(W.value, W_gpu, steps);
      EXPECT_AGREE(b.value, b_gpu, steps);
      EXPECT_AGREE(adamw.m.at("W"), mW_gpu, steps);
      EXPECT_AGREE(adamw.v.at("W"), vW_gpu, steps);
    } else {
      EXPECT_DISAGREE(W.value, W_gpu);
    }
  }
}

// ---- The skip MLP of qwe.exp8.4 ---------------------------------------------------------

// The same steps on the CPU with the engine: f = X + GELU(X W1) W2 against
// f* = X R + GELU(X U) V, loss Σ‖f − f*‖²/Σ‖f*‖² = (N/Σ‖f*‖²)·mse, clipping, AdamW.
// `skip = false` drops the X of f: the control.
struct CpuSkipMlp {
  Mat<float> R, U, V;
  eng::Parameter<float> W1, W2;
  eng::AdamW<float> adamw;
  gpu::SkipMlpOptions options;
  bool skip = true;

  Mat<float> target(const Mat<float>& X) const {
    eng::Tape<float> tape;
    eng::Var<float> x = tape.constant(X);
    return eng::add(eng::matmul(x, tape.constant(R)),
                    eng::matmul(eng::gelu(eng::matmul(x, tape.constant(U))), tape.constant(V)))
        .value();
  }

  float step(const Mat<float>& X, float lr) {
    const Mat<float> Fs = target(X);
    const double S = Fs.cast<double>().squaredNorm();
    eng::Tape<float> tape;
    eng::Var<float> x = tape.constant(X);
    eng::Var<float> mlp = eng::matmul(eng::gelu(eng::matmul(x, tape.parameter(W1))), tape.parameter(W2));
    eng::Var<float> F = skip ? eng::add(x, mlp) : mlp;
    eng::Var<float> loss = eng::scale(eng::mse_loss(F, tape.constant(Fs)), float(double(Fs.size()) / S));
    eng::zero_grad<float>({&W1, &W2});
    tape.backward(loss);
    if (options.clip_norm > 0) eng::clip_grad_norm<float>({&W1, &W2}, options.clip_norm);
    adamw.step({&W1, &W2}, lr);
    return loss.value()(0, 0);
  }
};

TEST(GpuSkipMlp, TrainerAgreesWithEngine) {
  if (!device_status().available) GTEST_SKIP() << device_status().description;
  using T = float;
  const int d = 8, r = 16, r_star = 12, batch = 64, steps = 3;
  const float lr = 0.02f;
  const gpu::SkipMlpOptions options{.batch = batch, .weight_decay = 0.01f, .clip_norm = 0.5f};
  const Mat<float> W1 = draw<float>(d, r, 1, 1 / std::sqrt(d)), W2 = draw<float>(r, d, 2, 1 / std::sqrt(r)),
                   R = draw<float>(d, d, 3, 1 / std::sqrt(d)), U = draw<float>(d, r_star, 4, 1 / std::sqrt(d)),
                   V = draw<float>(r_star, d, 5, 1 / std::sqrt(r_star));
  const eng::AdamWConfig config{.beta1 = options.beta1, .beta2 = options.beta2, .eps = options.eps,
                                .weight_decay = options.weight_decay};
  CpuSkipMlp cpu{R, U, V, {"W1", W1}, {"W2", W2}, eng::AdamW<float>(config), options};
  CpuSkipMlp no_skip{R, U, V, {"W1", W1}, {"W2", W2}, eng::AdamW<float>(config), options, false};
  gpu::SkipMlpTrainer trainer(W1, W2, R, U, V, options);
  // Reductions: the loss over batch·d entries, dW over the batch, dH over d, dZ·X over batch.
  const double k = batch * d + 2 * batch + d;
  for (int t = 0; t < steps; ++t) {
    const Mat<float> X = draw<float>(batch, d, 100 + t);
    const Mat<float> loss_cpu = Mat<float>::Constant(1, 1, cpu.step(X, lr));
    const Mat<float> loss_no_skip = Mat<float>::Constant(1, 1, no_skip.step(X, lr));
    const Mat<float> loss_gpu = Mat<float>::Constant(1, 1, trainer.step(X, lr));
    EXPECT_AGREE(loss_cpu, loss_gpu, k) << "step " << t;
    EXPECT_DISAGREE(loss_no_skip, loss_gpu) << "step " << t;
  }
  Mat<float> W1_gpu, W2_gpu;
  trainer.weights(W1_gpu, W2_gpu);
  EXPECT_AGREE(cpu.W1.value, W1_gpu, k);
  EXPECT_AGREE(cpu.W2.value, W2_gpu, k);
  EXPECT_DISAGREE(no_skip.W1.value, W1_gpu);

  // Evaluation over 150 rows: two full batches and a partial one.
  const Mat<float> X = draw<float>(150, d, 200);
  const gpu::SkipMlpSums sums = trainer.evaluate(X);
  const Mat<float> Fs = cpu.target(X);
  const Mat<float> F = X + (eng::normal_cdf<float>(X * W1_gpu).cwiseProduct(X * W1_gpu)) * W2_gpu;
  double error = 0, target = 0, cosine = 0;
  for (Eigen::Index i = 0; i < X.rows(); ++i) {
    const Eigen::RowVectorXd f = F.row(i).cast<double>(), g = Fs.row(i).cast<double>();
    error += (f - g).squaredNorm(), target += g.squaredNorm(), cosine += f.dot(g) / (f.norm() * g.norm());
  }
  const double k_eval = 2 * d + r;  // X W1 (d), H W2 (r), the row sums (d)
  EXPECT_AGREE(Mat<float>::Constant(1, 1, float(error)), Mat<float>::Constant(1, 1, float(sums.squared_error)), k_eval);
  EXPECT_AGREE(Mat<float>::Constant(1, 1, float(target)), Mat<float>::Constant(1, 1, float(sums.squared_target)), k_eval);
  EXPECT_AGREE(Mat<float>::Constant(1, 1, float(cosine)), Mat<float>::Constant(1, 1, float(sums.cosine)), k_eval);
}

#else  // built without nvcc

TEST(GpuOps, NotBuilt) { GTEST_SKIP() << device_status().description; }

#endif

}  // namespace
