// Each variant's defining property (docs/lm.md), read off the activation
// record of a forward pass on random weights: which values and keys a layer
// attends with, and with what weights. Every property is also checked to fail
// where it should not hold (a control), so a check that cannot fail is caught.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "core/errors.hpp"
#include "core/grouped_attention.hpp"
#include "core/rng.hpp"
#include "engine/cpu_backend.hpp"
#include "lm/model.hpp"
#include "lm_reference.hpp"

namespace {

using namespace qkvlab;
using namespace qkvlab::lm;

// A recorder that keeps every site of every layer (but the attention's own, with `outside`: a layer
// over two key/value segments refuses those).
struct KeepAll : Recorder<double> {
  std::map<std::pair<int, Site>, RowMat> data;  // (B·T, heads·width); pattern: (B·H·T, T)
  std::map<std::pair<int, Site>, int> width;
  bool outside = false;
  bool wants(Site site, int) const override {
    return !outside || (site != Site::pattern && site != Site::k && site != Site::v);
  }
  void record(const Activation<double>& a) override {
    const Eigen::Index rows = a.site == Site::pattern ? Eigen::Index(a.B) * a.heads * a.T : Eigen::Index(a.B) * a.T;
    const Eigen::Index cols = a.site == Site::pattern ? a.T : Eigen::Index(a.heads) * a.width;
    data[{a.layer, a.site}] = Eigen::Map<const RowMat>(a.data, rows, cols);
    width[{a.layer, a.site}] = a.width;
  }
  const RowMat& at(int layer, Site site) const { return data.at({layer, site}); }
  // Head h of a token-major site: (B·T, width).
  RowMat head(int layer, Site site, int h) const {
    const int w = width.at({layer, site});
    return at(layer, site).middleCols(Eigen::Index(h) * w, w);
  }
};

struct Run {
  Config config;
  engine::ParameterLayout layout;
  std::vector<double> values;
  KeepAll rec;
};

Config small(Family family, VariantKind kind, int layers = 4) {
  Config c = family_defaults(family, layers, 16, 4, 23, 16);
  c.ffn = 24;
  c.variant.kind = kind;
  return c;
}

std::unique_ptr<Run> run(const Config& c, std::uint64_t seed = 1, bool outside = false) {
  engine::CpuBackend<double> be(2);
  Model<double> model(c, be);
  auto r = std::make_unique<Run>(Run{c, model.parameters().layout, {}, {}});
  r->rec.outside = outside;
  r->values.assign(r->layout.total(), 0.0);
  for (const auto& spec : r->layout.specs()) {
    Rng rng(seed, spec.name);
    const bool gain = spec.shape.size() == 1 && spec.name.find(".weight") != std::string::npos;
    for (std::size_t i = 0; i < spec.size(); ++i) r->values[spec.offset + i] = gain ? 1 + 0.2 * rng.normal() : 0.3 * rng.normal();
  }
  model.set_parameters(r->values);
  std::vector<std::int32_t> ids;
  Rng rng(seed, "ids");
  for (int n = 0; n < 2 * 7; ++n) ids.push_back(rng.uniform_int(c.vocab));
  model.forward(ids.data(), nullptr, 2, 7, Pass::eval, 0, &r->rec);
  return r;
}

double diff(const RowMat& a, const RowMat& b) { return (a - b).norm() / std::max(1e-300, a.norm()); }

constexpr double kExact = 1e-13;   // the same values up to a few roundings
constexpr double kDiffers = 1e-3;  // a property that does not hold misses by far more

// The values layer l's own projection gives: N_1(resid_pre) W_V + b.
RowMat own_values(const Run& r, int l) {
  const Tensors w{r.layout, r.values};
  const std::string p = "h." + std::to_string(l) + ".";
  return ref_linear(ref_norm(r.rec.at(l, Site::resid_pre), w, p + "ln_1", r.config), w, p + "attn.v");
}

// The keys (queries: what = "q") layer l's own projection gives, after RoPE (llama): N_1(resid_pre) W + b.
RowMat own_keys(const Run& r, int l, const std::string& what = "k") {
  const Tensors w{r.layout, r.values};
  const std::string p = "h." + std::to_string(l) + ".";
  RowMat k = ref_linear(ref_norm(r.rec.at(l, Site::resid_pre), w, p + "ln_1", r.config), w, p + "attn." + what);
  if (r.config.rope())
    for (int b = 0; b < 2; ++b) {
      RowMat seq = k.middleRows(b * 7, 7);
      ref_rope(seq, what == "q" ? r.config.heads : r.config.kv_heads, r.config.head_dim, r.config.rope_theta);
      k.middleRows(b * 7, 7) = seq;
    }
  return k;
}

// A_n V per head, V (B·T, H_kv·d_h) the values layer l attends with (H = H_kv here).
RowMat attended(const Run& r, int l, const RowMat& v) {
  const int T = 7, B = 2, H = r.config.heads, dh = r.config.head_dim;
  RowMat out(B * T, H * dh);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      out.block(b * T, h * dh, T, dh) =
          r.rec.at(l, Site::pattern).middleRows((b * H + h) * T, T) * v.block(b * T, h * dh, T, dh);
  return out;
}

TEST(LmVariant, SVFormerLayersAttendWithLayerOnesValuesAndHoldNoValueWeights) {
  for (Family f : {Family::gpt2, Family::llama}) {
    const auto r = run(small(f, VariantKind::svformer));
    EXPECT_TRUE(r->layout.find("h.0.attn.v.weight"));
    for (int l = 1; l < 4; ++l) {
      EXPECT_FALSE(r->layout.find("h." + std::to_string(l) + ".attn.v.weight"));
      EXPECT_LT(diff(r->rec.at(0, Site::v), r->rec.at(l, Site::v)), kExact);
    }
    const auto vanilla = run(small(f, VariantKind::vanilla));  // control
    EXPECT_GT(diff(vanilla->rec.at(0, Site::v), vanilla->rec.at(2, Site::v)), kDiffers);
  }
}

TEST(LmVariant, SkipV1UpperHeadsAreLayerOnesAndLowerHeadsTheLayersOwn) {
  for (Family f : {Family::gpt2, Family::llama}) {
    const auto r = run(small(f, VariantKind::skipv1));
    const int dh = r->config.head_dim;
    EXPECT_EQ(r->layout.at("h.2.attn.v.weight").shape[1], 2 * dh);  // H' = 2 own heads
    for (int l = 1; l < 4; ++l)
      for (int h = 0; h < 4; ++h) {
        const double e = diff(r->rec.head(0, Site::v, h), r->rec.head(l, Site::v, h));
        if (h >= 2) EXPECT_LT(e, kExact) << "layer " << l + 1 << " head " << h;
        else EXPECT_GT(e, kDiffers) << "layer " << l + 1 << " head " << h;
      }
  }
}

TEST(LmVariant, SkipV0InjectedHeadsAreZero) {
  Config c = small(Family::gpt2, VariantKind::skipv1);
  c.variant.source_layer = 0;
  const auto r = run(c);
  for (int l = 1; l < 4; ++l) {
    EXPECT_EQ(r->rec.head(l, Site::v, 3).norm(), 0.0);
    EXPECT_GT(r->rec.head(l, Site::v, 1).norm(), kDiffers);
  }
}

TEST(LmVariant, SkipV1StrategiesFillTheInjectedHeadsAsStated) {
  for (Strategy s : {Strategy::pooling, Strategy::dynamic, Strategy::odd_even, Strategy::plus_resformer}) {
    Config c = small(Family::llama, VariantKind::skipv1);
    c.variant.strategy = s;
    const auto r = run(c);
    auto v0 = [&](int h) { return r->rec.head(0, Site::v, h); };
    for (int l = 1; l < 4; ++l) {
      const int n = l + 1;  // the paper's layer number
      for (int j = 0; j < 2; ++j) {
        RowMat expected;
        if (s == Strategy::pooling) expected = 0.5 * (v0(j) + v0(2 + j));
        if (s == Strategy::dynamic) expected = j == n % 2 ? v0(j) : v0(2 + j);
        if (s == Strategy::odd_even) expected = n % 2 ? v0(j) : v0(2 + j);
        if (s == Strategy::plus_resformer) expected = v0(2 + j);
        EXPECT_LT(diff(expected, r->rec.head(l, Site::v, 2 + j)), kExact) << to_string(s) << " layer " << n;
      }
      if (s == Strategy::plus_resformer) {
        const RowMat own = own_values(*r, l).leftCols(r->config.head_dim);
        EXPECT_LT(diff(own + v0(0), r->rec.head(l, Site::v, 0)), kExact);
        EXPECT_GT(diff(own, r->rec.head(l, Site::v, 0)), kDiffers);  // control: not the own head alone
      }
    }
  }
}

TEST(LmVariant, ResFormerValuesAreTheStatedMix) {
  for (Family f : {Family::gpt2, Family::llama})
    for (auto [alpha, beta] : {std::pair{0.5, 0.5}, std::pair{1.0, 2.0}}) {
      Config c = small(f, VariantKind::resformer);
      c.variant.alpha = alpha, c.variant.beta = beta;
      const auto r = run(c);
      for (int l = 1; l < 4; ++l) {
        const RowMat own = own_values(*r, l);
        EXPECT_LT(diff(alpha * own + beta * r->rec.at(0, Site::v), r->rec.at(l, Site::v)), kExact);
        EXPECT_GT(diff(own, r->rec.at(l, Site::v)), kDiffers);
      }
    }
}

TEST(LmVariant, NeuTRENOAddsLambdaTimesTheValueDifferenceOutsideTheAttention) {
  Config c = small(Family::gpt2, VariantKind::neutreno);
  c.variant.lambda = 0.4;
  const auto r = run(c);
  const int T = 7, B = 2, H = 4, dh = c.head_dim;
  for (int l = 1; l < 4; ++l)
    for (int h = 0; h < H; ++h) {
      RowMat attended(B * T, dh);
      for (int b = 0; b < B; ++b)
        attended.middleRows(b * T, T) = r->rec.at(l, Site::pattern).middleRows((b * H + h) * T, T) *
                                        r->rec.head(l, Site::v, h).middleRows(b * T, T);
      const RowMat direct = 0.4 * (r->rec.head(0, Site::v, h) - r->rec.head(l, Site::v, h));
      EXPECT_LT(diff(attended + direct, r->rec.head(l, Site::z, h)), 1e-12);
      EXPECT_GT(diff(attended, r->rec.head(l, Site::z, h)), kDiffers);
    }
}

// ResFormer's ablations (ResFormer paper Figs. 1 left, 4, 7, 8, 9), each against its formula in
// docs/lm.md computed here from the layers' own projections, with a control that misses.

// The released combination: V'_n = α V_n + β V_1 is attended, and λ (V_1 − V'_n) added outside.
TEST(LmVariant, ResFormerNeuTRENOAttendsTheMixAndAddsLambdaTimesItsDifference) {
  for (Family f : {Family::gpt2, Family::llama}) {
    Config c = small(f, VariantKind::resformer_neutreno);
    c.variant.lambda = 0.2;
    const auto r = run(c);
    const RowMat v1 = own_values(*r, 0);
    for (int l = 1; l < 4; ++l) {
      const RowMat mix = 0.5 * own_values(*r, l) + 0.5 * v1;
      EXPECT_LT(diff(mix, r->rec.at(l, Site::v)), kExact);
      const RowMat z = r->rec.at(l, Site::z), a = attended(*r, l, mix);
      EXPECT_LT(diff(a + 0.2 * (v1 - mix), z), 1e-12) << "layer " << l + 1;
      EXPECT_GT(diff(a + 0.2 * (v1 - own_values(*r, l)), z), kDiffers);  // control: NeuTRENO on the raw V_n
      EXPECT_GT(diff(a, z), kDiffers);                                    // control: ResFormer alone
    }
  }
}

TEST(LmVariant, ResFormerKMixesLayerOnesKeysAndLeavesTheValues) {
  for (Family f : {Family::gpt2, Family::llama}) {
    const auto r = run(small(f, VariantKind::resformer_k));
    for (int l = 1; l < 4; ++l) {
      EXPECT_LT(diff(0.5 * own_keys(*r, l) + 0.5 * own_keys(*r, 0), r->rec.at(l, Site::k)), kExact);
      EXPECT_GT(diff(own_keys(*r, l), r->rec.at(l, Site::k)), kDiffers);  // control: the own keys
      EXPECT_LT(diff(own_values(*r, l), r->rec.at(l, Site::v)), kExact);
    }
  }
}

TEST(LmVariant, ResFormerQMixesLayerOnesQueriesAndLeavesKeysAndValues) {
  for (Family f : {Family::gpt2, Family::llama}) {
    const auto r = run(small(f, VariantKind::resformer_q));
    EXPECT_LT(diff(own_keys(*r, 0, "q"), r->rec.at(0, Site::q)), kExact);
    for (int l = 1; l < 4; ++l) {
      const RowMat own = own_keys(*r, l, "q");
      EXPECT_LT(diff(0.5 * own + 0.5 * own_keys(*r, 0, "q"), r->rec.at(l, Site::q)), kExact) << "layer " << l + 1;
      EXPECT_GT(diff(own, r->rec.at(l, Site::q)), kDiffers);  // control: the own queries
      EXPECT_LT(diff(own_keys(*r, l), r->rec.at(l, Site::k)), kExact);
      EXPECT_LT(diff(own_values(*r, l), r->rec.at(l, Site::v)), kExact);
    }
  }
}

TEST(LmVariant, ResFormerSourceLayerKMixesLayerKsValuesIntoLaterLayersOnly) {
  Config c = small(Family::llama, VariantKind::resformer);
  c.variant.source_layer = 2;
  const auto r = run(c);
  EXPECT_LT(diff(own_values(*r, 1), r->rec.at(1, Site::v)), kExact);  // layer 2 ≤ k: standard
  for (int l = 2; l < 4; ++l) {
    const RowMat own = own_values(*r, l);
    EXPECT_LT(diff(0.5 * own + 0.5 * own_values(*r, 1), r->rec.at(l, Site::v)), kExact);
    EXPECT_GT(diff(0.5 * own + 0.5 * own_values(*r, 0), r->rec.at(l, Site::v)), kDiffers);  // control: V_1
  }
}

TEST(LmVariant, ResFormerPreviousAndAllMixTheStatedLayers) {
  const auto prev = run(small(Family::gpt2, VariantKind::resformer_previous));
  const auto all = run(small(Family::gpt2, VariantKind::resformer_all));
  for (int l = 1; l < 4; ++l) {
    const RowMat own = own_values(*prev, l);
    EXPECT_LT(diff(0.5 * own + 0.5 * own_values(*prev, l - 1), prev->rec.at(l, Site::v)), kExact);
    if (l > 1) {  // control: layer 1's values (at layer 2, the previous layer is layer 1)
      EXPECT_GT(diff(0.5 * own + 0.5 * own_values(*prev, 0), prev->rec.at(l, Site::v)), kDiffers);
    }
    RowMat mean = RowMat::Zero(own.rows(), own.cols());
    for (int i = 0; i <= l; ++i) mean += own_values(*all, i) / double(l + 1);  // Eq. 5: (1/n) Σ_{i ≤ n} V_i
    EXPECT_LT(diff(mean, all->rec.at(l, Site::v)), kExact) << "layer " << l + 1;
    if (l > 1) {  // control: ResFormer's mix (the same at layer 2)
      EXPECT_GT(diff(0.5 * own_values(*all, l) + 0.5 * own_values(*all, 0), all->rec.at(l, Site::v)), kDiffers);
    }
  }
}

// Eq. 6: U_n = A_n V_n + 1/(n−1) Σ_{i < n} V_i, the earlier values mapped by the identity.
TEST(LmVariant, ResFormerIdentityAddsTheMeanOfEarlierValuesOutsideTheAttention) {
  for (Family f : {Family::gpt2, Family::llama}) {
    const auto r = run(small(f, VariantKind::resformer_identity));
    for (int l = 1; l < 4; ++l) {
      const RowMat own = own_values(*r, l);
      EXPECT_LT(diff(own, r->rec.at(l, Site::v)), kExact);
      RowMat mean = RowMat::Zero(own.rows(), own.cols());
      for (int i = 0; i < l; ++i) mean += own_values(*r, i) / double(l);
      const RowMat z = r->rec.at(l, Site::z), a = attended(*r, l, own);
      EXPECT_LT(diff(a + mean, z), 1e-12) << "layer " << l + 1;
      if (l > 1) {
        EXPECT_GT(diff(a + own_values(*r, 0), z), kDiffers);  // control: V_1 alone (the same at layer 2)
      }
    }
  }
}

// Eq. 2, cross-layer attention, written out here: per sequence and query head h (key/value head
// g = h / (H/H_kv)), U_n = softmax(scale · Q_n [K_n; K_k]ᵀ + M) [V_n; V_k], M letting query t see
// key j of each segment iff j ≤ t. The faulty masks are the controls a kernel must not match:
// `open` drops the second segment's causal mask, `strict` its diagonal (j < t).
enum class SecondMask { causal, open, strict };

RowMat cross_layer(const Run& r, int l, int k, SecondMask mask) {
  const int T = 7, B = 2, H = r.config.heads, dh = r.config.head_dim, group = H / r.config.kv_heads;
  const RowMat Q = own_keys(r, l, "q"), K[] = {own_keys(r, l), own_keys(r, k)},
               V[] = {own_values(r, l), own_values(r, k)};
  const double scale = r.config.attention_scale(l);
  RowMat U(B * T, H * dh);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int g = h / group;
      for (int t = 0; t < T; ++t) {
        std::vector<double> score;
        std::vector<Eigen::RowVectorXd> value;
        for (int seg = 0; seg < 2; ++seg)
          for (int j = 0; j < T; ++j) {
            const bool seen = seg == 0 || mask == SecondMask::causal ? j <= t : mask == SecondMask::open || j < t;
            if (!seen) continue;
            score.push_back(scale * Q.row(b * T + t).segment(h * dh, dh).dot(K[seg].row(b * T + j).segment(g * dh, dh)));
            value.push_back(V[seg].row(b * T + j).segment(g * dh, dh));
          }
        const double top = *std::max_element(score.begin(), score.end());
        double sum = 0;
        for (double& x : score) sum += (x = std::exp(x - top));
        Eigen::RowVectorXd u = Eigen::RowVectorXd::Zero(dh);
        for (std::size_t i = 0; i < score.size(); ++i) u += score[i] / sum * value[i];
        U.row(b * T + t).segment(h * dh, dh) = u;
      }
    }
  return U;
}

