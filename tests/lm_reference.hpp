// An independent implementation of the language model's loss for the tests:
// one sequence at a time, one head at a time, with Eigen in double and the
// standard library's exp, tanh and erf — nothing shared with lm/ or the
// backend's kernels but the parameter layout (names, shapes, offsets). It
// covers the families (GPT-2: learned positions, LayerNorm, GELU; Llama: RoPE
// with rotate_half, RMSNorm, SwiGLU), no norms (--norm none), GQA, tied and untied
// heads, biases, Q-identity and Q-identity layers; the variants' mixing is tested through the activation record.
#pragma once

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/parameters.hpp"
#include "lm/config.hpp"

namespace {

using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct Tensors {
  const qkvlab::engine::ParameterLayout& layout;
  const std::vector<double>& values;
  bool has(const std::string& name) const { return layout.find(name) != nullptr; }
  RowMat matrix(const std::string& name) const {
    const auto& s = layout.at(name);
    return Eigen::Map<const RowMat>(values.data() + s.offset, s.shape[0], s.shape[1]);
  }
  Eigen::RowVectorXd vec(const std::string& name) const {
    const auto& s = layout.at(name);
    return Eigen::Map<const Eigen::RowVectorXd>(values.data() + s.offset, s.shape[0]);
  }
};

inline RowMat ref_norm(const RowMat& X, const Tensors& w, const std::string& name, const qkvlab::lm::Config& c) {
  if (!c.norm) return X;
  RowMat Y(X.rows(), X.cols());
  const Eigen::RowVectorXd g = w.vec(name + ".weight");
  for (Eigen::Index t = 0; t < X.rows(); ++t) {
    Eigen::RowVectorXd x = X.row(t);
    if (c.family == qkvlab::lm::Family::gpt2) x.array() -= x.mean();
    const double r = 1 / std::sqrt(x.squaredNorm() / double(x.size()) + c.norm_eps);
    Y.row(t) = (x * r).cwiseProduct(g);
    if (w.has(name + ".bias")) Y.row(t) += w.vec(name + ".bias");
  }
  return Y;
}

inline RowMat ref_linear(const RowMat& X, const Tensors& w, const std::string& name) {
  RowMat Y = X * w.matrix(name + ".weight");
  if (w.has(name + ".bias")) Y.rowwise() += w.vec(name + ".bias");
  return Y;
}

// RoPE at positions 0 … T−1, rotating the pairs (i, i + d_h/2) (Hugging Face's rotate_half) or, with
// `interleaved`, (2i, 2i + 1) (dense_skip's rotary_utils.py), by the angle t θ^(−2i/d_h).
inline void ref_rope(RowMat& X, int heads, int dh, double theta, bool interleaved = false) {
  for (Eigen::Index t = 0; t < X.rows(); ++t)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < dh / 2; ++i) {
        const double angle = double(t) / std::pow(theta, 2.0 * i / dh);
        const int ia = h * dh + (interleaved ? 2 * i : i), ib = h * dh + (interleaved ? 2 * i + 1 : i + dh / 2);
        const double a = X(t, ia), b = X(t, ib);
        X(t, ia) = a * std::cos(angle) - b * std::sin(angle);
        X(t, ib) = b * std::cos(angle) + a * std::sin(angle);
      }
}

inline double reference_loss(const qkvlab::lm::Config& c, const qkvlab::engine::ParameterLayout& layout,
                             const std::vector<double>& values, const std::vector<std::int32_t>& ids,
                             const std::vector<std::int32_t>& targets, int B, int T, bool interleaved = false) {
  using qkvlab::lm::Family;
  const Tensors w{layout, values};
  const bool gpt2 = c.family == Family::gpt2;
  const int H = c.heads, G = c.kv_heads, dh = c.head_dim;
  const RowMat E = w.matrix("wte"), U = c.tied ? E : w.matrix("lm_head.weight");
  double total = 0;
  long count = 0;
  for (int b = 0; b < B; ++b) {
    RowMat X(T, c.d);
    for (int t = 0; t < T; ++t) {
      X.row(t) = E.row(ids[b * T + t]);
      if (!c.rope()) X.row(t) += w.matrix("wpe").row(t);
    }
    for (int l = 0; l < c.layers; ++l) {
      const std::string p = "h." + std::to_string(l) + ".";
      const bool identity = c.variant.kind == qkvlab::lm::VariantKind::q_identity ||
                            std::count(c.q_identity_layers.begin(), c.q_identity_layers.end(), l + 1) > 0;
      const double scale = (identity ? 0.5 : 1.0) / std::sqrt(double(dh));
      const RowMat n1 = ref_norm(X, w, p + "ln_1", c);
      RowMat Q = identity ? n1 : ref_linear(n1, w, p + "attn.q");
      RowMat K = ref_linear(n1, w, p + "attn.k"), V = ref_linear(n1, w, p + "attn.v");
      if (c.rope()) ref_rope(Q, H, dh, c.rope_theta, interleaved), ref_rope(K, G, dh, c.rope_theta, interleaved);
      RowMat Z(T, H * dh);
      for (int h = 0; h < H; ++h) {
        const int g = h / (H / G);
        RowMat S = Q.middleCols(h * dh, dh) * K.middleCols(g * dh, dh).transpose() * scale;
        for (int i = 0; i < T; ++i) {
          double m = S.row(i).head(i + 1).maxCoeff(), sum = 0;
          for (int j = 0; j <= i; ++j) sum += (S(i, j) = std::exp(S(i, j) - m));
          for (int j = 0; j < T; ++j) S(i, j) = j <= i ? S(i, j) / sum : 0.0;
        }
        Z.middleCols(h * dh, dh) = S * V.middleCols(g * dh, dh);
      }
      X += ref_linear(Z, w, p + "attn.o");
      const RowMat n2 = ref_norm(X, w, p + "ln_2", c);
      if (gpt2) {
        RowMat Hd = ref_linear(n2, w, p + "mlp.fc");
        const bool tanh_form = c.gelu == qkvlab::lm::GeluForm::tanh;
        Hd = Hd.unaryExpr([tanh_form](double x) {
          return tanh_form ? 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)))
                           : 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
        });
        X += ref_linear(Hd, w, p + "mlp.proj");
      } else {
        const RowMat gate = ref_linear(n2, w, p + "mlp.gate"), up = ref_linear(n2, w, p + "mlp.up");
        const RowMat act = gate.unaryExpr([](double x) { return x / (1 + std::exp(-x)); }).cwiseProduct(up);
        X += ref_linear(act, w, p + "mlp.down");
      }
    }
    const RowMat logits = ref_norm(X, w, "ln_f", c) * U.transpose();
    for (int t = 0; t < T; ++t) {
      const int y = targets[b * T + t];
      if (y < 0) continue;
      const double m = logits.row(t).maxCoeff();
      total += m + std::log((logits.row(t).array() - m).exp().sum()) - logits(t, y);
      ++count;
    }
  }
  return total / double(count);
}

}  // namespace
