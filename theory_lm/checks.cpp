// The claims' checkpoint forms (checks.hpp). The math is core's (softmax and one
// head: core/attention.hpp; changes of basis: core/linalg.hpp; norms:
// core/normalize.hpp), RoPE the engine's kernel (engine/kernels/rope.hpp) on a
// table computed at S, and the norm identities theory's (theory/norm_checks.hpp).
#include "theory_lm/checks.hpp"

#include <algorithm>
#include <limits>

#include "core/attention.hpp"
#include "core/limits.hpp"
#include "core/normalize.hpp"
#include "engine/kernels/rope.hpp"
#include "lm/parameters.hpp"
#include "theory/attention_freedoms.hpp"
#include "theory/norm_checks.hpp"

namespace qkvlab::theory_lm {
// Helpers in a named namespace: the templates below capture their types, which a unity build
// would otherwise warn about (-Wsubobject-linkage).
namespace site_helpers {

using theory::control_by_detection;
using theory::control_by_error;
using theory::Outcome;
template <class S> using RowMajor = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class S> Vec<S> vector_of(const MatD& row) { return cast<S>(MatD(row.transpose())).col(0); }

// The inputs (rows) reaching a norm, and the norm's tensor prefix.
const MatD& norm_input(const CheckpointData& data, int layer, NormSite site, MatD& scratch) {
  const Activations& a = data.activations;
  if (site == NormSite::attention) return a.resid_pre[std::size_t(layer)];
  if (site == NormSite::final) return a.resid_final;
  scratch = a.resid_pre[std::size_t(layer)] + a.attn_out[std::size_t(layer)];
  return scratch;
}

std::string norm_prefix(int layer, NormSite site) {
  return site == NormSite::final ? "ln_f" : lm::layer_tensor(layer, site == NormSite::attention ? "ln_1" : "ln_2");
}

// The model's own norm of the rows of X at S: LayerNorm (gpt2) or RMSNorm (llama), gain, bias;
// X itself in a model without norms (--norm none).
template <class S> Mat<S> model_norm(const ModelWeights& w, const std::string& prefix, const MatD& X) {
  if (!w.config.norm) return cast<S>(X);
  const Mat<S> Xt = cast<S>(MatD(X.transpose()));
  const Vec<S> g = vector_of<S>(w.at(prefix + ".weight"));
  const double eps = w.config.norm_eps;
  Mat<S> N = w.config.family == lm::Family::gpt2 ? layer_norm<S>(Xt, g, eps) : Mat<S>(g.asDiagonal() * rms_norm<S>(Xt, eps));
  if (w.has(prefix + ".bias")) N.colwise() += vector_of<S>(w.at(prefix + ".bias"));
  return N.transpose();
}

// RoPE at S: angles t·ω_i with the model's frequencies ω_i (double) promoted to S, so
// that R_t R_sᵀ = R_{t−s} holds to S's rounding; the kernel is the engine's.
template <class S> struct Rope {
  int dh = 0;
  std::vector<S> table;  // (t·dh/2 + i)·2 + {0, 1}: cos, sin

  Rope(const lm::Config& c, int T) : dh(c.head_dim), table(std::size_t(T) * std::size_t(c.head_dim)) {
    using std::cos;
    using std::sin;
    const auto f = c.rope_frequencies();
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < dh / 2; ++i) {
        const S angle = S(t) * S(f.omega(i, dh));
        table[(std::size_t(t) * std::size_t(dh / 2) + std::size_t(i)) * 2] = cos(angle);
        table[(std::size_t(t) * std::size_t(dh / 2) + std::size_t(i)) * 2 + 1] = sin(angle);
      }
  }
  // Row t of X (positions 0 … T−1) rotated to position t.
  Mat<S> rotate(const Mat<S>& X) const {
    RowMajor<S> R = X;
    engine::kernels::rope_rows<S>(0, int(X.rows()), int(X.rows()), 1, dh, dh, table.data(), false, R.data());
    return R;
  }
  // R_t: x R_t is x rotated to position t.
  Mat<S> matrix(int t) const {
    RowMajor<S> R = RowMajor<S>::Identity(dh, dh);
    engine::kernels::rope_rows<S>(0, dh, 1, 1, dh, dh, table.data() + std::size_t(t) * std::size_t(dh), false, R.data());
    return R;
  }
};

// One attention layer at S: the normalized, augmented input and the head blocks.
template <class S> struct Weights {
  std::vector<Mat<S>> Q, K, V, O;  // Q[h], K[g], V[g]: (d+1)×d_h; O[h]: d_h×d
};

template <class S> struct Layer {
  int heads = 0, kv_heads = 0, dh = 0, sequences = 0, T = 0;
  S scale;
  Mat<S> X;  // (B·T) × (d + 1)
  Weights<S> w;
  std::optional<Rope<S>> rope;
  int group(int h) const { return h / (heads / kv_heads); }
  Mat<S> input(int b) const { return X.middleRows(Eigen::Index(b) * T, T); }
};

template <class S> Layer<S> attention_layer(const CheckpointData& data, int l) {
  const ModelWeights& mw = data.weights;
  const lm::Config& c = mw.config;
  using std::sqrt;
  Layer<S> L{c.heads, c.kv_heads, c.head_dim, data.activations.sequences, data.activations.length, sqrt(S(c.head_dim)), {}, {}, {}};
  const Mat<S> N = model_norm<S>(mw, norm_prefix(l, NormSite::attention), data.activations.resid_pre[std::size_t(l)]);
  L.X.resize(N.rows(), N.cols() + 1);
  L.X << N, Mat<S>::Ones(N.rows(), 1);
  const Mat<S> Q = cast<S>(mw.augmented(l, "attn.q")), K = cast<S>(mw.augmented(l, "attn.k")),
               V = cast<S>(mw.augmented(l, "attn.v"));
  const Mat<S> O = cast<S>(mw.layer(l, "attn.o.weight"));
  for (int h = 0; h < c.heads; ++h) {
    L.w.Q.push_back(Q.middleCols(h * L.dh, L.dh));
    L.w.O.push_back(O.middleRows(h * L.dh, L.dh));
  }
  for (int g = 0; g < c.kv_heads; ++g) {
    L.w.K.push_back(K.middleCols(g * L.dh, L.dh));
    L.w.V.push_back(V.middleCols(g * L.dh, L.dh));
  }
  if (c.rope()) L.rope.emplace(c, L.T);
  return L;
}

template <class S> Mat<S> causal_part(Mat<S> logits) {
  for (Eigen::Index i = 0; i < logits.rows(); ++i)
    for (Eigen::Index j = i + 1; j < logits.cols(); ++j) logits(i, j) = S(0);
  return logits;
}

// Queries or keys of sequence b, rotated under RoPE.
template <class S> Mat<S> project(const Layer<S>& L, int b, const Mat<S>& W) {
  const Mat<S> P = L.input(b) * W;
  return L.rope ? L.rope->rotate(P) : P;
}

// The causal logits of one head over every sequence, stacked ((B·T) × T).
template <class S> Mat<S> head_logits(const Layer<S>& L, const Mat<S>& Wq, const Mat<S>& Wk) {
  Mat<S> out(Eigen::Index(L.sequences) * L.T, L.T);
  for (int b = 0; b < L.sequences; ++b)
    out.middleRows(Eigen::Index(b) * L.T, L.T) = causal_part<S>((project(L, b, Wq) * project(L, b, Wk).transpose()) / L.scale);
  return out;
}

// One head's output A V (W_O when given), over every sequence.
template <class S>
Mat<S> head_output(const Layer<S>& L, const Mat<S>& Wq, const Mat<S>& Wk, const Mat<S>& Wv, const Mat<S>* Wo) {
  Mat<S> out(Eigen::Index(L.sequences) * L.T, Wo ? Wo->cols() : Wv.cols());
  for (int b = 0; b < L.sequences; ++b) {
    const Mat<S> z = attention_head<S>(project(L, b, Wq), project(L, b, Wk), Mat<S>(L.input(b) * Wv), Mask::causal, L.scale);
    out.middleRows(Eigen::Index(b) * L.T, L.T) = Wo ? Mat<S>(z * *Wo) : z;
  }
  return out;
}

// Every head's logits stacked, and SA = [head_1 … head_H] (before W_O).
template <class S> Mat<S> all_logits(const Layer<S>& L, const Weights<S>& w) {
  Mat<S> out(Eigen::Index(L.heads) * L.sequences * L.T, L.T);
  for (int h = 0; h < L.heads; ++h)
    out.middleRows(Eigen::Index(h) * L.sequences * L.T, Eigen::Index(L.sequences) * L.T) = head_logits(L, w.Q[h], w.K[L.group(h)]);
  return out;
}
template <class S> Mat<S> self_attention(const Layer<S>& L, const Weights<S>& w) {
  Mat<S> out(Eigen::Index(L.sequences) * L.T, Eigen::Index(L.heads) * L.dh);
  for (int h = 0; h < L.heads; ++h)
    out.middleCols(Eigen::Index(h) * L.dh, L.dh) = head_output<S>(L, w.Q[h], w.K[L.group(h)], w.V[L.group(h)], nullptr);
  return out;
}

// A d_h×d_h block commuting with every rotation: a I + b J on each pair (i, i + d_h/2),
// drawn on cond₂ ≤ 1.7e4 (cond₂ = max/min of sqrt(a² + b²)).
MatD commutant_block(Rng& rng, int dh) {
  return draw_until(
      default_max_attempts, "cond_2(M) <= 1.7e4 for a block of the rotations' commutant",
      [&] {
        MatD M = MatD::Zero(dh, dh);
        const MatD ab = rng.gaussian(dh / 2, 2);
        for (int i = 0, half = dh / 2; i < half; ++i) {
          M(i, i) = M(i + half, i + half) = ab(i, 0);
          M(i, i + half) = ab(i, 1);
          M(i + half, i) = -ab(i, 1);
        }
        return M;
      },
      [&](const MatD& M) {
        const auto sv = Eigen::JacobiSVD<MatD>(M).singularValues();
        return sv(dh - 1) > 0 && sv(0) / sv(dh - 1) <= max_basis_condition;
      });
}

// The freedom's block for one key head: in the commutant under RoPE, else Gaussian.
template <class S> ChangeOfBasis<S> freedom_block(const Layer<S>& L, Rng& rng, bool respect_rope = true) {
  return change_of_basis<S>(
      cast<S>(L.rope && respect_rope ? commutant_block(rng, L.dh) : draw_basis(rng, L.dh, 1.0 / std::sqrt(double(L.dh)))));
}

std::string pair_note(const char* what) { return std::string("compared: ") + what; }

}  // namespace site_helpers
using namespace site_helpers;