// The same weights under Eq. 3 (ResFormer, α = β = ½) and Eq. 6 (the identity mapping), from layer l's
// own queries, keys and values: U = softmax(scale Q Kᵀ + causal mask) V' (+ E outside).
RowMat single_segment(const Run& r, int l, const RowMat& values, const RowMat& outside) {
  const int T = 7, B = 2, H = r.config.heads, dh = r.config.head_dim, group = H / r.config.kv_heads;
  const RowMat Q = own_keys(r, l, "q"), K = own_keys(r, l);
  RowMat U(B * T, H * dh);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int g = h / group;
      RowMat S = r.config.attention_scale(l) * Q.block(b * T, h * dh, T, dh) * K.block(b * T, g * dh, T, dh).transpose();
      for (int t = 0; t < T; ++t) {
        const double top = S.row(t).head(t + 1).maxCoeff();
        S.row(t).head(t + 1) = (S.row(t).head(t + 1).array() - top).exp().matrix();
        S.row(t).head(t + 1) /= S.row(t).head(t + 1).sum();
        S.row(t).tail(T - t - 1).setZero();
      }
      U.block(b * T, h * dh, T, dh) = S * values.block(b * T, g * dh, T, dh) + outside.block(b * T, g * dh, T, dh);
    }
  return U;
}

