// engine/kernels/pattern_reduction.hpp's reduce_pattern_rows, compiled once with the CPU kernels'
// flags (engine/CMakeLists.txt).
#include "engine/kernels/pattern_reduction.hpp"

#include <cmath>

namespace qkvlab::engine::kernels {

namespace {

template <class S>
void reduce_rows(const S* P, std::size_t ld, int first, int rows, double* columns, double* mass, double* entropy) {
  for (int r = 0; r < rows; ++r) {
    const int t = first + r;
    const S* p = P + std::size_t(r) * ld;
    double m = 0, e = 0;
    for (int j = 0; j <= t; ++j) {
      const double x = double(p[j]);
      m += x;
      columns[j] += x;
      if (entropy && x != 0) e -= x * std::log(x);  // NaN stays NaN
    }
    mass[r] = m;
    if (entropy) entropy[r] = e;
  }
}

}  // namespace

void reduce_pattern_rows(const float* P, std::size_t ld, int first, int rows, double* columns, double* mass,
                         double* entropy) {
  reduce_rows(P, ld, first, rows, columns, mass, entropy);
}
void reduce_pattern_rows(const double* P, std::size_t ld, int first, int rows, double* columns, double* mass,
                         double* entropy) {
  reduce_rows(P, ld, first, rows, columns, mass, entropy);
}

}  // namespace qkvlab::engine::kernels
