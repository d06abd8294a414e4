#include "lm/config.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "core/errors.hpp"

namespace qkvlab::lm {

namespace {

template <class E, std::size_t N>
struct Names {
  std::pair<E, const char*> entries[N];
  std::string name(E e) const {
    for (const auto& [v, s] : entries)
      if (v == e) return s;
    return "?";
  }
  E parse(const std::string& s, const char* what) const {
    std::string known;
    for (const auto& [v, n] : entries) {
      if (s == n) return v;
      known += (known.empty() ? "" : "|") + std::string(n);
    }
    throw UsageError("unknown " + std::string(what) + " \"" + s + "\" (known: " + known + ")");
  }
};

constexpr Names<Family, 2> kFamilies{{{Family::gpt2, "gpt2"}, {Family::llama, "llama"}}};
constexpr Names<VariantKind, 20> kVariants{{{VariantKind::vanilla, "vanilla"},
                                            {VariantKind::resformer, "resformer"},
                                            {VariantKind::svformer, "svformer"},
                                            {VariantKind::neutreno, "neutreno"},
                                            {VariantKind::denseformer, "denseformer"},
                                            {VariantKind::skipv1, "skipv1"},
                                            {VariantKind::yoco_v, "yoco-v"},
                                            {VariantKind::cla_v, "cla-v"},
                                            {VariantKind::skipkv1, "skipkv1"},
                                            {VariantKind::skipv1_yoco, "skipv1-yoco"},
                                            {VariantKind::q_identity, "q-identity"},
                                            {VariantKind::resformer_neutreno, "resformer-neutreno"},
                                            {VariantKind::resformer_k, "resformer-k"},
                                            {VariantKind::resformer_q, "resformer-q"},
                                            {VariantKind::resformer_previous, "resformer-previous"},
                                            {VariantKind::resformer_all, "resformer-all"},
                                            {VariantKind::resformer_identity, "resformer-identity"},
                                            {VariantKind::cla_k, "cla-k"},
                                            {VariantKind::cla_kv, "cla-kv"},
                                            {VariantKind::resformer_cross, "resformer-cross"}}};
constexpr Names<Strategy, 5> kStrategies{{{Strategy::second_half, "second-half"},
                                          {Strategy::pooling, "pooling"},
                                          {Strategy::dynamic, "dynamic"},
                                          {Strategy::odd_even, "odd-even"},
                                          {Strategy::plus_resformer, "plus-resformer"}}};
constexpr Names<PositionEncoding, 2> kPositionEncodings{
    {{PositionEncoding::learned, "learned"}, {PositionEncoding::rope, "rope"}}};
constexpr Names<GeluForm, 2> kGelu{{{GeluForm::tanh, "tanh"}, {GeluForm::erf, "erf"}}};

std::string real(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// x as a person wrote it: the shortest text that reads back as x (0.3, not 0.29999999999999999).
std::string shortest(double x) {
  char buf[40];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, x).ptr);
}


void require(bool ok, const std::string& message) {
  if (!ok) throw UsageError(message);
}

}  // namespace

bool skipv1_family(VariantKind k) {
  return k == VariantKind::skipv1 || k == VariantKind::skipkv1 || k == VariantKind::skipv1_yoco;
}

bool reads_source_layer(VariantKind k) {
  return skipv1_family(k) || resformer_family(k) || k == VariantKind::resformer_cross;
}

bool reads_rope_theta(const Config& c) { return c.rope() || (c.mla && c.d_r > 0); }

Config canonical(Config c) {
  const Config defaults;
  Variant& v = c.variant;
  if (!skipv1_family(v.kind)) v.skip_ratio = defaults.variant.skip_ratio, v.strategy = defaults.variant.strategy;
  if (!reads_source_layer(v.kind)) v.source_layer = defaults.variant.source_layer;
  if (!reads_rope_theta(c)) c.rope_theta = defaults.rope_theta;
  if (c.family != Family::gpt2) c.gelu = defaults.gelu;
  if (!c.mla) c.d_c = defaults.d_c, c.d_r = defaults.d_r;
  return c;
}

