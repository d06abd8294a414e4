// Per-head views of the model's row-major activations. A tensor of `count` heads side by side,
// each `stride` columns apart, head h's own columns starting at `at` within its stride:
//   head h of row r = data + r · count · stride + h · stride + at   (leading dimension count · stride)
// so a head, or a column block inside every head (MLA's rotary part), is a view (engine/linear.hpp)
// with its leading dimension, and no caller computes an offset by hand.
#pragma once

#include <cstddef>

#include "engine/backend.hpp"
#include "engine/linear.hpp"

namespace qkvlab::lm {

template <class S>
struct Heads {
  S* data;
  int count;   // heads
  int stride;  // columns from one head to the next
  int at = 0;  // the viewed columns' offset inside a head

  int ld() const { return count * stride; }
  engine::View<S> head(int h, std::size_t row = 0) const {
    return {data + row * std::size_t(ld()) + std::size_t(h) * stride + at, ld()};
  }
  Heads from_row(std::size_t row) const { return {data + row * std::size_t(ld()), count, stride, at}; }
};

// y = alpha x + beta y over `rows` rows of `width` columns of two views.
template <class S>
void axpby(engine::Backend<S>& be, int rows, int width, S alpha, engine::View<const S> x, S beta, engine::View<S> y) {
  be.axpby(rows, width, alpha, x.data, x.ld, beta, y.data, y.ld);
}
template <class S>
void axpby(engine::Backend<S>& be, int rows, int width, S alpha, engine::View<S> x, S beta, engine::View<S> y) {
  be.axpby(rows, width, alpha, x.data, x.ld, beta, y.data, y.ld);
}

}  // namespace qkvlab::lm