TEST(LmVariant, ResFormerCrossAttendsOverItsOwnAndLayerOnesKeysAndValues) {
  for (Family f : {Family::gpt2, Family::llama})
    for (int kv_heads : {4, 2}) {  // MHA and GQA
      Config c = small(f, VariantKind::resformer_cross);
      c.kv_heads = kv_heads;
      const auto r = run(c, 1, true);
      const std::string what = to_string(f) + " H_kv " + std::to_string(kv_heads);
      EXPECT_LT(diff(single_segment(*r, 0, own_values(*r, 0), RowMat::Zero(14, kv_heads * 4)), r->rec.at(0, Site::z)),
                1e-12) << what << ": layer 1 is standard";
      for (int l = 1; l < 4; ++l) {
        const RowMat z = r->rec.at(l, Site::z), v1 = own_values(*r, 0), own = own_values(*r, l);
        const RowMat U = cross_layer(*r, l, 0, SecondMask::causal);
        EXPECT_LT(diff(U, z), 1e-12) << what << " layer " << l + 1;
        // The reference is the claims' Eq. 2 (core/grouped_attention.hpp) on sequence 0, head 1.
        const int g = 1 / (4 / kv_heads);
        const MatD q = own_keys(*r, l, "q").block(0, 4, 7, 4), k_n = own_keys(*r, l).block(0, g * 4, 7, 4),
                   k_1 = own_keys(*r, 0).block(0, g * 4, 7, 4), v_n = own.block(0, g * 4, 7, 4),
                   v_1 = v1.block(0, g * 4, 7, 4);
        const MatD claims = cross_layer_attention<double>(q, {k_n, k_1}, {v_n, v_1}, Mask::causal,
                                                          1 / c.attention_scale(l));
        EXPECT_LT(diff(RowMat(claims), RowMat(U.block(0, 4, 7, 4))), 1e-13);
        // Controls, by a wide margin: the faulty masks, Eq. 3 and Eq. 6 on the same weights.
        EXPECT_GT(diff(cross_layer(*r, l, 0, SecondMask::open), z), 1e-2) << what << " layer " << l + 1;
        EXPECT_GT(diff(cross_layer(*r, l, 0, SecondMask::strict), z), 1e-2) << what << " layer " << l + 1;
        const RowMat zero = RowMat::Zero(own.rows(), own.cols());
        EXPECT_GT(diff(single_segment(*r, l, 0.5 * own + 0.5 * v1, zero), z), 1e-2) << "Eq. 3, layer " << l + 1;
        RowMat mean = zero;
        for (int i = 0; i < l; ++i) mean += own_values(*r, i) / double(l);
        EXPECT_GT(diff(single_segment(*r, l, own, mean), z), 1e-2) << "Eq. 6, layer " << l + 1;
      }
    }
}

