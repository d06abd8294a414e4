// Column blocks: slice_cols takes columns [begin, begin + width) (head h of
// width d_h is slice_cols(X, h d_h, d_h)); concat_cols is [X_1 … X_k].
// Backward scatters each block's gradient back to its columns.
#pragma once

#include <vector>

#include "engine/tape.hpp"

namespace qkvlab::engine {

template <class S>
Var<S> slice_cols(Var<S> X, Eigen::Index begin, Eigen::Index width) {
  require(begin >= 0 && width >= 0 && begin + width <= X.cols(),
          "slice_cols: columns [" + std::to_string(begin) + ", " + std::to_string(begin + width) +
              ") outside 0.." + std::to_string(X.cols()));
  Tape<S>& tape = X.tape();
  Var<S> Y = tape.output(X.value().middleCols(begin, width), {X});
  tape.on_backward(Y, [X, Y, begin, width] { X.grad().middleCols(begin, width) += Y.grad(); });
  return Y;
}

template <class S>
Var<S> concat_cols(const std::vector<Var<S>>& blocks) {
  require(!blocks.empty(), "concat_cols: no blocks");
  const Eigen::Index n = blocks.front().rows();
  Eigen::Index width = 0;
  for (const Var<S>& B : blocks) {
    require(B.rows() == n, "concat_cols: blocks have different row counts");
    width += B.cols();
  }
  Mat<S> value(n, width);
  Eigen::Index at = 0;
  for (const Var<S>& B : blocks) {
    value.middleCols(at, B.cols()) = B.value();
    at += B.cols();
  }
  Tape<S>& tape = blocks.front().tape();
  Var<S> Y = tape.output(std::move(value), blocks);
  tape.on_backward(Y, [blocks, Y] {
    Eigen::Index at = 0;
    for (const Var<S>& B : blocks) {
      if (B.requires_grad()) B.grad() += Y.grad().middleCols(at, B.cols());
      at += B.cols();
    }
  });
  return Y;
}

}  // namespace qkvlab::engine
