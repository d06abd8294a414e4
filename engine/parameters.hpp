// A model's parameters as one flat array in a backend's memory, with a layout
// naming each tensor: its name (e.g. "h.3.attn.q.weight"), row-major shape,
// offset in the array and whether AdamW's weight decay applies to it (matrices
// yes; biases, gains and mixing weights no). The optimizer (engine/optimizer.hpp)
// and checkpoints (lm/checkpoint.hpp) work on this one description; a model
// finds its tensors by name once and keeps the pointers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backend.hpp"

namespace qkvlab::engine {

struct ParameterSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  bool decay = true;
  std::size_t offset = 0;  // in elements, a multiple of 16
  std::size_t size() const {
    std::size_t n = 1;
    for (auto s : shape) n *= std::size_t(s);
    return n;
  }
};

class ParameterLayout {
 public:
  // Appends a tensor; throws std::invalid_argument on a repeated name or an empty shape.
  const ParameterSpec& add(std::string name, std::vector<std::int64_t> shape, bool decay);
  const ParameterSpec* find(const std::string& name) const;
  const ParameterSpec& at(const std::string& name) const;  // std::out_of_range naming it
  const std::vector<ParameterSpec>& specs() const { return specs_; }
  std::size_t total() const { return total_; }  // elements, padding included
  std::size_t count() const;                    // elements of the tensors themselves

 private:
  std::vector<ParameterSpec> specs_;
  std::map<std::string, std::size_t> index_;
  std::size_t total_ = 0;
};

// Values and gradients of a layout on a backend (zero-filled).
template <class S>
struct ParameterSet {
  ParameterSet(Backend<S>& backend, ParameterLayout layout_)
      : layout(std::move(layout_)), values(backend, layout.total()), grads(backend, layout.total()) {}
  S* value(const std::string& name) { return values.data() + layout.at(name).offset; }
  S* grad(const std::string& name) { return grads.data() + layout.at(name).offset; }

  ParameterLayout layout;
  Buffer<S> values, grads;
};

}  // namespace qkvlab::engine
