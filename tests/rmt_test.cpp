// core/random_matrix.hpp: the Marchenko–Pastur law in closed form, the
// Kolmogorov–Smirnov distance, σ_max by Lanczos (Spectra) and the metric-defect
// factor s(u) of qwe.sec8.3.1.
#include "core/normalize.hpp"
#include "core/random_matrix.hpp"
#include "core/rng.hpp"

#include <boost/math/quadrature/tanh_sinh.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

namespace qkvlab {
namespace {

TEST(MarchenkoPastur, DistributionFunctionAtKnownPoints) {
  for (double v : {0.25, 1.0, 3.0}) {
    EXPECT_EQ(mp_cdf(0, v), 0.0);
    EXPECT_EQ(mp_cdf(-1, v), 0.0);
    EXPECT_DOUBLE_EQ(mp_cdf(4 * v, v), 1.0);
    EXPECT_EQ(mp_cdf(5 * v, v), 1.0);
    // At x = 2v: θ = π/4, F = (π/2 + 1)/π.
    EXPECT_NEAR(mp_cdf(2 * v, v), 0.5 + 1 / std::numbers::pi, 1e-15);
  }
}

TEST(MarchenkoPastur, DistributionFunctionIsMonotoneAndIntegratesTheDensity) {
  const double v = 0.7;
  boost::math::quadrature::tanh_sinh<double> integrator;
  const double total = integrator.integrate([&](double x) { return mp_density(x, v); }, 0.0, 4 * v);
  EXPECT_NEAR(total, 1.0, 1e-10);
  double previous = 0;
  for (int i = 1; i <= 200; ++i) {
    const double x = 4 * v * i / 200.0, F = mp_cdf(x, v);
    EXPECT_GE(F, previous) << x;
    previous = F;
    if (i % 20 == 0 && i < 200) {
      const double integral = integrator.integrate([&](double t) { return mp_density(t, v); }, 0.0, x);
      EXPECT_NEAR(F, integral, 1e-10) << x;
    }
  }
}

TEST(KolmogorovSmirnov, DistanceOfKnownSamples) {
  // Uniform on [0, 1]: samples at the midpoints (i + 1/2)/n are at distance 1/(2n).
  std::vector<double> mid;
  for (int i = 0; i < 10; ++i) mid.push_back((i + 0.5) / 10);
  const auto uniform = [](double x) { return std::clamp(x, 0.0, 1.0); };
  EXPECT_NEAR(ks_distance(mid, uniform), 0.05, 1e-15);
  // All samples at 0: the empirical function jumps to 1 where F is 0.
  EXPECT_NEAR(ks_distance(std::vector<double>(5, 0.0), uniform), 1.0, 1e-15);
}

TEST(TopSingularValue, LanczosAgreesWithJacobiSvd) {
  Rng rng(7, "top singular value");
  for (int d : {3, 64, 200}) {
    const MatD A = rng.gaussian(d, d, std::sqrt(0.25 / d));
    const auto top = top_singular_value(A);
    ASSERT_TRUE(top.ok) << d;
    const double exact = Eigen::JacobiSVD<MatD>(A).singularValues()(0);
    EXPECT_NEAR(top.sigma, exact, 1e-10 * exact) << d;
  }
}

TEST(SquaredSingularValues, AreTheSquaresOfJacobiSvds) {
  Rng rng(7, "squared singular values");
  const MatD A = rng.gaussian(40, 40, 1.0);
  const auto x = squared_singular_values(A);
  const VecD sv = Eigen::JacobiSVD<MatD>(A).singularValues();  // descending
  ASSERT_EQ(x.size(), 40u);
  for (int i = 0; i < 40; ++i) EXPECT_NEAR(x[39 - i], sv(i) * sv(i), 1e-12 * sv(0) * sv(0)) << i;
}

TEST(DefectScale, IsTheRatioOfRadialFactors) {
  Rng rng(7, "defect scale");
  const int d = 12;
  const VecD sigma = rng.gaussian(d, 1).col(0).cwiseAbs();
  for (double scale : {1e-4, 1.0, 1e4}) {
    const VecD u = rng.gaussian(d, 1).col(0) * scale;
    const double s = defect_scale<double>(sigma, u, 1.0);
    const VecD Su = sigma.cwiseProduct(u);
    EXPECT_NEAR(s, rms_radial<double>(Su.norm(), d, 1.0) / rms_radial<double>(u.norm(), d, 1.0), 1e-14 * s);
    // R(Σu) = s(u) Σ R(u), and R(x) = ρ(‖x‖) x.
    const VecD lhs = rms_norm<double>(MatD(Su), 1.0).col(0);
    const VecD rhs = s * sigma.cwiseProduct(rms_norm<double>(MatD(u), 1.0).col(0));
    EXPECT_LE((lhs - rhs).norm(), 1e-14 * lhs.norm()) << scale;
    EXPECT_NEAR(rms_radial<double>(u.norm(), d, 1.0) * u.norm(),
                rms_norm<double>(MatD(u), 1.0).col(0).norm(), 1e-14 * std::sqrt(double(d)));
  }
}

}  // namespace
}  // namespace qkvlab