TEST(LmVariant, ResFormerCrossSourceLayerTwoAndRefusedPatterns) {
  Config c = small(Family::llama, VariantKind::resformer_cross);
  c.variant.source_layer = 2;
  const auto r = run(c, 1, true);
  for (int l = 2; l < 4; ++l) {
    EXPECT_LT(diff(cross_layer(*r, l, 1, SecondMask::causal), r->rec.at(l, Site::z)), 1e-12);
    EXPECT_GT(diff(cross_layer(*r, l, 0, SecondMask::causal), r->rec.at(l, Site::z)), 1e-2);  // control: layer 1
  }
  EXPECT_THROW(run(c), UsageError);  // patterns over 2T keys are not recorded as one layer's
}

TEST(LmVariant, ClaKAndClaKvReuseTheOddLayersKeys) {
  for (VariantKind k : {VariantKind::cla_k, VariantKind::cla_kv}) {
    const auto r = run(small(Family::llama, k));
    for (int l : {1, 3}) {
      EXPECT_LT(diff(r->rec.at(l - 1, Site::k), r->rec.at(l, Site::k)), kExact) << to_string(k);
      EXPECT_FALSE(r->layout.find("h." + std::to_string(l) + ".attn.k.weight"));
      const double values = diff(r->rec.at(l - 1, Site::v), r->rec.at(l, Site::v));
      if (k == VariantKind::cla_kv) EXPECT_LT(values, kExact);
      else EXPECT_GT(values, kDiffers);  // CLA-K keeps each layer's values
      EXPECT_EQ(bool(r->layout.find("h." + std::to_string(l) + ".attn.v.weight")), k == VariantKind::cla_k);
    }
    EXPECT_GT(diff(r->rec.at(1, Site::k), r->rec.at(2, Site::k)), kDiffers);  // control: layer 3 has its own
    EXPECT_TRUE(r->layout.find("h.2.attn.k.weight"));
  }
}