template <class S> Outcome head_reparametrization(const CheckpointData& data, int layer, int h, bool qk, Rng& rng) {
  const Layer<S> L = attention_layer<S>(data, layer);
  const int g = L.group(h);
  const Mat<S>&Wq = L.w.Q[h], &Wk = L.w.K[g], &Wv = L.w.V[g], &Wo = L.w.O[h];
  const auto M = freedom_block<S>(L, rng, qk);
  Outcome o;
  o.kappa = M.kappa;
  o.singular = M.singular();
  const Mat<S> reference = head_output<S>(L, Wq, Wk, Wv, &Wo);
  if (qk) {
    const Mat<S> Wq_M = Wq * M.T, Wk_M = Wk * M.T_inv.transpose(), ref_logits = head_logits(L, Wq, Wk);
    o.rel_err = std::max(rel_err<S>(ref_logits, head_logits(L, Wq_M, Wk_M)), rel_err<S>(reference, head_output<S>(L, Wq_M, Wk_M, Wv, &Wo)));
    o.note = pair_note(L.rope ? "logits and output; M in the commutant of the rotations" : "logits and output");
    o.controls.push_back(control_by_error("M applied to W_Q only", rel_err<S>(ref_logits, head_logits(L, Wq_M, Wk))));
    if (L.rope) {
      const auto G = freedom_block<S>(L, rng, false);
      o.controls.push_back(control_by_error("generic M (not in the rotations' commutant)",
                                            rel_err<S>(ref_logits, head_logits(L, Mat<S>(Wq * G.T), Mat<S>(Wk * G.T_inv.transpose())))));
    }
  } else {
    const Mat<S> Wv_M = Wv * M.T, Wo_M = M.T_inv * Wo;
    o.rel_err = rel_err<S>(reference, head_output<S>(L, Wq, Wk, Wv_M, &Wo_M));
    o.note = pair_note("output");
    o.controls.push_back(control_by_error("M applied to W_V only", rel_err<S>(reference, head_output<S>(L, Wq, Wk, Wv_M, &Wo))));
  }
  const auto ns = change_of_basis<S>(theory::near_singular<S>(rng, L.dh));
  o.controls.push_back(control_by_detection("near-singular M (cond ~ 1/(10u)) detected", ns.singular(), NAN));
  return o;
}