std::vector<UnreadField> unread_fields(const Config& c) {
  const VariantKind k = c.variant.kind;
  const std::string variant = " (--variant " + to_string(k) + ")";
  std::vector<UnreadField> unread;
  if (!skipv1_family(k))
    for (const char* flag : {"--skip-ratio", "--strategy"})
      unread.push_back({flag, " describes the skipv1 family's injected value heads: the model has none" + variant});
  if (!reads_source_layer(k))
    unread.push_back({"--source-layer", ": the model reads no source layer" + variant +
                                            "; it applies to the skipv1 and resformer families and resformer-cross"});
  if (!c.mla)
    for (const char* flag : {"--d-c", "--d-r"}) unread.push_back({flag, " is a width of MLA's cache: give --mla"});
  if (c.family != Family::gpt2) unread.push_back({"--gelu", " is GPT-2's MLP activation: llama's MLP is SwiGLU"});
  if (!reads_rope_theta(c))
    unread.push_back({"--rope-theta", " is RoPE's base: the model's positions are learned and it has no MLA rotary "
                                      "key (give --positions rope)"});
  return unread;
}

bool resformer_family(VariantKind k) {
  return k == VariantKind::resformer || k == VariantKind::resformer_neutreno || k == VariantKind::resformer_k ||
         k == VariantKind::resformer_q;
}

void set_variant_weights(Variant& v, const VariantWeights& w, bool chosen) {
  using K = VariantKind;
  const bool own_lambda = v.kind == K::neutreno || v.kind == K::resformer_neutreno;  // λ is NeuTRENO's
  const bool weighted = resformer_family(v.kind) || v.kind == K::resformer_previous;  // α V_n + β V_k
  const std::string variant = " (--variant " + to_string(v.kind) + ")";
  if ((w.alpha || w.beta) && !weighted)
    throw UsageError("--alpha and --beta weigh ResFormer's value residual: the model has none" + variant);
  if (w.lambda && !own_lambda && !weighted)
    throw UsageError("--lambda is ResFormer's or NeuTRENO's weight: the model has neither" + variant);
  if (w.lambda && !own_lambda && (w.alpha || w.beta))
    throw UsageError("--lambda and --alpha/--beta both set ResFormer's weights: give one");
  if (w.lambda && !own_lambda) v.alpha = 1, v.beta = *w.lambda;
  if (chosen && v.kind == K::resformer_neutreno) v.lambda = 0.2;  // the released combination's λ
  if (w.lambda && own_lambda) v.lambda = *w.lambda;
  if (w.alpha) v.alpha = *w.alpha;
  if (w.beta) v.beta = *w.beta;
}

std::string to_string(Family f) { return kFamilies.name(f); }
std::string to_string(VariantKind v) { return kVariants.name(v); }
std::string to_string(Strategy s) { return kStrategies.name(s); }
Family parse_family(const std::string& s) { return kFamilies.parse(s, "family"); }
std::string to_string(PositionEncoding p) { return kPositionEncodings.name(p); }
PositionEncoding parse_position_encoding(const std::string& s) { return kPositionEncodings.parse(s, "position encoding"); }
VariantKind parse_variant(const std::string& s) { return kVariants.parse(s, "variant"); }
Strategy parse_strategy(const std::string& s) { return kStrategies.parse(s, "injection strategy"); }

bool Config::identity_query(int layer) const {
  return variant.kind == VariantKind::q_identity ||
         std::find(q_identity_layers.begin(), q_identity_layers.end(), layer + 1) != q_identity_layers.end();
}

double Config::attention_scale(int layer) const {
  const double width = head_dim + (mla ? d_r : 0);
  return (identity_query(layer) ? 0.5 : 1.0) / std::sqrt(width);
}

std::string norm_name(const Config& c) {
  if (!c.norm) return "none";
  return c.family == Family::gpt2 ? "layernorm" : "rmsnorm";
}

bool parse_norm(Family family, const std::string& name) {
  if (name == "none") return false;
  Config c;
  c.family = family;
  if (name == norm_name(c)) return true;
  throw UsageError("norm \"" + name + "\": a " + to_string(family) + " model has " + norm_name(c) + " or none");
}

