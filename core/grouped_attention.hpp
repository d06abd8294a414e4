// Attention as the language models compute it (lm/, docs/math/lm.md), at any scalar, row-vector
// convention (X ∈ R^{n×d}, projections X W), for the claims on RoPE, grouped-query attention and
// QK-norm (docs/math/extensions.md); and ResFormer's cross-layer attention (its Eq. 2).
//
//   H query heads and H_kv key/value heads of width d_h; query head h uses key/value head
//   g(h) = ⌊h H_kv / H⌋ (contiguous groups of H/H_kv query heads);
//   q_h = X W_Q^h,  k_g = X W_K^g,  v_g = X W_V^g       (W_Q^h: columns h d_h … (h+1) d_h − 1)
//   QK-norm (optional, per head, before RoPE as Qwen3 does): q_h ↦ R(q_h) diag(γ_Q^h), the same for
//     keys with γ_K^g, R(v) = v / sqrt(‖v‖²/d_h + ε) row by row;
//   RoPE (optional; Hugging Face's rotate_half pairing, engine/kernels/rope.hpp): at position t (the
//     row index), coordinates i and i + d_h/2 of every head rotate together by the angle t ω_i;
//   head_h = softmax_M(q_h k_{g(h)}ᵀ / √d_h) v_{g(h)},  out = [head_1 … head_H] W_O.
// With H_kv = H and neither RoPE nor QK-norm this is mha() of core/attention.hpp.
#pragma once

#include "core/attention.hpp"
#include "core/normalize.hpp"

#include <cmath>
#include <limits>
#include <vector>

namespace qkvlab {

// AttentionWeights' W_Q (d × H d_h) and W_O (H d_h × d), with W_K, W_V of H_kv d_h columns.
template <class S> struct GroupedAttention : AttentionWeights<S> {
  int kv_heads = 1;
  std::vector<double> rope;  // the frequencies ω_i, i < d_h/2; empty: no RoPE
  Vec<S> q_gain, k_gain;     // QK-norm gains γ (H d_h and H_kv d_h entries); empty: no QK-norm
  double qk_norm_eps = 1e-6;

  int group(int h) const { return h * kv_heads / this->heads; }
};

// Hugging Face's default RoPE frequencies ω_i = θ^(−2i/d_h), i < d_h/2 (engine/rope_frequencies.hpp
// without the "llama3" scaling): distinct for θ > 1, all equal to 1 for θ = 1.
inline std::vector<double> rope_frequencies(Eigen::Index d_h, double theta) {
  std::vector<double> omega(std::size_t(d_h / 2));
  for (std::size_t i = 0; i < omega.size(); ++i) omega[i] = std::pow(theta, -2.0 * double(i) / double(d_h));
  return omega;
}

// RoPE on every head block (width 2·omega.size()) of Y: row t rotated by the angles t ω_i, whose
// cosines and sines are computed in double and rounded to S, as the language models' table is
// (a rotation's commutant, and so every claim on it, is the same for any such table).
template <class S> Mat<S> rope_rotate(const Mat<S>& Y, const std::vector<double>& omega) {
  const Eigen::Index half = Eigen::Index(omega.size()), dh = 2 * half;
  Mat<S> R = Y;
  for (Eigen::Index t = 0; t < Y.rows(); ++t)
    for (Eigen::Index i = 0; i < half; ++i) {
      const double angle = double(t) * omega[std::size_t(i)];
      const S c = S(std::cos(angle)), s = S(std::sin(angle));
      for (Eigen::Index h = 0; h < Y.cols() / dh; ++h) {
        const S a = Y(t, h * dh + i), b = Y(t, h * dh + i + half);
        R(t, h * dh + i) = a * c - b * s;
        R(t, h * dh + i + half) = b * c + a * s;
      }
    }
  return R;
}

// Per-head RMSNorm of the rows of Y (head blocks of width dh), times the gains.
template <class S> Mat<S> head_rms_norm(const Mat<S>& Y, const Vec<S>& gain, Eigen::Index dh, double eps) {
  Mat<S> N(Y.rows(), Y.cols());
  for (Eigen::Index h = 0; h < Y.cols() / dh; ++h)
    N.middleCols(h * dh, dh) = rms_norm<S>(Mat<S>(Y.middleCols(h * dh, dh).transpose()), eps).transpose() *
                               gain.segment(h * dh, dh).asDiagonal();
  return N;
}

// Queries or keys as the heads see them: projected, QK-normed, rotated.
template <class S>
Mat<S> grouped_projection(const Mat<S>& X, const Mat<S>& W, const Vec<S>& gain, const GroupedAttention<S>& w) {
  Mat<S> Y = X * W;
  if (gain.size() > 0) Y = head_rms_norm<S>(Y, gain, w.head_dim(), w.qk_norm_eps);
  if (!w.rope.empty()) Y = rope_rotate<S>(Y, w.rope);
  return Y;
}

// [head_1 … head_H] W_O.
template <class S> Mat<S> grouped_attention(const Mat<S>& X, const GroupedAttention<S>& w, Mask mask) {
  const Eigen::Index dh = w.head_dim();
  const Mat<S> Q = grouped_projection<S>(X, w.W_Q, w.q_gain, w), K = grouped_projection<S>(X, w.W_K, w.k_gain, w);
  const Mat<S> V = X * w.W_V;
  Mat<S> heads(X.rows(), w.W_Q.cols());
  for (int h = 0; h < w.heads; ++h)
    heads.middleCols(h * dh, dh) = attention_head<S>(Q.middleCols(h * dh, dh), K.middleCols(w.group(h) * dh, dh),
                                                     V.middleCols(w.group(h) * dh, dh), mask, w.scale());
  return heads * w.W_O;
}

// Cross-layer attention (ResFormer Eq. 2): one softmax over the keys of several layers,
// softmax(Q [K_1; …; K_m]ᵀ / s) [V_1; …; V_m], where query i sees key j of every layer exactly
// when the mask lets it see key j of its own layer (the keys of all layers sit at the same
// positions). Masked logits are −∞, so they get exactly zero weight.
template <class S>
Mat<S> cross_layer_attention(const Mat<S>& Q, const std::vector<Mat<S>>& keys, const std::vector<Mat<S>>& values,
                             Mask mask, const S& scale) {
  const Eigen::Index n = Q.rows(), m = Eigen::Index(keys.size());
  Mat<S> logits(n, m * n), stacked(m * n, values.front().cols());
  for (Eigen::Index b = 0; b < m; ++b) {
    logits.middleCols(b * n, n) = (Q * keys[std::size_t(b)].transpose()) / scale;
    stacked.middleRows(b * n, n) = values[std::size_t(b)];
    for (Eigen::Index i = 0; i < n; ++i)
      for (Eigen::Index j = 0; j < n; ++j)
        if (!attends(mask, i, j)) logits(i, b * n + j) = -S(std::numeric_limits<double>::infinity());
  }
  return softmax_rows<S>(logits, Mask::bidirectional) * stacked;
}

}  // namespace qkvlab