template <class S> Outcome two_matrix_head(const CheckpointData& data, int layer, int h, Rng&) {
  const Layer<S> L = attention_layer<S>(data, layer);
  const int g = L.group(h);
  const Mat<S>&Wq = L.w.Q[h], &Wk = L.w.K[g];
  const Mat<S> W_VO = L.w.V[g] * L.w.O[h];
  // The logits x_t P_{t−s} x_sᵀ / s from one matrix per offset (one for every offset without RoPE).
  // With `magnitudes`, |x_t| |P_{t−s}| |x_s|ᵀ / s instead: the sums of the products' magnitudes.
  auto from_matrices = [&](const std::function<Mat<S>(int)>& P, bool magnitudes = false) {
    Mat<S> out(Eigen::Index(L.sequences) * L.T, L.T);
    for (int b = 0; b < L.sequences; ++b) {
      const Mat<S> X = magnitudes ? Mat<S>(L.input(b).cwiseAbs()) : L.input(b);
      Mat<S> s = Mat<S>::Zero(L.T, L.T);
      for (int delta = 0; delta < L.T; ++delta) {
        const Mat<S> XP = X * (magnitudes ? Mat<S>(P(delta).cwiseAbs()) : P(delta));
        for (int t = delta; t < L.T; ++t) s(t, t - delta) = XP.row(t).dot(X.row(t - delta)) / L.scale;
      }
      out.middleRows(Eigen::Index(b) * L.T, L.T) = s;
    }
    return out;
  };
  auto rotated = [&](const Mat<S>& A, const Mat<S>& B, bool rotate) {
    return [&, rotate](int delta) { return Mat<S>(rotate ? Mat<S>(A * L.rope->matrix(delta) * B.transpose()) : Mat<S>(A * B.transpose())); };
  };
  const bool rope = L.rope.has_value();
  const Mat<S> ref_logits = head_logits(L, Wq, Wk), two = from_matrices(rotated(Wq, Wk, rope));
  Mat<S> output(ref_logits.rows(), W_VO.cols());
  for (int b = 0; b < L.sequences; ++b) {
    const Mat<S> A = softmax_rows<S>(two.middleRows(Eigen::Index(b) * L.T, L.T), Mask::causal);
    output.middleRows(Eigen::Index(b) * L.T, L.T) = A * L.input(b) * W_VO;
  }
  Outcome o;
  o.rel_err = std::max(rel_err<S>(ref_logits, two), rel_err<S>(head_output<S>(L, Wq, Wk, L.w.V[g], &L.w.O[h]), output));
  // The logits' condition as sums of products (‖|x_t||P||x_s|ᵀ‖_F / ‖x_t P x_sᵀ‖_F, at least 1): the
  // cancellation that amplifies rounding, large where a change of basis (`lm eliminate`) scaled W_Q, W_K.
  o.kappa = std::max(1.0, double(from_matrices(rotated(Wq, Wk, rope), true).norm() / two.norm()));
  o.note = pair_note(rope ? "logits from W_Q R_(t-s) W_K^T per offset, and output from W_VO" : "logits from W_QK, and output from W_VO");
  o.controls.push_back(control_by_error("W_K W_Q^T in place of W_Q W_K^T", rel_err<S>(ref_logits, from_matrices(rotated(Wk, Wq, rope)))));
  if (rope) {
    o.controls.push_back(control_by_error("W_Q W_K^T without the rotation R_(t-s)", rel_err<S>(ref_logits, from_matrices(rotated(Wq, Wk, false)))));
  } else if (L.heads > 1) {
    Mat<S> merged = Mat<S>::Zero(Wq.rows(), Wk.rows());
    for (int k = 0; k < L.heads; ++k) merged += L.w.Q[k] * L.w.K[L.group(k)].transpose();
    o.controls.push_back(control_by_error("W_QK summed over the layer's heads", rel_err<S>(ref_logits, from_matrices([&](int) { return merged; }))));
  }
  return o;
}

