// What the claims qwe.ext.rope, qwe.ext.gqa, qwe.ext.qknorm, qwe.freedom.vo, resformer.eq4 and
// resformer.eq5 measure, as functions of the weights and inputs alone (row-vector convention;
// docs/math/extensions.md): the claims call them on random draws (qwe_extensions.cpp,
// resformer.cpp), and they take a checkpoint's weights and activations as they are.
// Each returns rel_err = ‖a − b‖_F/‖a‖_F of the two sides that the statement equates, with the
// conditioning of the transformation it applies.
#pragma once

#include "core/head_freedoms.hpp"

#include <algorithm>
#include <utility>
#include <vector>

namespace qkvlab::theory {

struct Deviation {
  double rel_err = 0;
  double kappa = 1;       // the largest cond₂ of the bases applied
  bool singular = false;  // one of them was numerically singular
};

template <class S> Deviation conditioning(const std::vector<ChangeOfBasis<S>>& bases) {
  Deviation d;
  for (const auto& b : bases) {
    d.kappa = std::max(d.kappa, b.kappa);
    d.singular = d.singular || b.singular();
  }
  return d;
}

// One layer's attention on one input: the weights w (with their groups, RoPE and QK-norm), the
// rows X that reach it, the mask, and out(X; w), computed once for every comparison.
template <class S> struct AttentionProbe {
  Mat<S> X;
  GroupedAttention<S> w;
  Mask mask;
  Mat<S> reference;
  AttentionProbe(Mat<S> X_, GroupedAttention<S> w_, Mask mask_)
      : X(std::move(X_)), w(std::move(w_)), mask(mask_), reference(grouped_attention<S>(X, w, mask)) {}
};

// out(X'; w') against out(X; w), with the conditioning of the bases that made X', w'.
template <class S>
Deviation output_deviation(const AttentionProbe<S>& p, const Mat<S>& X_new, const GroupedAttention<S>& w_new,
                           const std::vector<ChangeOfBasis<S>>& bases) {
  Deviation d = conditioning<S>(bases);
  d.rel_err = rel_err<S>(p.reference, grouped_attention<S>(X_new, w_new, p.mask));
  return d;
}

// out(X; W_Q^h M_g(h), W_K^g M_g⁻ᵀ) against out(X; W): M holds one basis per key head.
template <class S> Deviation qk_freedom_deviation(const AttentionProbe<S>& p, const std::vector<ChangeOfBasis<S>>& M) {
  return output_deviation<S>(p, p.X, with_qk_freedom<S>(p.w, M), M);
}

// out(X; W_V^g N_g, N_g(h)⁻¹ W_O^h) against out(X; W): N holds one basis per value head.
template <class S> Deviation vo_freedom_deviation(const AttentionProbe<S>& p, const std::vector<ChangeOfBasis<S>>& N) {
  return output_deviation<S>(p, p.X, with_vo_freedom<S>(p.w, N), N);
}

// Lemma 3.1 through the model's RoPE, groups and QK-norm: out(X T; T⁻¹W_{Q,K,V}) against out(X; W).
template <class S> Deviation input_basis_deviation(const AttentionProbe<S>& p, const ChangeOfBasis<S>& T) {
  return output_deviation<S>(p, Mat<S>(p.X * T.T), with_input_basis<S>(p.w, T), {T});
}

// ResFormer Eqs. 3–5: softmax(Q [K_1; …; K_m]ᵀ/√d_h)[V_1; …; V_m] against (1/m) A V̄ with
// A = softmax(Q K_nᵀ/√d_h), V̄ = Σ_i V_i. An identity when every K_i = K_n (m = 2: Eq. 3 = Eq. 4;
// m = n layers: Eq. 5); with the layers' own keys (Eq. 2) it is the paper's approximation.
template <class S>
Deviation cross_layer_deviation(const Mat<S>& Q, const Mat<S>& K_n, const std::vector<Mat<S>>& keys,
                                const std::vector<Mat<S>>& values, Mask mask) {
  using std::sqrt;
  const S scale = sqrt(S(Q.cols()));
  Mat<S> V_sum = values.front();
  for (std::size_t i = 1; i < values.size(); ++i) V_sum += values[i];
  const Mat<S> averaged = attention_head<S>(Q, K_n, V_sum, mask, scale) / S(double(values.size()));
  return {rel_err<S>(cross_layer_attention<S>(Q, keys, values, mask, scale), averaged), 1.0, false};
}

}  // namespace qkvlab::theory