TEST(LmVariant, YocoVAndClaVReuseTheStatedLayersValues) {
  const auto yoco = run(small(Family::gpt2, VariantKind::yoco_v));
  EXPECT_LT(diff(yoco->rec.at(1, Site::v), yoco->rec.at(2, Site::v)), kExact);
  EXPECT_LT(diff(yoco->rec.at(1, Site::v), yoco->rec.at(3, Site::v)), kExact);
  EXPECT_GT(diff(yoco->rec.at(0, Site::v), yoco->rec.at(1, Site::v)), kDiffers);
  EXPECT_FALSE(yoco->layout.find("h.2.attn.v.weight"));
  const auto cla = run(small(Family::llama, VariantKind::cla_v));
  EXPECT_LT(diff(cla->rec.at(0, Site::v), cla->rec.at(1, Site::v)), kExact);
  EXPECT_LT(diff(cla->rec.at(2, Site::v), cla->rec.at(3, Site::v)), kExact);
  EXPECT_GT(diff(cla->rec.at(1, Site::v), cla->rec.at(2, Site::v)), kDiffers);
  EXPECT_FALSE(cla->layout.find("h.1.attn.v.weight"));
  EXPECT_TRUE(cla->layout.find("h.2.attn.v.weight"));
}

TEST(LmVariant, SkipKV1AndSkipV1YocoReuseKeys) {
  const auto kv = run(small(Family::llama, VariantKind::skipkv1));
  for (int l = 1; l < 4; ++l) {
    EXPECT_LT(diff(kv->rec.head(0, Site::k, 3), kv->rec.head(l, Site::k, 3)), kExact);
    EXPECT_GT(diff(kv->rec.head(0, Site::k, 0), kv->rec.head(l, Site::k, 0)), kDiffers);
  }
  const auto yoco = run(small(Family::gpt2, VariantKind::skipv1_yoco));
  for (int l : {2, 3}) {
    EXPECT_LT(diff(yoco->rec.at(1, Site::k), yoco->rec.at(l, Site::k)), kExact);
    EXPECT_LT(diff(yoco->rec.head(0, Site::v, 2), yoco->rec.head(l, Site::v, 2)), kExact);
    EXPECT_FALSE(yoco->layout.find("h." + std::to_string(l) + ".attn.k.weight"));
  }
  EXPECT_GT(diff(yoco->rec.at(0, Site::k), yoco->rec.at(1, Site::k)), kDiffers);
}

