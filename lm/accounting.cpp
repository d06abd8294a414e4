#include "lm/accounting.hpp"

#include <algorithm>
#include <map>

#include "core/errors.hpp"
#include "lm/describe.hpp"
#include "lm/parameters.hpp"
#include "lm/plan.hpp"

namespace qkvlab::lm {

namespace {

// The component of a tensor name: "h.3.attn.q.bias" → (3, "attention.q").
std::pair<int, std::string> component_of(const std::string& name) {
  if (name == "wte") return {-1, "embedding.tokens"};
  if (name == "wpe") return {-1, "embedding.positions"};
  if (name == "lm_head.weight") return {-1, "head"};
  if (name.rfind("ln_f.", 0) == 0) return {-1, "norms"};
  // h.<i>.<what>
  const std::size_t dot = name.find('.', 2);
  const int layer = std::stoi(name.substr(2, dot - 2));
  std::string what = name.substr(dot + 1);
  if (what.rfind("ln_", 0) == 0) return {layer, "norms"};
  if (what == "dwa") return {layer, "dense_mix"};
  for (const std::string tail : {".weight", ".bias"})
    if (what.size() > tail.size() && what.compare(what.size() - tail.size(), tail.size(), tail) == 0)
      what.resize(what.size() - tail.size());
  if (what.rfind("attn.", 0) == 0) return {layer, "attention." + what.substr(5)};
  return {layer, what};  // "mlp.fc", "mlp.gate", ...
}

void add_to(std::vector<ComponentCount>& counts, const std::string& component, std::int64_t n) {
  for (auto& c : counts)
    if (c.component == component) {
      c.count += n;
      return;
    }
  counts.push_back({component, n});
}

// Nested objects from dotted components: {"attention": {"q": n, ...}, "norms": n}.
results::Value nested(const std::vector<ComponentCount>& counts, bool with_total) {
  results::Value v = results::Value::object();
  std::vector<std::string> groups;
  std::map<std::string, results::Value> children;
  std::int64_t total = 0;
  for (const auto& c : counts) {
    total += c.count;
    const std::size_t dot = c.component.find('.');
    if (dot == std::string::npos) {
      groups.push_back(c.component);
      children[c.component] = results::Value(c.count);
      continue;
    }
    const std::string group = c.component.substr(0, dot);
    if (!children.count(group)) {
      groups.push_back(group);
      children[group] = results::Value::object();
    }
    children[group].set(c.component.substr(dot + 1), c.count);
  }
  for (const auto& g : groups) {
    results::Value& child = children[g];
    if (child.kind() == results::Value::Kind::object) {
      std::int64_t sum = 0;
      for (const auto& item : child.items()) sum += std::int64_t(item.number());
      child.set("total", sum);
    }
    v.set(g, child);
  }
  if (with_total) v.set("total", total);
  return v;
}

bool same_counts(const std::vector<ComponentCount>& a, const std::vector<ComponentCount>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t k = 0; k < a.size(); ++k)
    if (a[k].component != b[k].component || a[k].count != b[k].count) return false;
  return true;
}

std::string range_text(std::size_t first, std::size_t last) {
  return first == last ? std::to_string(first + 1) : std::to_string(first + 1) + "-" + std::to_string(last + 1);
}

// Runs of equal layers: calls emit(first, last) for each maximal run.
template <class Equal, class Emit>
void runs(std::size_t n, Equal equal, Emit emit) {
  for (std::size_t first = 0; first < n;) {
    std::size_t last = first;
    while (last + 1 < n && equal(first, last + 1)) ++last;
    emit(first, last);
    first = last + 1;
  }
}

bool same_cache(const LayerCache& a, const LayerCache& b) {
  if (a.elements() != b.elements() || a.keys != b.keys || a.values != b.values || a.latent != b.latent ||
      a.rope_key != b.rope_key || a.own_key_heads != b.own_key_heads || a.own_value_heads != b.own_value_heads ||
      a.reused.size() != b.reused.size())
    return false;
  for (std::size_t k = 0; k < a.reused.size(); ++k)
    if (a.reused[k].what != b.reused[k].what || a.reused[k].layer != b.reused[k].layer ||
        a.reused[k].heads != b.reused[k].heads)
      return false;
  return true;
}

}  // namespace

std::int64_t ParameterAccount::component(const std::string& name) const {
  for (const auto& c : components)
    if (c.component == name) return c.count;
  return 0;
}

ParameterAccount count_parameters(const Config& config) {
  const auto layout = parameter_layout(config, make_plan(config));
  ParameterAccount a;
  a.layers.resize(std::size_t(config.layers));
  for (const auto& spec : layout.specs()) {
    const std::int64_t n = std::int64_t(spec.size());
    const auto [layer, component] = component_of(spec.name);
    a.total += n;
    if (component.rfind("embedding.", 0) == 0) a.embedding += n;
    add_to(a.components, component, n);
    if (layer >= 0) add_to(a.layers[std::size_t(layer)], component, n);
  }
  return a;
}

std::int64_t KvAccount::elements_per_token() const {
  std::int64_t n = 0;
  for (const auto& l : layers) n += l.elements();
  return n;
}

