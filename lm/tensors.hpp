// A checkpoint's tensors as double matrices, for the transforms of whole models
// (lm/convert.hpp, lm/eliminate.hpp): a tensor of the layout is a (rows × cols)
// row-major matrix, a vector a (n × 1) one, read from and written (rounded) to
// float values in the layout's order and offsets (TensorsOf<double>: unrounded).
#pragma once

#include <Eigen/Dense>

#include <string>
#include <vector>

#include "engine/parameters.hpp"

namespace qkvlab::lm {

using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class V>
struct TensorsOf {
  const engine::ParameterLayout& layout;
  std::vector<V>& values;
  bool has(const std::string& name) const { return layout.find(name) != nullptr; }
  Matrix get(const std::string& name) const {
    const auto& s = layout.at(name);
    const Eigen::Index rows = s.shape[0], cols = s.shape.size() > 1 ? s.shape[1] : 1;
    return Eigen::Map<const Eigen::Matrix<V, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
               values.data() + s.offset, rows, cols).template cast<double>();
  }
  void put(const std::string& name, const Matrix& m) {
    const auto& s = layout.at(name);
    Eigen::Map<Eigen::Matrix<V, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(values.data() + s.offset, m.rows(),
                                                                                  m.cols()) = m.template cast<V>();
  }
};
using Tensors = TensorsOf<float>;  // a checkpoint's values

}  // namespace qkvlab::lm
