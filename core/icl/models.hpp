// The closed-form models of docs/math/icl.md, token level and reduced, templated
// on the scalar (the precision ladder of skipv1.reduction runs them at float,
// double, long double and mp50). Column convention: tokens are columns.
//
// Token level. P = diag(I_2n, 0): only the first 2n columns are key/value
// sources. One head with value source V and key/query source K (both d×T):
//   head(V, K) = W_V V P (Kᵀ W_Kᵀ W_Q K) = W_V (V_{:,<2n} K_{:,<2n}ᵀ) W_Kᵀ W_Q K,
// computed in that associative order. TF_l(E) = Σ_{h=1,2} head_h(E, E).
//   MHA:    E_out = Σ_h head^{2,h}(F, F),                         F = TF_1(E)
//   SkipV1: E_out = head^{2,1}(F, F) + head^{2,2}(E, F)   (head 2's values from E)
// Which head reads E is the variant's plan (core/qkv_plan.hpp): layer 1's values
// V_1 = W_V^{1,h} E are seen as E, since W_O^{2,h} W_V^{1,h} is again a free map.
//   Eq. 3 as printed (a negative control): head^{2,1} uses W_Q^{2,2} in its score.
// Prediction ŷ = H E_out[:, 2n] (the query column).
// Assumption 1's first layer (used instead of TF_1 in the theorem):
//   F = (x_1, [A x_1; B y_1], …, x_n, [A x_n; B y_n], [A x_{n+1}; 0]),
//   A ∈ R^{a×d}, B ∈ R^{(d−a)×d}.
//
// Reduced form (Appendix A). With W^h = H W_V^{2,h}, M^h = W_K^{2,h}ᵀ W_Q^{2,h} [A; 0]
// and z_i = [A x_i; B y_i]:
//   G_{1,D} = Σ_i x_i x_iᵀ + z_i z_iᵀ                (MHA, both heads; SkipV1 head 1)
//   G_2^2   = Σ_i x_i x_iᵀ + y_i z_iᵀ                (SkipV1 head 2)
//   U_1 = Σ_h W^h G_{1,D} M^h,   U_2 = W^1 G_{1,D} M^1 + W^2 G_2^2 M^2,
// and the prediction is U_k x_{n+1}: the query column of F is [A; 0] x_{n+1},
// the sources' Gram F P Fᵀ = G_{1,D} and E P Fᵀ = G_2^2. The losses are
// L_k = E‖U_k x_{n+1} − y_{n+1}‖² (the integrands are reduced_prediction − y).
#pragma once

#include "core/qkv_plan.hpp"
#include "core/types.hpp"
#include "core/icl/prompt.hpp"

#include <array>
#include <stdexcept>
#include <string>