TEST(LmVariant, QIdentityQueryIsTheNormalizedInput) {
  for (Family f : {Family::gpt2, Family::llama}) {
    const auto r = run(small(f, VariantKind::q_identity));
    const Tensors w{r->layout, r->values};
    for (int l = 0; l < 4; ++l) {
      RowMat n1 = ref_norm(r->rec.at(l, Site::resid_pre), w, "h." + std::to_string(l) + ".ln_1", r->config);
      if (f == Family::llama)
        for (int b = 0; b < 2; ++b) {
          RowMat seq = n1.middleRows(b * 7, 7);
          ref_rope(seq, 4, r->config.head_dim, r->config.rope_theta);
          n1.middleRows(b * 7, 7) = seq;
        }
      EXPECT_LT(diff(n1, r->rec.at(l, Site::q)), 1e-12);
      EXPECT_FALSE(r->layout.find("h." + std::to_string(l) + ".attn.q.weight"));
    }
    EXPECT_DOUBLE_EQ(r->config.attention_scale(0), 0.5 / std::sqrt(4.0));
  }
}

TEST(LmVariant, DenseFormerMixesTheBlockOutputsWithItsWeights) {
  const auto r = run(small(Family::gpt2, VariantKind::denseformer));
  std::vector<RowMat> Y{r->rec.at(0, Site::resid_pre)};  // Y_0: the embedding output
  for (int l = 0; l < 4; ++l) {
    Y.push_back(r->rec.at(l, Site::resid_pre) + r->rec.at(l, Site::attn_out) + r->rec.at(l, Site::mlp_out));
    const auto& spec = r->layout.at("h." + std::to_string(l) + ".dwa");
    RowMat mix = RowMat::Zero(Y[0].rows(), Y[0].cols());
    for (int j = 0; j <= l + 1; ++j) mix += r->values[spec.offset + std::size_t(j)] * Y[std::size_t(j)];
    EXPECT_LT(diff(mix, r->rec.at(l, Site::resid_post)), 1e-12) << "layer " << l + 1;
    EXPECT_GT(diff(Y.back(), r->rec.at(l, Site::resid_post)), kDiffers);  // the random weights do mix
  }
}