// The layer as core/grouped_attention.hpp's weights: the augmented input's (W; b) blocks side by
// side, the model's RoPE frequencies.
template <class S> GroupedAttention<S> grouped(const Layer<S>& L, const lm::Config& c) {
  GroupedAttention<S> w;
  auto side_by_side = [](const std::vector<Mat<S>>& blocks) {
    Mat<S> out(blocks[0].rows(), Eigen::Index(blocks.size()) * blocks[0].cols());
    for (std::size_t i = 0; i < blocks.size(); ++i) out.middleCols(Eigen::Index(i) * blocks[0].cols(), blocks[0].cols()) = blocks[i];
    return out;
  };
  w.W_Q = side_by_side(L.w.Q), w.W_K = side_by_side(L.w.K), w.W_V = side_by_side(L.w.V);
  w.W_O = Mat<S>(L.heads * L.dh, L.w.O[0].cols());
  for (int h = 0; h < L.heads; ++h) w.W_O.middleRows(h * L.dh, L.dh) = L.w.O[h];
  w.heads = L.heads, w.kv_heads = L.kv_heads;
  if (L.rope)
    for (int i = 0; i < L.dh / 2; ++i) w.rope.push_back(c.rope_frequencies().omega(i, L.dh));
  return w;
}

// out(X; w) of every sequence, stacked.
template <class S> Mat<S> layer_output(const Layer<S>& L, const GroupedAttention<S>& w) {
  Mat<S> out(Eigen::Index(L.sequences) * L.T, w.W_O.cols());
  for (int b = 0; b < L.sequences; ++b) out.middleRows(Eigen::Index(b) * L.T, L.T) = grouped_attention<S>(L.input(b), w, Mask::causal);
  return out;
}

