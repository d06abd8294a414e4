#include "core/error_model.hpp"

#include <cmath>

namespace qkvlab {

std::optional<double> normalized_error(double rel_err, double u, double kappa) {
  const double e = rel_err / (u * kappa);
  if (!std::isfinite(rel_err) || !std::isfinite(kappa) || !std::isfinite(e)) return std::nullopt;
  return e;
}

std::optional<double> ladder_slope(const std::vector<LadderPoint>& points) {
  std::vector<double> x, y;
  for (const auto& p : points)
    if (p.rel_err > 0 && std::isfinite(p.rel_err)) {
      x.push_back(std::log(p.u));
      y.push_back(std::log(p.rel_err));
    }
  if (x.size() < 2) return std::nullopt;
  const double n = double(x.size());
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < x.size(); ++i) mx += x[i] / n, my += y[i] / n;
  double sxy = 0, sxx = 0;
  for (std::size_t i = 0; i < x.size(); ++i) sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx);
  if (sxx == 0) return std::nullopt;
  return sxy / sxx;
}

}  // namespace qkvlab
