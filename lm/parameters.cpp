#include "lm/parameters.hpp"

#include <cmath>

#include "core/rng.hpp"

namespace qkvlab::lm {

std::string layer_tensor(int layer, const std::string& what) { return "h." + std::to_string(layer) + "." + what; }

engine::ParameterLayout parameter_layout(const Config& c, const std::vector<LayerPlan>& plan) {
  engine::ParameterLayout layout;
  const std::int64_t d = c.d, V = c.vocab, r = c.ffn, qw = std::int64_t(c.heads) * c.head_dim;
  const bool gpt2 = c.family == Family::gpt2;
  auto matrix = [&](const std::string& name, std::int64_t rows, std::int64_t cols) {
    layout.add(name, {rows, cols}, true);
  };
  auto vector = [&](const std::string& name, std::int64_t n) { layout.add(name, {n}, false); };
  auto linear = [&](int i, const std::string& what, std::int64_t in, std::int64_t out) {
    matrix(layer_tensor(i, what + ".weight"), in, out);
    if (c.bias) vector(layer_tensor(i, what + ".bias"), out);
  };
  auto norm = [&](const std::string& name) {
    if (!c.norm) return;
    vector(name + ".weight", d);
    if (gpt2 && c.bias) vector(name + ".bias", d);
  };

  matrix("wte", V, d);
  if (!c.rope()) matrix("wpe", c.positions, d);
  for (int i = 0; i < c.layers; ++i) {
    const LayerPlan& p = plan[std::size_t(i)];
    norm(layer_tensor(i, "ln_1"));
    if (!p.identity_query) linear(i, "attn.q", d, qw);
    if (c.mla) {
      const std::int64_t slot = c.d_c / c.kv_heads;
      if (p.own_value_heads > 0) matrix(layer_tensor(i, "attn.dkv.weight"), d, p.own_value_heads * slot);
      matrix(layer_tensor(i, "attn.uk.weight"), c.d_c, qw);
      matrix(layer_tensor(i, "attn.uv.weight"), c.d_c, qw);
      if (c.d_r > 0) {
        matrix(layer_tensor(i, "attn.kr.weight"), d, c.d_r);
        matrix(layer_tensor(i, "attn.qr.weight"), d, std::int64_t(c.heads) * c.d_r);
      }
    } else {
      if (p.own_key_heads > 0) linear(i, "attn.k", d, std::int64_t(p.own_key_heads) * c.head_dim);
      if (p.own_value_heads > 0) linear(i, "attn.v", d, std::int64_t(p.own_value_heads) * c.head_dim);
    }
    linear(i, "attn.o", qw, d);
    norm(layer_tensor(i, "ln_2"));
    if (gpt2) {
      linear(i, "mlp.fc", d, r);
      linear(i, "mlp.proj", r, d);
    } else {
      linear(i, "mlp.gate", d, r);
      linear(i, "mlp.up", d, r);
      linear(i, "mlp.down", r, d);
    }
    if (p.dense) vector(layer_tensor(i, "dwa"), i + 2);
  }
  norm("ln_f");
  if (!c.tied) matrix("lm_head.weight", V, d);
  return layout;
}

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool residual_projection(const std::string& name) {
  return ends_with(name, "attn.o.weight") || ends_with(name, "mlp.proj.weight") ||
         ends_with(name, "mlp.down.weight");
}

}  // namespace

template <class S>
std::vector<S> initial_values(const Config& c, const engine::ParameterLayout& layout, std::uint64_t seed) {
  std::vector<S> values(layout.total(), S(0));
  const double std_matrix = 0.02, std_residual = 0.02 / std::sqrt(2.0 * c.layers);
  for (const engine::ParameterSpec& spec : layout.specs()) {
    S* x = values.data() + spec.offset;
    const std::size_t n = spec.size();
    if (spec.shape.size() == 2) {
      Rng rng(seed, "lm/init/" + spec.name);
      const double sd = residual_projection(spec.name) ? std_residual : std_matrix;
      for (std::size_t i = 0; i < n; ++i) x[i] = S(sd * rng.normal());
    } else if (ends_with(spec.name, ".weight")) {  // norm gains
      for (std::size_t i = 0; i < n; ++i) x[i] = S(1);
    } else if (ends_with(spec.name, "dwa")) {
      x[n - 1] = S(1);
    }
  }
  return values;
}

template std::vector<float> initial_values(const Config&, const engine::ParameterLayout&, std::uint64_t);
template std::vector<double> initial_values(const Config&, const engine::ParameterLayout&, std::uint64_t);

}  // namespace qkvlab::lm