KvAccount count_kv(const Config& c) {
  const auto plan = make_plan(c);
  KvAccount a;
  for (std::size_t n = 0; n < plan.size(); ++n) {
    const LayerPlan& p = plan[n];
    LayerCache cache;
    cache.own_key_heads = c.mla ? 0 : p.own_key_heads;
    cache.own_value_heads = p.own_value_heads;
    if (c.mla) {
      cache.latent = std::int64_t(p.own_value_heads) * (c.d_c / c.kv_heads);
      cache.rope_key = c.d_r;
    } else {
      cache.keys = std::int64_t(p.own_key_heads) * c.head_dim;
      cache.values = std::int64_t(p.own_value_heads) * c.head_dim;
    }
    std::map<std::pair<std::string, int>, std::vector<int>> reused;  // (what, source layer) → heads
    auto scan = [&](const Mix& mix, const std::string& what) {
      for (const auto& sources : mix)
        for (const Source& s : sources)
          if (s.layer != int(n)) reused[{what, s.layer}].push_back(s.head);
    };
    scan(p.keys, c.mla ? "latent" : "keys");
    scan(p.values, c.mla ? "latent" : "values");
    scan(p.direct, c.mla ? "latent" : "values");
    for (auto& [key, heads] : reused) {  // numbered from 1, layers and heads alike (docs/lm.md's numbering)
      std::sort(heads.begin(), heads.end());
      heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
      for (int& h : heads) ++h;
      cache.reused.push_back(Reuse{key.first, key.second + 1, heads});
    }
    a.layers.push_back(std::move(cache));
  }
  return a;
}

int cache_dtype_bytes(const std::string& dtype) {
  if (dtype == "f32") return 4;
  if (dtype == "bf16" || dtype == "f16") return 2;
  throw UsageError("unknown cache dtype \"" + dtype + "\" (f32, bf16, f16)");
}

results::Value parameters_value(const Config& config) {
  const ParameterAccount a = count_parameters(config);
  results::Value v = results::Value::object();
  v.set("model", config_value(config));
  v.set("total", a.total);
  v.set("embedding", a.embedding);
  v.set("non_embedding", a.non_embedding());
  v.set("components", nested(a.components, false));
  results::Value layers = results::Value::array();
  runs(a.layers.size(), [&](std::size_t i, std::size_t j) { return same_counts(a.layers[i], a.layers[j]); },
       [&](std::size_t first, std::size_t last) {
         results::Value run = results::Value::object();
         run.set("layers", range_text(first, last));
         run.set("count", std::int64_t(last - first + 1));
         run.set("per_layer", nested(a.layers[first], true));
         layers.push(std::move(run));
       });
  v.set("layers", std::move(layers));
  return v;
}

results::Value kv_value(const Config& config, const std::string& dtype, std::optional<std::int64_t> seq_len) {
  const int bytes = cache_dtype_bytes(dtype);
  const KvAccount a = count_kv(config);
  Config vanilla = config;
  vanilla.variant = Variant{};
  const std::int64_t per_token = a.elements_per_token() * bytes;
  const std::int64_t vanilla_per_token = count_kv(vanilla).elements_per_token() * bytes;
  results::Value v = results::Value::object();
  v.set("model", config_value(config));
  v.set("dtype", dtype);
  v.set("bytes_per_value", bytes);
  v.set("elements_per_token", a.elements_per_token());
  v.set("bytes_per_token", per_token);
  v.set("vanilla_bytes_per_token", vanilla_per_token);
  v.set("saving", 1.0 - double(per_token) / double(vanilla_per_token));
  if (seq_len) {
    std::int64_t total = 0;
    if (__builtin_mul_overflow(*seq_len, per_token, &total))
      throw UsageError("--seq-len " + std::to_string(*seq_len) + ": the cache of " + std::to_string(per_token) +
                       " bytes per token would exceed 2^63 bytes");
    v.set("seq_len", *seq_len);
    v.set("total_bytes", total);
  }
  results::Value layers = results::Value::array();
  runs(a.layers.size(), [&](std::size_t i, std::size_t j) { return same_cache(a.layers[i], a.layers[j]); },
       [&](std::size_t first, std::size_t last) {
         const LayerCache& l = a.layers[first];
         results::Value run = results::Value::object();
         run.set("layers", range_text(first, last));
         run.set("count", std::int64_t(last - first + 1));
         results::Value per = results::Value::object();
         if (config.mla) {
           per.set("own_latent_slots", l.own_value_heads);
           per.set("latent", l.latent);
           per.set("rope_key", l.rope_key);
         } else {
           per.set("own_key_heads", l.own_key_heads);
           per.set("own_value_heads", l.own_value_heads);
           per.set("keys", l.keys);
           per.set("values", l.values);
         }
         per.set("elements", l.elements());
         per.set("bytes", l.elements() * bytes);
         results::Value reused = results::Value::array();
         for (const Reuse& r : l.reused) {
           results::Value item = results::Value::object();
           item.set("what", r.what);
           item.set("from_layer", r.layer);
           item.set("heads", results::Value::array_of(r.heads));
           reused.push(std::move(item));
         }
         per.set("reused", std::move(reused));
         run.set("per_layer", std::move(per));
         layers.push(std::move(run));
       });
  v.set("layers", std::move(layers));
  return v;
}

}  // namespace qkvlab::lm
