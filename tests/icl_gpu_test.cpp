// The icl theory Monte Carlo on a CUDA device (gpu/icl_theory.hpp,
// synthetic/icl/theory_gpu.cpp) against the CPU path.
//
// Tolerance. Both paths estimate from the same prompts (drawn on the host from
// the same streams) with the same formulas in double; they differ in rounding
// only: Gauss–Jordan against Cholesky for (X Xᵀ + σ² I)⁻¹, a Jacobi SVD against
// Eigen's for c_a, and other summation orders. Per prompt that is a few ulps
// times the conditioning of X Xᵀ + σ² I and of ΛY Xᵀ (below 1e3 at these sizes),
// so every value must agree to
//   |gpu − cpu| ≤ 1e-9 (|cpu| + C),
// C the Bayes loss (the scale of every loss here): a margin of about 1e3 over
// that estimate. A standard error is sqrt(variance / N), the variance a
// difference of sums of squares of features of size up to S (the largest
// estimate of the run); its rounding error, about u sqrt(N) S², is all there is
// when the true variance is 0 (the gap at a = 0 has an influence function that
// vanishes prompt by prompt), and the square root turns it into sqrt(u) S / N^¼.
// So a standard error must agree to
//   |gpu − cpu| ≤ 1e-9 (|cpu| + C) + sqrt(1e3 u) S / sqrt(N),
// the second term about 5 times that worst case at N = 1300. Set from this
// reasoning. Under the CPU emulation (scripts/cuda_emulation) the worst ratio
// to the tolerance was 0.059 (the gap's standard error at a = 0, d = 3, where
// the true variance is 0), and 0.008 or less in every other case. Control:
// another seed is off by more than 1e3 times the tolerance (1e7 under emulation).
//
// Without a CUDA device the device tests skip, naming the reason; the others run.
#include "core/errors.hpp"
#include "core/rng.hpp"
#include "gpu/device.hpp"
#include "synthetic/icl/theory.hpp"
#include "tests/icl_theory_numbers.hpp"

#ifdef QKVLAB_HAVE_CUDA
#include "gpu/device_buffer.hpp"
#include "gpu/icl_theory.hpp"
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <vector>

namespace {

using namespace qkvlab;
using namespace qkvlab::icl;
using qkvlab::test_support::all_estimates;
using qkvlab::test_support::all_numbers;

#define SKIP_WITHOUT_DEVICE() \
  if (!gpu::device_status().available) GTEST_SKIP() << gpu::device_status().description

Task task_with(double w0_scale, int d, int n) {
  Task t{d, n, 0.5, {}};
  t.W0 = w0_scale * MatD::Identity(d, d);
  return t;
}

// Largest ratio of |gpu − cpu| to its tolerance (above) over every estimate and standard error.
double worst_disagreement(const Theory& cpu, const Theory& gpu) {
  const std::vector<Estimate> a = all_estimates(cpu), b = all_estimates(gpu);
  double S = 0;
  for (const Estimate& e : a) S = std::max(S, std::abs(e.value));
  const double C = cpu.C.value, n = double(cpu.options.prompts), u = 1.1102230246251565e-16;
  double worst = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    worst = std::max(worst, std::abs(b[k].value - a[k].value) / (1e-9 * (std::abs(a[k].value) + C)));
    const double se_tolerance = 1e-9 * (a[k].se + C) + std::sqrt(1e3 * u) * S / std::sqrt(n);
    worst = std::max(worst, std::abs(b[k].se - a[k].se) / se_tolerance);
  }
  return worst;
}

TEST(IclGpu, WithoutADeviceCudaThrowsTheReason) {
  if (gpu::device_status().available) GTEST_SKIP() << "a CUDA device is present";
  TheoryOptions o{1000, 1, 1};
  o.cuda = true;
  try {
    estimate_theory(task_with(0, 4, 16), o);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), gpu::device_status().description);
  }
}

