#include "engine/gradcheck.hpp"

#include <cmath>

#include "engine/rng.hpp"

namespace qkvlab::engine {
namespace {

// φ(x) = Σ R ⊙ f(x), evaluated without recording gradients.
double contracted(const GradFunction& f, const std::vector<Mat<double>>& inputs, const Mat<double>& R) {
  Tape<double> tape;
  std::vector<Var<double>> leaves;
  for (const Mat<double>& x : inputs) leaves.push_back(tape.constant(x));
  return f(tape, leaves).value().cwiseProduct(R).sum();
}

}  // namespace

double gradcheck_rel_err(const GradFunction& f, const std::vector<Mat<double>>& inputs, double h,
                         std::uint64_t seed) {
  Tape<double> tape;
  std::vector<Var<double>> leaves;
  for (const Mat<double>& x : inputs) leaves.push_back(tape.variable(x));
  const Var<double> y = f(tape, leaves);
  Rng rng(seed);
  const Mat<double> R = normal_matrix<double>(y.rows(), y.cols(), 1.0, rng);
  tape.backward(y, R);

  double diff2 = 0, fd2 = 0;
  std::vector<Mat<double>> x = inputs;
  for (std::size_t k = 0; k < x.size(); ++k) {
    for (Eigen::Index e = 0; e < x[k].size(); ++e) {
      const double saved = x[k](e);
      x[k](e) = saved + h;
      const double plus = contracted(f, x, R);
      x[k](e) = saved - h;
      const double minus = contracted(f, x, R);
      x[k](e) = saved;
      const double fd = (plus - minus) / (2 * h);
      diff2 += std::pow(fd - leaves[k].grad()(e), 2);
      fd2 += fd * fd;
    }
  }
  return fd2 > 0 ? std::sqrt(diff2 / fd2) : std::sqrt(diff2);
}

}  // namespace qkvlab::engine