template <class S> Outcome value_freedom(const CheckpointData& data, int layer, Rng& rng) {
  const Layer<S> L = attention_layer<S>(data, layer);
  const GroupedAttention<S> w = grouped<S>(L, data.weights.config);
  std::vector<ChangeOfBasis<S>> N;
  for (int g = 0; g < L.kv_heads; ++g) N.push_back(freedom_block<S>(L, rng, false));
  const Mat<S> reference = layer_output<S>(L, w);
  const theory::Deviation d = theory::conditioning<S>(N);
  Outcome o;
  o.kappa = d.kappa, o.singular = d.singular;
  o.rel_err = rel_err<S>(reference, layer_output<S>(L, with_vo_freedom<S>(w, N)));
  o.note = pair_note("the layer's attention output with W_V^g N_g, N_g^-1 W_O^h");
  const Eigen::Index width = w.W_V.cols();
  const auto F = change_of_basis<S>(cast<S>(draw_basis(rng, width, 1.0 / std::sqrt(double(width)))));
  GroupedAttention<S> values_only = w;
  values_only.W_V = w.W_V * F.T;
  o.controls.push_back(control_by_error("full N applied to W_V only", rel_err<S>(reference, layer_output<S>(L, values_only))));
  std::vector<ChangeOfBasis<S>> contragredient = N;  // W_O^h ↦ N_g⁻ᵀ W_O^h: the QK pair's rule in place of N_g⁻¹
  for (auto& b : contragredient) b.T_inv = Mat<S>(b.T_inv.transpose());
  o.controls.push_back(control_by_error("N^-T (Prop. 4.2's contragredient) in place of N^-1 on W_O",
                                        rel_err<S>(reference, layer_output<S>(L, with_vo_freedom<S>(w, contragredient)))));
  return o;
}

