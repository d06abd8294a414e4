// GPU against CPU for what remains of gpu/ops.hpp (the column-major products
// that bench/gpu_bench.cpp uses): gemm and
// gemm_strided_batched against Eigen, in float and double. The backend the
// models run on (gpu/cuda_backend.hpp) is tested kernel by kernel against the
// CPU backend in tests/lm_gpu_test.cpp, which took over this file's tests of
// the operations that moved there (bias, GELU, attention, normalization,
// clipping, AdamW); tests/transfer_test.cpp's TransferCuda.* took over the
// skip-MLP trainer's.
//
// Tolerance. Both sides compute the same formulas in the same precision T
// (unit roundoff u), in different summation orders. A k-term sum of
// zero-mean random terms carries a rounding error of about u·sqrt(k) relative
// to its size (the probabilistic bound of Higham and Mary, 2019), and so does
// each side. A test passes when
//   rel_err = ‖cpu − gpu‖_F / ‖cpu‖_F ≤ 16 · u · sqrt(k),
// the 16 covering two independent errors of a few u·sqrt(k) each. Every test
// has a negative control (a wrong transpose, a reused operand) that must
// disagree by rel_err ≥ 1e-3.
//
// Without a CUDA device every GPU test skips with device_status().description;
// GpuDevice.* always run.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "engine/make_backend.hpp"
#include "engine/rng.hpp"
#include "gpu/backend.hpp"
#include "gpu/device.hpp"
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

// Without a device the CUDA backend is refused with one line naming the reason (no crash); with
// one it runs.
TEST(GpuDevice, BackendNeedsADevice) {
  if (!device_status().available) {
    try {
      gpu::make_cuda_backend();
      FAIL() << "the CUDA backend was made without a CUDA device";
    } catch (const std::runtime_error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message, "no CUDA device can be used (" + device_status().description + ")");
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
    try {  // the backend commands make (engine/make_backend.hpp) is gpu/'s, which registered itself
      eng::make_backend(eng::Device::cuda, 1);
      FAIL() << "engine::make_backend made a CUDA backend without a CUDA device";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "no CUDA device can be used (" + device_status().description + ")");
    }
  } else {
    const auto backend = gpu::make_cuda_backend();
    EXPECT_EQ(backend->device(), eng::Device::cuda);
    EXPECT_EQ(eng::make_backend(eng::Device::cuda, 1)->device(), eng::Device::cuda);
  }
}

// gpu/backend.cpp registers the CUDA backend with engine/make_backend.hpp at static
// initialization: engine's view of CUDA is gpu/'s device status. (The control, a program without
// gpu/, is engine_buffer_test's BackendFactory.WithoutGpuCudaIsRefused: "built without gpu/".)
TEST(GpuDevice, RegisteredWithTheEngine) {
  EXPECT_EQ(eng::cuda_available(), device_status().available);
  EXPECT_EQ(eng::cuda_description(), device_status().description);
  EXPECT_EQ(eng::make_backend(eng::Device::cpu, 1)->device(), eng::Device::cpu);
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

#else  // built without nvcc

TEST(GpuOps, NotBuilt) { GTEST_SKIP() << device_status().description; }

#endif

}  // namespace