// Kept (pass 1's statistics stay on the device) and redrawn (pass 2 draws the prompts
// again), W_0 = 0 and W_0 ≠ 0, odd and even d, a last chunk that is not full.
// (Plain tests, one per task: CMake's test discovery would put a parameter's bytes in the test names.)
void expect_agreement(double w0, int d, int n) {
  const Task task = task_with(w0, d, n);
  TheoryOptions cpu{1300, 5, 2}, gpu = cpu, gpu_redrawn = cpu, other = cpu;
  gpu.cuda = gpu_redrawn.cuda = other.cuda = true;
  gpu_redrawn.cache_bytes = 0;
  other.seed = 6;
  const Theory reference = estimate_theory(task, cpu);
  const double kept = worst_disagreement(reference, estimate_theory(task, gpu)),
               redrawn = worst_disagreement(reference, estimate_theory(task, gpu_redrawn)),
               control = worst_disagreement(reference, estimate_theory(task, other));
  std::printf("d = %d, n = %d, W0 = %g I: worst |gpu - cpu| / tolerance %.3g (kept), %.3g (redrawn); control %.3g\n", d,
              n, w0, kept, redrawn, control);
  EXPECT_LE(kept, 1);
  EXPECT_LE(redrawn, 1);
  EXPECT_GE(control, 1e3);
}

TEST(IclGpuAgreement, D1N3W0Zero) { SKIP_WITHOUT_DEVICE(); expect_agreement(0, 1, 3); }
TEST(IclGpuAgreement, D3N5W0Is2I) { SKIP_WITHOUT_DEVICE(); expect_agreement(2, 3, 5); }
TEST(IclGpuAgreement, D4N16W0Zero) { SKIP_WITHOUT_DEVICE(); expect_agreement(0, 4, 16); }
TEST(IclGpuAgreement, D4N16W0Is3I) { SKIP_WITHOUT_DEVICE(); expect_agreement(3, 4, 16); }
TEST(IclGpuAgreement, D7N9W0IsI) { SKIP_WITHOUT_DEVICE(); expect_agreement(1, 7, 9); }
TEST(IclGpuAgreement, D16N20W0Zero) { SKIP_WITHOUT_DEVICE(); expect_agreement(0, 16, 20); }

TEST(IclGpu, SameSeedSameNumbersForOneAndTwoHostThreads) {
  SKIP_WITHOUT_DEVICE();
  TheoryOptions one{1500, 3, 1}, two = one;
  one.cuda = two.cuda = true;
  two.threads = 2;
  EXPECT_EQ(all_numbers(estimate_theory(task_with(3, 4, 16), one)), all_numbers(estimate_theory(task_with(3, 4, 16), two)));
}

TEST(IclGpu, DimensionAboveTheKernelsLimitIsAUsageError) {
  SKIP_WITHOUT_DEVICE();
  TheoryOptions o{100, 1, 1};
  o.cuda = true;
  EXPECT_THROW(estimate_theory(task_with(0, 65, 70), o), UsageError);
}

#ifdef QKVLAB_HAVE_CUDA

// (A + s I)⁻¹ of a batch of Gram matrices against Eigen, to 64 u κ; control: a matrix
// that is not positive definite is counted as a failure, and only it.
TEST(IclGpu, SpdInverseMatchesEigenAndCountsFailures) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(11, "icl_gpu/spd_inverse");
  for (const int d : {1, 2, 5, 16, 64}) {
    const int batch = 3;
    const double shift = 0.25;
    std::vector<MatD> A;
    std::vector<double> host;
    for (int b = 0; b < batch; ++b) {
      const MatD X = rng.gaussian(d, d + 3);
      A.push_back(X * X.transpose());
      host.insert(host.end(), A.back().data(), A.back().data() + A.back().size());
    }
    A[2](d - 1, d - 1) = -1.0 - shift - A[2].row(d - 1).cwiseAbs().sum();  // not positive definite
    std::copy(A[2].data(), A[2].data() + A[2].size(), host.begin() + 2 * d * d);
    gpu::DeviceBuffer<double> in(host.size()), out(host.size());
    in.upload(host.data(), host.size());
    EXPECT_EQ(gpu::icl::spd_inverse_batched(batch, d, shift, in.data(), out.data()), 1) << "d = " << d;
    std::vector<double> inv(host.size());
    out.download(inv.data(), inv.size());
    for (int b = 0; b < 2; ++b) {
      const MatD M = A[std::size_t(b)] + shift * MatD::Identity(d, d);
      const MatD expected = M.inverse();
      const MatD got = Eigen::Map<const MatD>(inv.data() + b * d * d, d, d);
      const double kappa = M.norm() * expected.norm();
      EXPECT_LE((got - expected).norm() / expected.norm(), 64 * 1.1102230246251565e-16 * kappa) << "d = " << d;
    }
  }
}

#endif

}  // namespace
