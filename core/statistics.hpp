// The one mean-with-standard-error type (`Estimate`), and the mean, sample
// standard deviation and standard error of independent samples, accumulated by
// Welford's update (numerically stable; a variance is never clamped: a negative
// one cannot arise). With one sample the standard deviation and error are NaN
// (undefined), reported as null.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace qkvlab {

// A mean (or a smooth function of means) and its standard error.
struct Estimate {
  double value = 0, se = 0;
};

// A sample's summary: the mean as `value` with its standard error, the sample
// standard deviation and the number of samples.
struct Summary : Estimate {
  double std = 0;
  std::int64_t count = 0;
};

class RunningStats {
 public:
  void add(double x) {
    ++n_;
    const double delta = x - mean_;
    mean_ += delta / double(n_);
    m2_ += delta * (x - mean_);
  }
  std::int64_t count() const { return n_; }
  double mean() const { return n_ ? mean_ : std::numeric_limits<double>::quiet_NaN(); }
  double variance() const { return n_ > 1 ? m2_ / double(n_ - 1) : std::numeric_limits<double>::quiet_NaN(); }
  Summary summary() const {
    const double sd = std::sqrt(variance());
    Summary s;
    s.value = mean(), s.se = sd / std::sqrt(double(n_)), s.std = sd, s.count = n_;
    return s;
  }

 private:
  std::int64_t n_ = 0;
  double mean_ = 0, m2_ = 0;
};

inline Summary summarize(const std::vector<double>& samples) {
  RunningStats s;
  for (double x : samples) s.add(x);
  return s.summary();
}

}  // namespace qkvlab
