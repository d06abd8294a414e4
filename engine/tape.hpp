// Reverse-mode differentiation on a tape of dense matrices.
//
// Design decision: every gradient accumulates with +=. A tape node's gradient
// starts at zero the first time a backward step touches it; a Parameter's
// gradient lives in the Parameter and keeps accumulating over any number of
// tapes until zero_grad() (optim.hpp). Gradient accumulation over
// micro-batches is therefore just several backward passes.
//
// Layout: Mat<S> is core's Mat<S>, Eigen's default column-major dynamic matrix. Rows are tokens or samples, columns are features: the
// row-vector convention of docs/math/conventions.md, X ∈ R^{n×d}, projections X W.
//
// A tape is built for one forward pass: each operation (ops/*.hpp) computes
// its value at once and records its backward step; backward() replays the
// steps in reverse. A tape runs backward() once and is then discarded.
#pragma once

#include "core/types.hpp"

#include <Eigen/Dense>
#include <cstddef>
#include <deque>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace qkvlab::engine {

using qkvlab::Mat;

// A trainable matrix that outlives tapes. `decay` says whether AdamW's weight
// decay applies to it (false for gains and biases).
template <class S>
struct Parameter {
  Parameter(std::string name_, Mat<S> value_, bool decay_ = true)
      : name(std::move(name_)),
        value(std::move(value_)),
        grad(Mat<S>::Zero(value.rows(), value.cols())),
        decay(decay_) {}

  std::string name;
  Mat<S> value;
  Mat<S> grad;
  bool decay;
};

// The parameters an optimizer or a checkpoint works on; names must be unique.
template <class S>
using Parameters = std::vector<Parameter<S>*>;

// Throws std::invalid_argument(message) unless `ok`: operations validate
// shapes at their boundary, so a mismatch is an error, not undefined behaviour.
inline void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}

template <class S>
class Tape;

// A handle to one matrix on a tape: its value and, if it requires one, its gradient.
template <class S>
class Var {
 public:
  Var() = default;

  Tape<S>& tape() const { return *tape_; }
  const Mat<S>& value() const { return tape_->value(id_); }
  Mat<S>& grad() const { return tape_->grad(id_); }
  bool requires_grad() const { return tape_->requires_grad(id_); }
  Eigen::Index rows() const { return value().rows(); }
  Eigen::Index cols() const { return value().cols(); }

 private:
  friend class Tape<S>;
  Var(Tape<S>* tape, std::size_t id) : tape_(tape), id_(id) {}

  Tape<S>* tape_ = nullptr;
  std::size_t id_ = 0;
};

template <class S>
class Tape {
 public:
  Tape() = default;
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  // Leaves. A constant has no gradient (data, targets); a variable has one
  // that stays on the tape (read it with grad() after backward); a parameter
  // leaf reads p.value and accumulates into p.grad.
  Var<S> constant(Mat<S> value) { return push(std::move(value), false, nullptr); }
  Var<S> variable(Mat<S> value) { return push(std::move(value), true, nullptr); }
  Var<S> parameter(Parameter<S>& p) {
    if (p.grad.rows() != p.value.rows() || p.grad.cols() != p.value.cols())
      p.grad = Mat<S>::Zero(p.value.rows(), p.value.cols());
    return push(Mat<S>(), true, &p);
  }

  // For operations: records an operation's value; it requires a gradient
  // when any of its inputs does.
  Var<S> output(Mat<S> value, std::initializer_list<Var<S>> inputs) {
    return push(std::move(value), any_requires_grad(inputs), nullptr);
  }
  Var<S> output(Mat<S> value, const std::vector<Var<S>>& inputs) {
    return push(std::move(value), any_requires_grad(inputs), nullptr);
  }

  // For operations: registers the backward step of the operation that
  // produced y. It runs during backward() only if a gradient reached y.
  void on_backward(Var<S> y, std::function<void()> step) {
    if (requires_grad(y.id_)) steps_.push_back({y.id_, std::move(step)});
  }

  // Seeds y's gradient with dy (same shape as y) and runs every recorded
  // backward step in reverse order.
  void backward(Var<S> y, const Mat<S>& dy) {
    require(dy.rows() == y.rows() && dy.cols() == y.cols(), "backward: seed gradient has the wrong shape");
    seed(y) += dy;
    replay();
  }

  // backward() for a scalar (1×1) loss, seeded with dL/dL = 1.
  void backward(Var<S> loss) {
    require(loss.rows() == 1 && loss.cols() == 1, "backward: the loss must be 1x1");
    seed(loss)(0, 0) += S(1);
    replay();
  }

  const Mat<S>& value(std::size_t id) const {
    const Node& n = nodes_[id];
    return n.param ? n.param->value : n.value;
  }

  // The gradient of node id, zero-initialized on first use.
  Mat<S>& grad(std::size_t id) {
    Node& n = nodes_[id];
    n.grad_reached = true;
    if (n.param) return n.param->grad;
    if (n.grad.size() == 0) n.grad = Mat<S>::Zero(n.value.rows(), n.value.cols());
    return n.grad;
  }

  bool requires_grad(std::size_t id) const { return nodes_[id].requires_grad; }

 private:
  struct Node {
    Mat<S> value;
    Mat<S> grad;
    Parameter<S>* param;
    bool requires_grad;
    bool grad_reached;
  };
  struct Step {
    std::size_t output;
    std::function<void()> run;
  };

  Mat<S>& seed(Var<S> y) {
    require(!replayed_, "backward: a tape runs backward once; build a new tape for the next pass");
    require(y.tape_ == this, "backward: variable from another tape");
    require(requires_grad(y.id_), "backward: the output does not depend on any variable or parameter");
    return grad(y.id_);
  }

  void replay() {
    replayed_ = true;
    for (auto step = steps_.rbegin(); step != steps_.rend(); ++step)
      if (nodes_[step->output].grad_reached) step->run();
  }

  Var<S> push(Mat<S> value, bool requires_grad, Parameter<S>* param) {
    nodes_.push_back(Node{std::move(value), Mat<S>(), param, requires_grad, false});
    return Var<S>(this, nodes_.size() - 1);
  }

  template <class Inputs>
  bool any_requires_grad(const Inputs& inputs) const {
    bool any = false;
    for (const Var<S>& v : inputs) {
      require(v.tape_ == this, "operation mixes variables from different tapes");
      any = any || requires_grad(v.id_);
    }
    return any;
  }

  std::deque<Node> nodes_;  // a deque: references to nodes stay valid as it grows
  std::vector<Step> steps_;
  bool replayed_ = false;
};

}  // namespace qkvlab::engine