namespace {

PositionEncoding family_positions(Family family) {
  return family == Family::llama ? PositionEncoding::rope : PositionEncoding::learned;
}

std::string layer_list(const std::vector<int>& layers) {
  std::string s;
  for (int l : layers) s += (s.empty() ? "" : ",") + std::to_string(l);
  return s;
}

}  // namespace

Config family_defaults(Family family, int layers, int d, int heads, int vocab, int positions) {
  Config c;
  c.family = family;
  c.layers = layers, c.d = d, c.heads = heads, c.kv_heads = heads;
  c.head_dim = heads > 0 ? d / heads : 0;
  c.vocab = vocab, c.positions = positions;
  if (family == Family::gpt2) {
    c.ffn = 4 * d, c.tied = true, c.bias = true;
  } else {
    c.ffn = (8 * d / 3 + 31) / 32 * 32, c.tied = false, c.bias = false, c.norm_eps = 1e-6;
  }
  c.position_encoding = family_positions(family);
  return c;
}

void validate(const Config& c) {
  require(c.layers >= 1 && c.d >= 1 && c.heads >= 1 && c.kv_heads >= 1 && c.head_dim >= 1 && c.ffn >= 1 &&
              c.vocab >= 1 && c.positions >= 1,
          "model sizes must be at least 1 (layers " + std::to_string(c.layers) + ", d " + std::to_string(c.d) +
              ", heads " + std::to_string(c.heads) + ", kv heads " + std::to_string(c.kv_heads) + ", head width " +
              std::to_string(c.head_dim) + ", ffn " + std::to_string(c.ffn) + ", vocab " + std::to_string(c.vocab) +
              ", positions " + std::to_string(c.positions) + ")");
  require(c.heads % c.kv_heads == 0, "the number of heads (" + std::to_string(c.heads) +
                                         ") must be a multiple of the key/value heads (" +
                                         std::to_string(c.kv_heads) + ")");
  require(c.norm_eps > 0 && std::isfinite(c.norm_eps), "the norm epsilon must be positive and finite");
  require(c.family == Family::gpt2 || c.rope(), "a llama model has RoPE positions: learned positions are gpt2's");
  require(c.rope_theta > 0 && std::isfinite(c.rope_theta), "rope theta must be positive and finite");
  require(!c.rope() || c.head_dim % 2 == 0, "RoPE needs an even head width, got " + std::to_string(c.head_dim));
  require(c.rope_original_context == 0 ||
              (c.rope_original_context > 0 && std::isfinite(c.rope_original_context) && c.rope_factor >= 1 &&
               std::isfinite(c.rope_factor) && c.rope_low_freq_factor > 0 &&
               c.rope_high_freq_factor > c.rope_low_freq_factor && std::isfinite(c.rope_high_freq_factor)),
          "llama3 RoPE scaling needs an original context > 0, a factor >= 1 and 0 < low_freq_factor < "
          "high_freq_factor, all finite");
  const Variant& v = c.variant;
  if (c.mla) {
    require(c.d_c >= 1 && c.d_r >= 0 && c.d_r % 2 == 0, "MLA needs d_c >= 1 and an even d_R >= 0");
    require(c.d_c % c.kv_heads == 0, "MLA: d_c (" + std::to_string(c.d_c) +
                                         ") must be a multiple of the key/value heads (" +
                                         std::to_string(c.kv_heads) + ")");
    require(v.kind == VariantKind::vanilla || v.kind == VariantKind::skipv1 || v.kind == VariantKind::resformer ||
                v.kind == VariantKind::svformer,
            "MLA combines with vanilla, resformer, svformer and skipv1 only, not " + to_string(v.kind));
  }
  if (v.kind == VariantKind::q_identity)
    require(c.heads * c.head_dim == c.d, "q-identity needs heads x head width = d (" + std::to_string(c.heads) +
                                             " x " + std::to_string(c.head_dim) + " != " + std::to_string(c.d) + ")");
  for (std::size_t i = 0; i < c.q_identity_layers.size(); ++i) {
    const int l = c.q_identity_layers[i];
    require(l >= 1 && l <= c.layers && (i == 0 || l > c.q_identity_layers[i - 1]),
            "Q-identity layers must be ascending layers 1 ... " + std::to_string(c.layers) + ", got " +
                layer_list(c.q_identity_layers));
  }
  if (!c.q_identity_layers.empty()) {
    require(v.kind != VariantKind::q_identity, "Q-identity layers in a q-identity model (every layer is one)");
    require(!c.mla, "Q-identity layers in an MLA model");
    require(c.heads * c.head_dim == c.d, "Q-identity layers need heads x head width = d (" +
                                             std::to_string(c.heads) + " x " + std::to_string(c.head_dim) +
                                             " != " + std::to_string(c.d) + ")");
  }
  if (skipv1_family(v.kind)) {
    const double injected = v.skip_ratio * c.kv_heads;
    require(v.skip_ratio > 0 && v.skip_ratio < 1 && std::abs(injected - std::round(injected)) < 1e-9,
            "the skip ratio " + shortest(v.skip_ratio) + " must lie in (0, 1) and give whole heads of the " +
                std::to_string(c.kv_heads) + " key/value heads");
    require(c.layers >= 2 || v.source_layer == 0,
            to_string(v.kind) + " reuses a source layer's values in the layers after it: it needs --layers 2 or more "
            "(or --source-layer 0, SkipV0)");
    require(v.source_layer >= 0 && v.source_layer < c.layers,
            "the source layer must be 0 (SkipV0) or 1 ... L-1, got " + std::to_string(v.source_layer));
    const int own = c.kv_heads - int(std::lround(injected));
    if (v.strategy == Strategy::pooling || v.strategy == Strategy::odd_even || v.strategy == Strategy::dynamic ||
        v.strategy == Strategy::plus_resformer)
      require(2 * own == c.kv_heads, "the " + to_string(v.strategy) + " strategy is defined for a skip ratio of 1/2");
  }
  if (resformer_family(v.kind) || v.kind == VariantKind::resformer_cross)  // L = 1 keeps the default k = 1
    require(v.source_layer >= 1 && v.source_layer <= std::max(1, c.layers - 1),
            to_string(v.kind) + ": the source layer must be 1 ... L-1, got " + std::to_string(v.source_layer));
  if (v.kind == VariantKind::yoco_v || v.kind == VariantKind::skipv1_yoco)
    require(c.layers >= 2, to_string(v.kind) + " needs at least 2 layers");
  for (double x : {v.alpha, v.beta, v.lambda})
    require(std::isfinite(x), "variant weights must be finite");
}