namespace qkvlab::icl {

template <class S> struct HeadWeights {
  Mat<S> W_Q, W_K, W_V;  // d×d each
};

// Layer 2 of the two-layer models and the read-out H (layer 1 is TF_1 or Assumption 1).
template <class S> struct LayerTwo {
  std::array<HeadWeights<S>, 2> heads;
  Mat<S> H;  // d×d
};

// Layer 2's value sources in the plan of `variant` over two layers of two heads:
// head h reads layer 1 (index 0: V_1, seen as E) and/or its own projection of F.
inline qkv::Mix layer_two_values(qkv::VariantKind variant) {
  return qkv::make_plan(qkv::Variant{.kind = variant}, 2, 2, 2)[1].values;
}

// from_E[h]: head h + 1 of layer 2 takes its values from E, else from F. The
// closed forms here take one source per head (MHA: F, F; SkipV1: F, E); a
// variant whose head reads both (ResFormer) is a std::invalid_argument.
inline std::array<bool, 2> values_from_input(qkv::VariantKind variant) {
  const qkv::Mix values = layer_two_values(variant);
  std::array<bool, 2> from_E{};
  for (int h = 0; h < 2; ++h) {
    from_E[std::size_t(h)] = qkv::reads_layer(values, h, 0);
    if (from_E[std::size_t(h)] == qkv::reads_layer(values, h, 1))
      throw std::invalid_argument("icl: head " + std::to_string(h + 1) +
                                  " of layer 2 must read exactly one of E and F");
  }
  return from_E;
}

// Where head 1's score takes its query weight: its own W_Q^{2,1}, or, as Eq. 3
// is printed (a negative control), W_Q^{2,2}.
enum class HeadOneQuery { own, head_two };

// W_V V P (Kᵀ W_Kᵀ W_Q K): all T output columns.
template <class S>
Mat<S> linear_attention_head(const Mat<S>& V, const Mat<S>& K, const Mat<S>& W_Q, const Mat<S>& W_K,
                             const Mat<S>& W_V) {
  const Eigen::Index sources = K.cols() - 1;  // P drops the query column
  const Mat<S> state = V.leftCols(sources) * K.leftCols(sources).transpose();
  return W_V * state * (W_K.transpose() * (W_Q * K));
}

// TF_l(E) = Σ_h head_h(E, E).
template <class S> Mat<S> tf_layer(const Mat<S>& E, const std::array<HeadWeights<S>, 2>& heads) {
  Mat<S> out = Mat<S>::Zero(E.rows(), E.cols());
  for (const auto& w : heads) out += linear_attention_head<S>(E, E, w.W_Q, w.W_K, w.W_V);
  return out;
}

// Assumption 1's copying layer F from the tokens E = (x_1, y_1, …, x_n, y_n, x_{n+1}).
template <class S> Mat<S> copying_layer(const Mat<S>& E, const Mat<S>& A, const Mat<S>& B) {
  const Eigen::Index d = E.rows(), n = (E.cols() - 1) / 2, a = A.rows();
  Mat<S> F = Mat<S>::Zero(d, E.cols());
  for (Eigen::Index i = 0; i < n; ++i) {
    F.col(2 * i) = E.col(2 * i);
    F.col(2 * i + 1).head(a) = A * E.col(2 * i);
    F.col(2 * i + 1).tail(d - a) = B * E.col(2 * i + 1);
  }
  F.col(2 * n).head(a) = A * E.col(2 * n);
  return F;
}

// Layer 2 over (E, F): E_out for the architecture.
template <class S>
Mat<S> layer_two_output(const Mat<S>& E, const Mat<S>& F, const LayerTwo<S>& w, qkv::VariantKind variant,
                        HeadOneQuery query = HeadOneQuery::own) {
  const auto from_E = values_from_input(variant);
  const auto& h1 = w.heads[0];
  const auto& h2 = w.heads[1];
  const Mat<S>& W_Q1 = query == HeadOneQuery::head_two ? h2.W_Q : h1.W_Q;
  Mat<S> out = linear_attention_head<S>(from_E[0] ? E : F, F, W_Q1, h1.W_K, h1.W_V);
  out += linear_attention_head<S>(from_E[1] ? E : F, F, h2.W_Q, h2.W_K, h2.W_V);
  return out;
}

// ŷ = H E_out[:, last] of the token-level model with Assumption 1's first layer.
template <class S>
Vec<S> token_prediction(const Mat<S>& E, const Mat<S>& A, const Mat<S>& B, const LayerTwo<S>& w,
                        qkv::VariantKind variant, HeadOneQuery query = HeadOneQuery::own) {
  const Mat<S> F = copying_layer<S>(E, A, B);
  return w.H * layer_two_output<S>(E, F, w, variant, query).col(E.cols() - 1);
}

// The reduced weights W^h = H W_V^h, M^h = W_K^hᵀ W_Q^h [A; 0].
template <class S> struct ReducedWeights {
  std::array<Mat<S>, 2> W, M;
};

// [A; 0] ∈ R^{d×d}: A stacked over d − a zero rows.
template <class S> Mat<S> query_embedding(const Mat<S>& A, Eigen::Index d) {
  Mat<S> Q = Mat<S>::Zero(d, A.cols());
  Q.topRows(A.rows()) = A;
  return Q;
}

template <class S> ReducedWeights<S> reduce(const LayerTwo<S>& w, const Mat<S>& A) {
  ReducedWeights<S> r;
  const Mat<S> Aq = query_embedding<S>(A, w.H.rows());
  for (int h = 0; h < 2; ++h) {
    r.W[h] = w.H * w.heads[h].W_V;
    r.M[h] = w.heads[h].W_K.transpose() * (w.heads[h].W_Q * Aq);
  }
  return r;
}

// Z = (z_1 … z_n), z_i = [A x_i; B y_i].
template <class S> Mat<S> compressed_pairs(const Mat<S>& X, const Mat<S>& Y, const Mat<S>& A, const Mat<S>& B) {
  Mat<S> Z(X.rows(), X.cols());
  Z.topRows(A.rows()) = A * X;
  Z.bottomRows(B.rows()) = B * Y;
  return Z;
}

// G_{1,D} = X Xᵀ + Z Zᵀ.
template <class S> Mat<S> gram_mha(const Mat<S>& X, const Mat<S>& Y, const Mat<S>& A, const Mat<S>& B) {
  const Mat<S> Z = compressed_pairs<S>(X, Y, A, B);
  return X * X.transpose() + Z * Z.transpose();
}

// G_2^2 = X Xᵀ + Y Zᵀ.
template <class S> Mat<S> gram_skip(const Mat<S>& X, const Mat<S>& Y, const Mat<S>& A, const Mat<S>& B) {
  const Mat<S> Z = compressed_pairs<S>(X, Y, A, B);
  return X * X.transpose() + Y * Z.transpose();
}

// U_k = Σ_h W^h G^h M^h, G^h = G_2^2 for a head whose values come from E, else G_{1,D}
// (MHA: G^h = G_{1,D}; SkipV1: G^1 = G_{1,D}, G^2 = G_2^2).
template <class S>
Mat<S> reduced_map(const Mat<S>& X, const Mat<S>& Y, const Mat<S>& A, const Mat<S>& B, const ReducedWeights<S>& r,
                   qkv::VariantKind variant) {
  const auto from_E = values_from_input(variant);
  const Mat<S> G_D = gram_mha<S>(X, Y, A, B);
  const Mat<S> G_skip = from_E[0] || from_E[1] ? gram_skip<S>(X, Y, A, B) : Mat<S>();
  const Mat<S>& G1 = from_E[0] ? G_skip : G_D;
  const Mat<S>& G2 = from_E[1] ? G_skip : G_D;
  return r.W[0] * G1 * r.M[0] + r.W[1] * G2 * r.M[1];
}

// Lemma 2's parts of the reduced map (SkipV1Former, Appendix A, Eqs. 9–10), built term by
// term from the blocks W^h = (W_1^h, W_2^h) (columns a, d − a) and M^h = (M_1^h; M_2^h)
// (rows a, d − a), with Z = [A X; B Y]: N_1(X) (no Y), N_2(Y) (quadratic in Y), N_3(X, Y)
// (linear in Y). Every head gives W^h X Xᵀ M^h to N_1; a head whose values come from F
// (G_{1,D}) gives W_1^h A X Xᵀ Aᵀ M_1^h to N_1, W_2^h B Y Yᵀ Bᵀ M_2^h to N_2 and
// W_1^h A X Yᵀ Bᵀ M_2^h + W_2^h B Y Xᵀ Aᵀ M_1^h to N_3 (Eq. 9); one whose values come from
// E (SkipV1's head 2, G_2^2) gives W^h Y Yᵀ Bᵀ M_2^h to N_2 and W^h Y Xᵀ Aᵀ M_1^h to N_3
// (Eq. 10). N_1 + N_2 + N_3 = reduced_map, an identity (skipv1.lemma2 checks it).
// Eq. 10 as printed puts W_1^1 A X Xᵀ Aᵀ M_1^1 inside N_1′'s sum over h, counting it twice;
// Eq10Reading::as_printed builds that reading (a control: it breaks the identity).
enum class Eq10Reading { as_the_map, as_printed };

template <class S> struct Lemma2Parts {
  Mat<S> N1, N2, N3;
};

template <class S>
Lemma2Parts<S> lemma2_parts(const Mat<S>& X, const Mat<S>& Y, const Mat<S>& A, const Mat<S>& B,
                            const ReducedWeights<S>& r, qkv::VariantKind variant,
                            Eq10Reading reading = Eq10Reading::as_the_map) {
  const auto from_E = values_from_input(variant);
  const Eigen::Index d = X.rows(), a = A.rows();
  const Mat<S> XXt = X * X.transpose(), AX = A * X, BY = B * Y;
  const S copies = reading == Eq10Reading::as_printed && (from_E[0] || from_E[1]) ? S(2) : S(1);
  Lemma2Parts<S> p{Mat<S>::Zero(d, d), Mat<S>::Zero(d, d), Mat<S>::Zero(d, d)};
  for (int h = 0; h < 2; ++h) {
    const Mat<S>& W = r.W[std::size_t(h)];
    const Mat<S>& M = r.M[std::size_t(h)];
    const Mat<S> W1 = W.leftCols(a), W2 = W.rightCols(d - a), M1 = M.topRows(a), M2 = M.bottomRows(d - a);
    p.N1 += W * XXt * M;
    if (from_E[std::size_t(h)]) {
      p.N2 += W * (Y * BY.transpose()) * M2;
      p.N3 += W * (Y * AX.transpose()) * M1;
    } else {
      p.N1 += copies * (W1 * (AX * AX.transpose()) * M1);
      p.N2 += W2 * (BY * BY.transpose()) * M2;
      p.N3 += W1 * (AX * BY.transpose()) * M2 + W2 * (BY * AX.transpose()) * M1;
    }
  }
  return p;
}

// U_k x_{n+1}: the reduced form's prediction.
template <class S>
Vec<S> reduced_prediction(const Mat<S>& X, const Mat<S>& Y, const Vec<S>& x_query, const Mat<S>& A, const Mat<S>& B,
                          const ReducedWeights<S>& r, qkv::VariantKind variant) {
  return reduced_map<S>(X, Y, A, B, r, variant) * x_query;
}

// A = [I_a 0] ∈ R^{a×d}, B = [0 I_{d−a}] ∈ R^{(d−a)×d}: the coordinate copying
// layer (F's y-tokens are (x_{1..a}, y_{a+1..d})), used by the constructions.
template <class S> Mat<S> coordinate_A(int d, int a) { return Mat<S>::Identity(d, d).topRows(a); }
template <class S> Mat<S> coordinate_B(int d, int a) { return Mat<S>::Identity(d, d).bottomRows(d - a); }

}  // namespace qkvlab::icl
