// Training state in a SafeTensors (safetensors.hpp): parameter p is the
// tensor named p.name; AdamW's moments are "adamw.m/<name>" and
// "adamw.v/<name>" with its step count in metadata "adamw.steps"; SGD's
// velocities are "sgd.velocity/<name>". Restoring is bit-exact, so training
// resumed from a checkpoint continues bit-for-bit as if never interrupted
// (given the same data order and learning rates).
#pragma once

#include <charconv>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/optim.hpp"
#include "engine/safetensors.hpp"

namespace qkvlab::engine {

// The tensor `name` of `file` as a Mat<S> of the given shape; throws
// std::runtime_error if it is missing or differs in dtype or shape.
template <class S>
Mat<S> restore_matrix(const SafeTensors& file, const std::string& name, Eigen::Index rows,
                      Eigen::Index cols) {
  const auto it = file.tensors.find(name);
  if (it == file.tensors.end()) throw std::runtime_error("checkpoint: no tensor \"" + name + "\"");
  Mat<S> M = to_matrix<S>(it->second, name);
  if (M.rows() != rows || M.cols() != cols)
    throw std::runtime_error("checkpoint: tensor \"" + name + "\" is " + std::to_string(M.rows()) + "x" +
                             std::to_string(M.cols()) + ", expected " + std::to_string(rows) + "x" +
                             std::to_string(cols));
  return M;
}

template <class S>
void store_parameters(SafeTensors& file, const Parameters<S>& params) {
  require_unique_names(params);
  for (const Parameter<S>* p : params) file.tensors[p->name] = to_tensor(p->value);
}

// Every parameter must be in the file with its shape and dtype; on any
// error nothing is changed.
template <class S>
void restore_parameters(const SafeTensors& file, const Parameters<S>& params) {
  std::vector<Mat<S>> values;
  for (const Parameter<S>* p : params)
    values.push_back(restore_matrix<S>(file, p->name, p->value.rows(), p->value.cols()));
  for (std::size_t k = 0; k < params.size(); ++k) params[k]->value = std::move(values[k]);
}

// A parameter the optimizer has not seen yet is stored with zero state, which
// is exactly the state the optimizer would create for it.
template <class S>
const Mat<S>& state_or_zero(const std::map<std::string, Mat<S>>& state, const Parameter<S>& p, Mat<S>& zero) {
  const auto it = state.find(p.name);
  if (it != state.end()) return it->second;
  zero = Mat<S>::Zero(p.value.rows(), p.value.cols());
  return zero;
}

template <class S>
void store_state(SafeTensors& file, const Parameters<S>& params, const AdamW<S>& adamw) {
  Mat<S> zero;
  for (const Parameter<S>* p : params) {
    file.tensors["adamw.m/" + p->name] = to_tensor(state_or_zero(adamw.m, *p, zero));
    file.tensors["adamw.v/" + p->name] = to_tensor(state_or_zero(adamw.v, *p, zero));
  }
  file.metadata["adamw.steps"] = std::to_string(adamw.steps);
}

// The optimizer state of the given parameters; on any error nothing is changed.
template <class S>
void restore_state(const SafeTensors& file, const Parameters<S>& params, AdamW<S>& adamw) {
  const auto it = file.metadata.find("adamw.steps");
  if (it == file.metadata.end()) throw std::runtime_error("checkpoint: no metadata \"adamw.steps\"");
  const std::string& text = it->second;
  AdamW<S> restored(adamw.config);
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), restored.steps);
  if (error != std::errc() || end != text.data() + text.size() || restored.steps < 0)
    throw std::runtime_error("checkpoint: metadata \"adamw.steps\" is not a step count: \"" + text + "\"");
  for (const Parameter<S>* p : params) {
    restored.m[p->name] = restore_matrix<S>(file, "adamw.m/" + p->name, p->value.rows(), p->value.cols());
    restored.v[p->name] = restore_matrix<S>(file, "adamw.v/" + p->name, p->value.rows(), p->value.cols());
  }
  adamw = std::move(restored);
}

template <class S>
void store_state(SafeTensors& file, const Parameters<S>& params, const Sgd<S>& sgd) {
  Mat<S> zero;
  for (const Parameter<S>* p : params)
    file.tensors["sgd.velocity/" + p->name] = to_tensor(state_or_zero(sgd.velocity, *p, zero));
}

template <class S>
void restore_state(const SafeTensors& file, const Parameters<S>& params, Sgd<S>& sgd) {
  Sgd<S> restored(sgd.config);
  for (const Parameter<S>* p : params)
    restored.velocity[p->name] =
        restore_matrix<S>(file, "sgd.velocity/" + p->name, p->value.rows(), p->value.cols());
  sgd = std::move(restored);
}

}  // namespace qkvlab::engine
