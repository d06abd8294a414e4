#include "probes/probe.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "core/rng.hpp"
#include "lm/head.hpp"

namespace qkvlab::probes {

namespace {

engine::ParameterLayout probe_layout(const lm::Config& c, int outputs, ProbeRecipe recipe) {
  const bool released = recipe == ProbeRecipe::released;
  engine::ParameterLayout layout;
  layout.add("norm.weight", {c.d}, released);
  if (c.family == lm::Family::gpt2 && c.bias && !released) layout.add("norm.bias", {c.d}, false);
  layout.add("head", {outputs, c.d}, true);
  return layout;
}

}  // namespace

template <class S>
struct Probe<S>::Impl {
  lm::Config config;
  int V, rows;
  engine::Backend<S>& be;
  engine::ParameterSet<S> params;
  engine::Buffer<S> nh, mean, rstd, dh;
  lm::Head<S> head;
  engine::Buffer<std::int32_t> targets;

  Impl(const lm::Config& c, int outputs, int rows_, engine::Backend<S>& backend, ProbeRecipe recipe)
      : config(c), V(outputs), rows(rows_), be(backend), params(backend, probe_layout(c, outputs, recipe)),
        nh(backend, std::size_t(rows_) * c.d), mean(backend, rows_), rstd(backend, rows_),
        dh(backend, std::size_t(rows_) * c.d), head(backend, rows_, c.d, outputs, true), targets(backend, rows_) {}

  lm::NormWeights<S> norm() {
    const bool biased = params.layout.find("norm.bias");
    return {params.value("norm.weight"), biased ? params.value("norm.bias") : nullptr, params.grad("norm.weight"),
            biased ? params.grad("norm.bias") : nullptr};
  }

  lm::LossSum forward(const S* h, const std::int32_t* host_targets, int N, bool train, double scale,
                      std::vector<double>* per_row) {
    if (N > rows) throw std::invalid_argument("probe: more rows than it was made for");
    const int d = config.d;
    targets.upload(host_targets, std::size_t(N));
    const lm::NormWeights<S> w = norm();
    lm::normalize(be, config, N, h, w, nh.data(), mean.data(), rstd.data());
    head.loss(N, nh.data(), params.value("head"), targets.data(), S(scale), train ? params.grad("head") : nullptr);
    if (train) {  // the norm's gain and bias; h is frozen (its gradient is not used)
      be.fill(std::size_t(N) * d, S(0), dh.data());
      lm::normalize_backward(be, config, N, h, w, mean.data(), rstd.data(), head.dx(), dh.data());
    }
    std::vector<S> host(static_cast<std::size_t>(N));
    head.losses().download(host.data(), host.size());
    lm::LossSum total;
    if (per_row) per_row->assign(host.begin(), host.end());
    for (int i = 0; i < N; ++i)
      if (host_targets[i] >= 0) total.sum += double(host[std::size_t(i)]), ++total.count;
    return total;
  }
};

template <class S>
Probe<S>::Probe(const lm::Config& model, int outputs, int rows, engine::Backend<S>& backend, ProbeRecipe recipe)
    : impl_(std::make_unique<Impl>(model, outputs, rows, backend, recipe)) {}
template <class S>
Probe<S>::~Probe() = default;
template <class S>
Probe<S>::Probe(Probe&&) noexcept = default;

template <class S>
engine::ParameterSet<S>& Probe<S>::parameters() {
  return impl_->params;
}
template <class S>
int Probe<S>::outputs() const {
  return impl_->V;
}

template <class S>
void Probe<S>::initialize_from(lm::Model<S>& model) {
  const lm::Config& c = model.config();
  if (c.vocab != impl_->V) throw std::invalid_argument("probe: a model-initialized probe predicts the vocabulary");
  const std::vector<S> all = model.parameter_values();
  const auto& from = model.parameters().layout;
  const auto& to = impl_->params.layout;
  std::vector<S> mine(to.total(), S(0));
  const auto copy = [&](const std::string& source, const std::string& target) {
    const auto& s = from.at(source);
    std::copy_n(all.begin() + std::ptrdiff_t(s.offset), s.size(), mine.begin() + std::ptrdiff_t(to.at(target).offset));
  };
  copy("ln_f.weight", "norm.weight");
  if (to.find("norm.bias")) copy("ln_f.bias", "norm.bias");
  copy(c.tied ? "wte" : "lm_head.weight", "head");
  impl_->params.values.upload(mine);
}

template <class S>
void Probe<S>::initialize_random(std::uint64_t seed) {
  const auto& layout = impl_->params.layout;
  std::vector<S> v(layout.total(), S(0));
  Rng rng(seed, "probe");
  for (const auto& s : layout.specs())
    for (std::size_t i = 0; i < s.size(); ++i)
      v[s.offset + i] = s.name == "head" ? S(0.02 * rng.normal()) : s.name == "norm.weight" ? S(1) : S(0);
  impl_->params.values.upload(v);
}

template <class S>
lm::LossSum Probe<S>::forward(const S* h, const std::int32_t* targets, int N, bool train, double scale,
                              std::vector<double>* per_row) {
  return impl_->forward(h, targets, N, train, scale, per_row);
}

template class Probe<float>;
template class Probe<double>;

}  // namespace qkvlab::probes
