#include "engine/parameters.hpp"

namespace qkvlab::engine {

const ParameterSpec& ParameterLayout::add(std::string name, std::vector<std::int64_t> shape, bool decay) {
  if (index_.count(name)) throw std::invalid_argument("parameter \"" + name + "\" is defined twice");
  ParameterSpec spec{std::move(name), std::move(shape), decay, total_};
  for (auto s : spec.shape)
    if (s < 1) throw std::invalid_argument("parameter \"" + spec.name + "\" has an empty shape");
  total_ += (spec.size() + 15) / 16 * 16;
  index_[spec.name] = specs_.size();
  specs_.push_back(std::move(spec));
  return specs_.back();
}

const ParameterSpec* ParameterLayout::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &specs_[it->second];
}

const ParameterSpec& ParameterLayout::at(const std::string& name) const {
  const ParameterSpec* spec = find(name);
  if (!spec) throw std::out_of_range("no parameter \"" + name + "\"");
  return *spec;
}

std::size_t ParameterLayout::count() const {
  std::size_t n = 0;
  for (const auto& s : specs_) n += s.size();
  return n;
}

}  // namespace qkvlab::engine