template <class S> Outcome value_residual_average(const CheckpointData& data, int n, Rng&) {
  const lm::Config& c = data.weights.config;
  const Layer<S> L1 = attention_layer<S>(data, 0), Ln = attention_layer<S>(data, n);
  const GroupedAttention<S> w1 = grouped<S>(L1, c), wn = grouped<S>(Ln, c);
  const Eigen::Index dh = Ln.dh;
  Outcome o;
  double control = std::numeric_limits<double>::infinity();
  for (int b = 0; b < Ln.sequences; ++b) {
    const Mat<S> Q = grouped_projection<S>(Ln.input(b), wn.W_Q, wn.q_gain, wn), K = grouped_projection<S>(Ln.input(b), wn.W_K, wn.k_gain, wn);
    const Mat<S> V = Ln.input(b) * wn.W_V, V1 = L1.input(b) * w1.W_V;
    for (int h = 0; h < Ln.heads; ++h) {
      const Eigen::Index g = wn.group(h);
      const Mat<S> q = Q.middleCols(h * dh, dh), k = K.middleCols(g * dh, dh);
      const std::vector<Mat<S>> values{V1.middleCols(g * dh, dh), V.middleCols(g * dh, dh)};
      o.rel_err = std::max(o.rel_err, theory::cross_layer_deviation<S>(q, k, {k, k}, values, Mask::causal).rel_err);
      using std::sqrt;
      const S scale = sqrt(S(double(dh)));
      control = std::min(control, rel_err<S>(cross_layer_attention<S>(q, {k, k}, values, Mask::causal, scale),
                                             attention_head<S>(q, k, values[1], Mask::causal, scale)));
    }
  }
  o.note = pair_note("Eq. 3 with K_1 = K_n against (1/2) A_n (V_1 + V_n), every head");
  o.controls.push_back(control_by_error("A_n V_n: layer 1's values left out", control));
  return o;
}