TEST(LmVariant, SkipV1MlaTakesTheUpperLatentSlotsFromLayerOne) {
  Config c = small(Family::llama, VariantKind::skipv1);
  c.mla = true, c.d_c = 8, c.d_r = 4;  // 4 slots of width 2: layers 2 … 4 own the first two
  const auto r = run(c);
  const Tensors w{r->layout, r->values};
  auto latent = [&](int l) {
    const std::string p = "h." + std::to_string(l) + ".";
    return RowMat(ref_norm(r->rec.at(l, Site::resid_pre), w, p + "ln_1", c) * w.matrix(p + "attn.dkv.weight"));
  };
  const RowMat c1 = latent(0);
  EXPECT_EQ(c1.cols(), 8);
  for (int l = 1; l < 4; ++l) {
    const RowMat own = latent(l);
    EXPECT_EQ(own.cols(), 4);
    RowMat mixed(own.rows(), 8);
    mixed << own, c1.rightCols(4);
    const RowMat W_uv = w.matrix("h." + std::to_string(l) + ".attn.uv.weight");
    EXPECT_LT(diff(RowMat(mixed * W_uv), r->rec.at(l, Site::v)), 1e-12) << "layer " << l + 1;
    EXPECT_GT(diff(RowMat(c1 * W_uv), r->rec.at(l, Site::v)), kDiffers);  // control: not layer 1's whole latent
  }
}

TEST(LmVariant, PatternsAreCausalAndRowStochastic) {
  const auto r = run(small(Family::llama, VariantKind::vanilla));
  for (int l = 0; l < 4; ++l) {
    const RowMat& P = r->rec.at(l, Site::pattern);
    for (Eigen::Index row = 0; row < P.rows(); ++row) {
      const Eigen::Index t = row % 7;
      EXPECT_NEAR(P.row(row).sum(), 1.0, 1e-14);
      EXPECT_EQ(P.row(row).tail(6 - t).norm(), 0.0);
    }
  }
}

}  // namespace