std::map<std::string, std::string> to_metadata(const Config& c) {
  const Variant& v = c.variant;
  std::map<std::string, std::string> m{{"family", to_string(c.family)},
          {"layers", std::to_string(c.layers)},
          {"d", std::to_string(c.d)},
          {"heads", std::to_string(c.heads)},
          {"kv_heads", std::to_string(c.kv_heads)},
          {"head_dim", std::to_string(c.head_dim)},
          {"ffn", std::to_string(c.ffn)},
          {"vocab", std::to_string(c.vocab)},
          {"positions", std::to_string(c.positions)},
          {"tied", c.tied ? "true" : "false"},
          {"bias", c.bias ? "true" : "false"},
          {"gelu", kGelu.name(c.gelu)},
          {"norm_eps", real(c.norm_eps)},
          {"rope_theta", real(c.rope_theta)},
          {"mla", c.mla ? "true" : "false"},
          {"d_c", std::to_string(c.d_c)},
          {"d_r", std::to_string(c.d_r)},
          {"variant", to_string(v.kind)},
          {"alpha", real(v.alpha)},
          {"beta", real(v.beta)},
          {"lambda", real(v.lambda)},
          {"skip_ratio", real(v.skip_ratio)},
          {"source_layer", std::to_string(v.source_layer)},
          {"strategy", to_string(v.strategy)}};
  if (!c.norm) m["norm"] = "none";  // both written only when they differ from the default (lm/config.hpp)
  if (!c.q_identity_layers.empty()) m["q_identity_layers"] = layer_list(c.q_identity_layers);
  if (c.position_encoding != family_positions(c.family))
    m["position_encoding"] = to_string(c.position_encoding);
  if (c.rope_original_context > 0) {  // written only when on, so unscaled checkpoints keep their metadata
    m["rope_factor"] = real(c.rope_factor), m["rope_low_freq_factor"] = real(c.rope_low_freq_factor);
    m["rope_high_freq_factor"] = real(c.rope_high_freq_factor);
    m["rope_original_context"] = real(c.rope_original_context);
  }
  return m;
}