template <class S> Outcome block_diagonal_freedom(const CheckpointData& data, int layer, Rng& rng) {
  const Layer<S> L = attention_layer<S>(data, layer);
  std::vector<Mat<S>> blocks;
  for (int g = 0; g < L.kv_heads; ++g) blocks.push_back(freedom_block<S>(L, rng).T);
  const auto B = change_of_basis<S>(block_diagonal<S>(blocks));
  const Eigen::Index dh = L.dh;
  // W_Q^h M_g(h), W_K^g M_g⁻ᵀ; `query_block(h)` picks the block applied to query head h.
  auto transformed = [&](const std::function<Mat<S>(int)>& query_block, bool keys) {
    Weights<S> w = L.w;
    for (int h = 0; h < L.heads; ++h) w.Q[h] = L.w.Q[h] * query_block(h);
    for (int g = 0; keys && g < L.kv_heads; ++g) w.K[g] = L.w.K[g] * B.T_inv.block(g * dh, g * dh, dh, dh).transpose();
    return w;
  };
  auto own_block = [&](int h) { return Mat<S>(B.T.block(L.group(h) * dh, L.group(h) * dh, dh, dh)); };
  const Mat<S> ref_logits = all_logits(L, L.w);
  const Weights<S> w = transformed(own_block, true);
  Outcome o;
  o.kappa = B.kappa;
  o.singular = B.singular();
  o.rel_err = std::max(rel_err<S>(ref_logits, all_logits(L, w)), rel_err<S>(self_attention(L, L.w), self_attention(L, w)));
  o.note = pair_note("every head's logits and SA");
  o.controls.push_back(control_by_error("B applied to W_Q only", rel_err<S>(ref_logits, all_logits(L, transformed(own_block, false)))));
  if (L.heads == L.kv_heads && L.heads > 1) {
    const auto F = change_of_basis<S>(cast<S>(draw_basis(rng, L.heads * dh, 1.0 / std::sqrt(double(L.heads * dh)))));
    Weights<S> full = L.w;
    Mat<S> Q(L.w.Q[0].rows(), L.heads * dh), K(Q.rows(), L.heads * dh);
    for (int h = 0; h < L.heads; ++h) Q.middleCols(h * dh, dh) = L.w.Q[h], K.middleCols(h * dh, dh) = L.w.K[h];
    const Mat<S> QF = Q * F.T, KF = K * F.T_inv.transpose();
    for (int h = 0; h < L.heads; ++h) full.Q[h] = QF.middleCols(h * dh, dh), full.K[h] = KF.middleCols(h * dh, dh);
    o.controls.push_back(control_by_error("full (not block-diagonal) B", rel_err<S>(ref_logits, all_logits(L, full))));
  }
  if (L.heads > L.kv_heads) {
    std::vector<Mat<S>> own;  // the first query head of each group keeps its key head's block
    for (int h = 0; h < L.heads; ++h) own.push_back(h % (L.heads / L.kv_heads) == 0 ? own_block(h) : freedom_block<S>(L, rng).T);
    o.controls.push_back(control_by_error("a different block for each query head of a group",
                                          rel_err<S>(ref_logits, all_logits(L, transformed([&](int h) { return own[h]; }, true)))));
  }
  if (L.rope) {
    std::vector<Mat<S>> generic;
    for (int g = 0; g < L.kv_heads; ++g) generic.push_back(freedom_block<S>(L, rng, false).T);
    const auto G = change_of_basis<S>(block_diagonal<S>(generic));
    Weights<S> wg = L.w;
    for (int h = 0; h < L.heads; ++h) wg.Q[h] = L.w.Q[h] * G.T.block(L.group(h) * dh, L.group(h) * dh, dh, dh);
    for (int g = 0; g < L.kv_heads; ++g) wg.K[g] = L.w.K[g] * G.T_inv.block(g * dh, g * dh, dh, dh).transpose();
    o.controls.push_back(control_by_error("generic blocks (not in the rotations' commutant)", rel_err<S>(ref_logits, all_logits(L, wg))));
  }
  return o;
}

namespace {

// The weight W (column convention: rows are outputs) that reads a norm's output.
MatD reader(const ModelWeights& w, int layer, NormSite site) {
  if (site == NormSite::final) return w.unembedding();
  if (site == NormSite::attention) {
    const MatD &Q = w.layer(layer, "attn.q.weight"), &K = w.layer(layer, "attn.k.weight"), &V = w.layer(layer, "attn.v.weight");
    MatD W(Q.rows(), Q.cols() + K.cols() + V.cols());
    W << Q, K, V;
    return W.transpose();
  }
  if (w.config.family == lm::Family::gpt2) return w.layer(layer, "mlp.fc.weight").transpose();
  MatD W(w.config.d, 2 * w.config.ffn);
  W << w.layer(layer, "mlp.gate.weight"), w.layer(layer, "mlp.up.weight");
  return W.transpose();
}

// The activations reaching the norm (columns), and the probe at the image's boundary along
// `top` (the direction A stretches most), as in the random-weight form: the controls of norm 1.5
// must push it out of the image, which the model's points, off that direction, need not leave.
template <class S> Mat<S> norm_points(const CheckpointData& data, int layer, NormSite site, const Vec<S>& top) {
  MatD scratch;
  return theory::with_column<S>(cast<S>(MatD(norm_input(data, layer, site, scratch).transpose())),
                                theory::at_boundary<S>(top, data.weights.config.norm_eps));
}

// A check whose change of basis is singular: no measurement.
Outcome singular_outcome(std::string note) {
  Outcome o;
  o.rel_err = NAN, o.singular = true, o.note = std::move(note);
  return o;
}

}  // namespace

