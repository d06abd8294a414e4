#include "core/qkv_plan.hpp"

#include <cmath>

namespace qkvlab::qkv {

namespace {

std::vector<Source> one(int layer, int head, double weight = 1) { return {Source{layer, head, weight}}; }

Mix own_heads(int layer, int heads) {
  Mix m(heads);
  for (int g = 0; g < heads; ++g) m[g] = one(layer, g);
  return m;
}

// SkipV1's value (or key) heads of layer n (0-based) with `own` own heads and
// heads own … G−1 injected from layer `src` (0-based; −1: SkipV0, zero heads).
Mix skip_heads(const Variant& v, int G, int n, int own, int src) {
  const int injected = G - own;
  Mix m(G);
  for (int g = 0; g < own; ++g) m[g] = one(n, g);
  if (src < 0) return m;
  const int paper_n = n + 1;  // the paper numbers layers from 1
  for (int j = 0; j < injected; ++j) {
    const int position = own + j;
    switch (v.strategy) {
      case Strategy::second_half:
        m[position] = one(src, own + j);
        break;
      case Strategy::pooling:
        m[position] = {Source{src, j, 0.5}, Source{src, own + j, 0.5}};
        break;
      case Strategy::dynamic:
        m[position] = one(src, j == paper_n % own ? paper_n % own : own + j);
        break;
      case Strategy::odd_even:
        m[position] = one(src, paper_n % 2 ? j : own + j);
        break;
      case Strategy::plus_resformer:
        m[position] = one(src, own + j);
        break;
    }
  }
  if (v.strategy == Strategy::plus_resformer)
    for (int g = 0; g < own; ++g) m[g].push_back(Source{src, g, 1.0});
  return m;
}

// Head g of layers first … last (0-based), each with weight w.
std::vector<Source> across(int first, int last, int g, double w) {
  std::vector<Source> sources;
  for (int i = first; i <= last; ++i) sources.push_back(Source{i, g, w});
  return sources;
}

// The ResFormer family's layer n (0-based) with source layer k = source_layer: layers ≤ k are
// standard; later ones mix α·own + β·(layer k's) into their values (resformer-k: keys,
// resformer-q: queries), and resformer-neutreno adds λ (V_k − V'_n) outside the attention, V'_n
// the mixed values.
void resformer_layer(const Variant& v, int n, int G, LayerPlan& p) {
  const int src = v.source_layer - 1;
  if (n <= src) return;
  Mix& target = v.kind == VariantKind::resformer_k ? p.keys : v.kind == VariantKind::resformer_q ? p.queries : p.values;
  for (int g = 0; g < int(target.size()); ++g) target[g] = {Source{n, g, v.alpha}, Source{src, g, v.beta}};
  if (v.kind == VariantKind::resformer_neutreno)
    for (int g = 0; g < G; ++g)
      p.direct[g] = {Source{src, g, v.lambda * (1 - v.beta)}, Source{n, g, -v.lambda * v.alpha}};
}

}  // namespace

std::vector<LayerPlan> make_plan(const Variant& v, int L, int H, int G) {
  const int half = L / 2 - 1;  // layer L/2, 0-based
  std::vector<LayerPlan> plan(L);
  for (int n = 0; n < L; ++n) {
    LayerPlan& p = plan[n];
    p.own_key_heads = G, p.own_value_heads = G;
    p.keys = own_heads(n, G), p.values = own_heads(n, G), p.direct.assign(G, {}), p.queries = own_heads(n, H);
    p.identity_query = v.kind == VariantKind::q_identity;
    p.dense = v.kind == VariantKind::denseformer;
    if (n == 0) continue;  // layer 1 is always standard
    switch (v.kind) {
      case VariantKind::vanilla:
      case VariantKind::denseformer:
      case VariantKind::q_identity:
        break;
      case VariantKind::resformer:
      case VariantKind::resformer_neutreno:
      case VariantKind::resformer_k:
      case VariantKind::resformer_q:
        resformer_layer(v, n, G, p);
        break;
      case VariantKind::resformer_cross: {  // [own heads; layer k's heads]: two segments
        if (n < v.source_layer) break;
        const Mix source = own_heads(v.source_layer - 1, G);
        p.segments = 2;
        p.keys.insert(p.keys.end(), source.begin(), source.end());
        p.values.insert(p.values.end(), source.begin(), source.end());
        break;
      }
      case VariantKind::resformer_previous:
        for (int g = 0; g < G; ++g) p.values[g] = {Source{n, g, v.alpha}, Source{n - 1, g, v.beta}};
        break;
      case VariantKind::resformer_all:  // layers 1 … n (1-based), each 1/n
        for (int g = 0; g < G; ++g) p.values[g] = across(0, n, g, 1.0 / (n + 1));
        break;
      case VariantKind::resformer_identity:  // layers 1 … n−1 (1-based), each 1/(n−1)
        for (int g = 0; g < G; ++g) p.direct[g] = across(0, n - 1, g, 1.0 / n);
        break;
      case VariantKind::svformer:
        p.own_value_heads = 0, p.values = own_heads(0, G);
        break;
      case VariantKind::neutreno:
        for (int g = 0; g < G; ++g) p.direct[g] = {Source{0, g, v.lambda}, Source{n, g, -v.lambda}};
        break;
      case VariantKind::yoco_v:
        if (n > half) p.own_value_heads = 0, p.values = own_heads(half, G);
        break;
      case VariantKind::cla_v:
      case VariantKind::cla_k:
      case VariantKind::cla_kv:
        if ((n + 1) % 2 != 0) break;
        if (v.kind != VariantKind::cla_k) p.own_value_heads = 0, p.values = own_heads(n - 1, G);
        if (v.kind != VariantKind::cla_v) p.own_key_heads = 0, p.keys = own_heads(n - 1, G);
        break;
      case VariantKind::skipv1:
      case VariantKind::skipkv1:
      case VariantKind::skipv1_yoco: {
        // skipv1-yoco: every layer after L/2 takes layer L/2's keys, whatever k (also the layers ≤ k)
        if (v.kind == VariantKind::skipv1_yoco && n > half) p.own_key_heads = 0, p.keys = own_heads(half, G);
        const int src = v.source_layer - 1;  // −1: SkipV0
        if (n <= src) break;                 // layers ≤ k have all their own values
        const int own = G - int(std::lround(v.skip_ratio * G));
        p.own_value_heads = own, p.values = skip_heads(v, G, n, own, src);
        if (v.kind == VariantKind::skipkv1) p.own_key_heads = own, p.keys = skip_heads(v, G, n, own, src);
        break;
      }
    }
  }
  return plan;
}

bool reads_layer(const Mix& mix, int g, int layer) {
  for (const Source& s : mix[std::size_t(g)])
    if (s.layer == layer) return true;
  return false;
}

bool is_own(const Mix& mix, int layer, int own_heads) {
  if (int(mix.size()) != own_heads) return false;
  for (int g = 0; g < own_heads; ++g)
    if (mix[g].size() != 1 || !(mix[g][0] == Source{layer, g, 1.0})) return false;
  return true;
}

bool selects(const Mix& mix) {
  for (const auto& sources : mix)
    if (sources.size() != 1 || sources[0].weight != 1) return false;
  return true;
}

}  // namespace qkvlab::qkv
