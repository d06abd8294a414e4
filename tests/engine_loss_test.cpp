// The CPU backend's softmax cross-entropy (engine/kernels/cross_entropy.hpp) at logits far beyond
// exp's range: loss[n] = logsumexp(z_n) − z_n[y_n] and dz_n = scale (softmax(z_n) − onehot(y_n))
// are shift-invariant, so a row c + a (c = ±2^16 in float, ±2^40 in double, a small integers, every
// sum exact) has the loss and gradient of the small row a, computed here in long double. Control: the
// formula without the maximum subtracted overflows on the same rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/buffer.hpp"
#include "engine/cpu_backend.hpp"

namespace {

using namespace qkvlab;

struct Rows {
  int N = 0, V = 5;
  std::vector<double> small;  // a, (N, V)
  std::vector<double> shift;  // c per row
  std::vector<std::int32_t> targets;
};

// Rows far above and below exp's range, one with a spread of 2c, and one not predicted (target −1).
Rows huge_rows(double c) {
  Rows r;
  auto row = [&](double shift, std::vector<double> a, std::int32_t y) {
    r.small.insert(r.small.end(), a.begin(), a.end()), r.shift.push_back(shift), r.targets.push_back(y), ++r.N;
  };
  row(c, {0, -1, -3, 2, 1}, 3);
  row(c, {0, -1, -3, 2, 1}, 2);
  row(-c, {4, 0, -2, 1, 1}, 1);
  row(0, {c, -c, -c, -c, -c}, 0);   // the target is the maximum: loss log(1 + 4e^{−2c}) = 0
  row(0, {c, -c, -c, -c, -c}, 4);   // the target is 2c below it: loss 2c
  row(c, {1, 2, 3, 4, 5}, -1);      // not predicted: loss 0, gradient 0
  return r;
}

// loss and dz of the small rows (shift-invariance), in long double.
void reference(const Rows& r, double scale, std::vector<long double>& loss, std::vector<long double>& grad) {
  loss.assign(r.N, 0), grad.assign(std::size_t(r.N) * r.V, 0);
  for (int n = 0; n < r.N; ++n) {
    if (r.targets[n] < 0) continue;
    const double* a = &r.small[std::size_t(n) * r.V];
    long double m = a[0], sum = 0;
    for (int v = 1; v < r.V; ++v) m = std::max<long double>(m, a[v]);
    for (int v = 0; v < r.V; ++v) sum += std::exp((long double)a[v] - m);
    loss[n] = m + std::log(sum) - a[r.targets[n]];
    for (int v = 0; v < r.V; ++v)
      grad[std::size_t(n) * r.V + v] = scale * (std::exp((long double)a[v] - m) / sum - (v == r.targets[n] ? 1 : 0));
  }
}

template <class S>
void check_huge_logits(double c, double tolerance) {
  const Rows r = huge_rows(c);
  std::vector<S> logits(r.small.size());
  for (std::size_t i = 0; i < logits.size(); ++i) {
    logits[i] = S(r.shift[i / r.V] + r.small[i]);
    ASSERT_EQ(double(logits[i]) - r.shift[i / r.V], r.small[i]) << "the test's rows must be exact";
  }
  std::vector<long double> loss_ref, grad_ref;
  const double scale = 0.25;
  reference(r, scale, loss_ref, grad_ref);
  engine::CpuBackend<S> be(1);
  for (bool in_place : {false, true}) {
    engine::Buffer<S> z(be, logits.size()), dz(be, logits.size()), loss(be, std::size_t(r.N));
    engine::Buffer<std::int32_t> y(be, std::size_t(r.N));
    z.upload(logits), y.upload(r.targets);
    S* out = in_place ? z.data() : dz.data();
    be.cross_entropy(r.N, r.V, z.data(), y.data(), loss.data(), S(scale), out);
    const std::vector<S> l = loss.to_host(), g = in_place ? z.to_host() : dz.to_host();
    for (int n = 0; n < r.N; ++n) {
      ASSERT_TRUE(std::isfinite(double(l[n]))) << "row " << n;
      EXPECT_LE(std::abs(double(l[n]) - double(loss_ref[n])), tolerance * std::max(1.0, double(loss_ref[n])))
          << "row " << n << (in_place ? " (in place)" : "");
    }
    for (std::size_t i = 0; i < g.size(); ++i)
      EXPECT_LE(std::abs(double(g[i]) - double(grad_ref[i])), tolerance) << "entry " << i;
  }
  // Control: logsumexp without the maximum subtracted overflows (or loses everything) on these rows.
  for (int n = 0; n < 3; ++n) {
    double sum = 0;
    for (int v = 0; v < r.V; ++v) sum += std::exp(double(logits[std::size_t(n) * r.V + v]));
    const double naive = std::log(sum) - double(logits[std::size_t(n) * r.V + r.targets[n]]);
    EXPECT_FALSE(std::isfinite(naive) && std::abs(naive - double(loss_ref[n])) < 1) << "row " << n;
  }
}

TEST(EngineLoss, CrossEntropyIsExactAtLogitsBeyondExpsRangeFloat) { check_huge_logits<float>(65536.0, 1e-6); }

TEST(EngineLoss, CrossEntropyIsExactAtLogitsBeyondExpsRangeDouble) {
  check_huge_logits<double>(1099511627776.0, 1e-14);
}

}  // namespace