template <class S> Outcome norm_semi_conjugacy(const CheckpointData& data, int layer, NormSite site, Rng& rng) {
  const auto L = layer_norm_conjugacy<S>(cast<S>(theory::draw_conjugacy_basis(rng, data.weights.config.d)));
  if (!L.ok()) return singular_outcome("some delta_i = 0: D is singular");
  return theory::semi_conjugacy<S>(L, norm_points<S>(data, layer, site, L.top), data.weights.config.norm_eps).outcome;
}

template <class S> Outcome norm_change_of_basis(const CheckpointData& data, int layer, NormSite site, Rng& rng) {
  const ModelWeights& w = data.weights;
  const auto L = layer_norm_conjugacy<S>(cast<S>(theory::draw_conjugacy_basis(rng, w.config.d)));
  const Vec<S> g = vector_of<S>(w.at(norm_prefix(layer, site) + ".weight"));
  const Vec<S> g_red = cast<S>(MatD((0.3 * rng.gaussian(w.config.d, 1)).array().exp())).col(0);  // the reduced model's
  if (!L.ok()) return singular_outcome("some delta_i = 0: D is singular");
  if (!(g.cwiseAbs().minCoeff() > S(0))) return singular_outcome("a gain is 0: G is singular");
  Outcome o = theory::change_of_basis_through_norm<S>(L, norm_points<S>(data, layer, site, L.top), g, g_red,
                                                      cast<S>(reader(w, layer, site)), w.config.norm_eps);
  if (w.has(norm_prefix(layer, site) + ".bias"))
    o.note += std::string(o.note.empty() ? "" : "; ") + "the bias b maps to G~ D T G^-1 b (a constant on both sides)";
  return o;
}

template <class S> Outcome rms_norm_semi_conjugacy(const CheckpointData& data, int layer, NormSite site, Rng& rng) {
  const int d = data.weights.config.d;
  const Mat<S> T = cast<S>(draw_basis(rng, d, 1.0 / std::sqrt(double(d))));
  return theory::rms_semi_conjugacy<S>(T, norm_points<S>(data, layer, site, spectral_norm<S>(T).right),
                                       data.weights.config.norm_eps);
}

#define QKVLAB_CHECKPOINT_CHECKS(S)                                                                      \
  template Outcome head_reparametrization<S>(const CheckpointData&, int, int, bool, Rng&);               \
  template Outcome two_matrix_head<S>(const CheckpointData&, int, int, Rng&);                            \
  template Outcome block_diagonal_freedom<S>(const CheckpointData&, int, Rng&);                          \
  template Outcome value_freedom<S>(const CheckpointData&, int, Rng&);                                   \
  template Outcome value_residual_average<S>(const CheckpointData&, int, Rng&);                          \
  template Outcome norm_semi_conjugacy<S>(const CheckpointData&, int, NormSite, Rng&);                   \
  template Outcome norm_change_of_basis<S>(const CheckpointData&, int, NormSite, Rng&);                  \
  template Outcome rms_norm_semi_conjugacy<S>(const CheckpointData&, int, NormSite, Rng&);
QKVLAB_FOR_EACH_SCALAR(QKVLAB_CHECKPOINT_CHECKS)

}  // namespace qkvlab::theory_lm