Config from_metadata(const std::map<std::string, std::string>& m) {
  auto get = [&](const char* key) -> const std::string& {
    const auto it = m.find(key);
    if (it == m.end()) throw UsageError(std::string("model configuration: no \"") + key + "\"");
    return it->second;
  };
  auto integer = [&](const char* key) {
    const std::string& s = get(key);
    try {
      std::size_t used = 0;
      const long long x = std::stoll(s, &used);
      if (used == s.size() && x >= -1 && x <= (1LL << 31) - 1) return int(x);
    } catch (const std::exception&) {
    }
    throw UsageError(std::string("model configuration: \"") + key + "\" is not an integer: " + s);
  };
  auto number = [&](const char* key) {
    const std::string& s = get(key);
    try {
      std::size_t used = 0;
      const double x = std::stod(s, &used);
      if (used == s.size() && std::isfinite(x)) return x;
    } catch (const std::exception&) {
    }
    throw UsageError(std::string("model configuration: \"") + key + "\" is not a finite number: " + s);
  };
  auto boolean = [&](const char* key) {
    const std::string& s = get(key);
    if (s == "true") return true;
    if (s == "false") return false;
    throw UsageError(std::string("model configuration: \"") + key + "\" is not true or false: " + s);
  };
  auto layers = [&](const char* key) {  // "2,5"
    std::vector<int> out;
    const std::string& s = get(key);
    for (std::size_t at = 0; at <= s.size();) {
      const std::size_t comma = std::min(s.find(',', at), s.size());
      const std::string item = s.substr(at, comma - at);
      std::size_t used = 0;
      int x = 0;
      try {
        x = std::stoi(item, &used);
      } catch (const std::exception&) {
      }
      if (item.empty() || used != item.size())
        throw UsageError(std::string("model configuration: \"") + key + "\" is not a list of layers: " + s);
      out.push_back(x);
      at = comma + 1;
    }
    return out;
  };
  Config c;
  c.family = parse_family(get("family"));
  c.layers = integer("layers"), c.d = integer("d"), c.heads = integer("heads"), c.kv_heads = integer("kv_heads");
  c.head_dim = integer("head_dim"), c.ffn = integer("ffn"), c.vocab = integer("vocab");
  c.positions = integer("positions");
  c.position_encoding = m.count("position_encoding") ? parse_position_encoding(get("position_encoding"))
                                                     : family_positions(c.family);
  c.tied = boolean("tied"), c.bias = boolean("bias");
  c.gelu = kGelu.parse(get("gelu"), "GELU form");
  c.norm_eps = number("norm_eps"), c.rope_theta = number("rope_theta");
  c.mla = boolean("mla"), c.d_c = integer("d_c"), c.d_r = integer("d_r");
  if (m.count("norm")) c.norm = parse_norm(c.family, get("norm"));
  if (m.count("q_identity_layers")) c.q_identity_layers = layers("q_identity_layers");
  if (m.count("rope_original_context")) {
    c.rope_factor = number("rope_factor"), c.rope_low_freq_factor = number("rope_low_freq_factor");
    c.rope_high_freq_factor = number("rope_high_freq_factor");
    c.rope_original_context = number("rope_original_context");
  }
  c.variant.kind = parse_variant(get("variant"));
  c.variant.alpha = number("alpha"), c.variant.beta = number("beta"), c.variant.lambda = number("lambda");
  c.variant.skip_ratio = number("skip_ratio"), c.variant.source_layer = integer("source_layer");
  c.variant.strategy = parse_strategy(get("strategy"));
  validate(c);
  return c;
}

}  // namespace qkvlab::lm
