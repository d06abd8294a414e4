// Transformer blocks without normalization, row-vector convention:
//   both skips:          Y = X + MHA(X),  X' = Y + MLP(Y)
//   attention skip only: X' = MLP(X + MHA(X))
//   no skip:             X' = MLP(MHA(X))
// MLP(Y) = σ(Y W_1) W_2 with W_1 ∈ R^{d×r}, W_2 ∈ R^{r×d}, σ = GELU (exact erf
// form) unless ReLU is chosen.
#pragma once

#include "core/attention.hpp"

namespace qkvlab {

enum class Skip { both, attention_only, none };
enum class MlpActivation { gelu, relu };

inline const char* skip_name(Skip s) {
  return s == Skip::both ? "both" : s == Skip::attention_only ? "attention_only" : "none";
}

template <class S> struct BlockWeights {
  AttentionWeights<S> attn;
  Mat<S> W_1, W_2;  // d×r, r×d
};

template <class S> S gelu(const S& x) {
  using std::erf;
  using std::sqrt;
  return S(0.5) * x * (S(1) + erf(x / sqrt(S(2))));
}

template <class S> S relu(const S& x) { return x > S(0) ? x : S(0); }

template <class S> Mat<S> activate(const Mat<S>& Z, MlpActivation act) {
  return act == MlpActivation::gelu ? Mat<S>(Z.unaryExpr([](const S& z) { return gelu<S>(z); }))
                                 : Mat<S>(Z.unaryExpr([](const S& z) { return relu<S>(z); }));
}

template <class S> Mat<S> mlp(const Mat<S>& Y, const Mat<S>& W_1, const Mat<S>& W_2, MlpActivation act) {
  return activate<S>(Y * W_1, act) * W_2;
}

template <class S>
Mat<S> block_forward(const Mat<S>& X, const BlockWeights<S>& w, Skip skip, Mask mask, MlpActivation act) {
  const Mat<S> A = mha<S>(X, w.attn, mask);
  switch (skip) {
    case Skip::both: {
      const Mat<S> Y = X + A;
      return Y + mlp<S>(Y, w.W_1, w.W_2, act);
    }
    case Skip::attention_only: return mlp<S>(X + A, w.W_1, w.W_2, act);
    case Skip::none: break;
  }
  return mlp<S>(A, w.W_1, w.W_2, act);
}

// A block with entries N(0, 1/fan_in), hidden width r.
template <class S>
BlockWeights<S> random_block(Rng& rng, Eigen::Index d, int heads, Eigen::Index r) {
  BlockWeights<S> w;
  w.attn = random_attention<S>(rng, d, heads);
  w.W_1 = cast<S>(rng.gaussian(d, r, 1.0 / std::sqrt(double(d))));
  w.W_2 = cast<S>(rng.gaussian(r, d, 1.0 / std::sqrt(double(r))));
  return w;
}

// Instantiated once per scalar in core/instances_*.cpp (P: extern here, nothing there).
#define QKVLAB_BLOCK_INSTANCES(P, S)                                                             \
  P template Mat<S> activate<S>(const Mat<S>&, MlpActivation);                                     \
  P template Mat<S> mlp<S>(const Mat<S>&, const Mat<S>&, const Mat<S>&, MlpActivation);            \
  P template Mat<S> block_forward<S>(const Mat<S>&, const BlockWeights<S>&, Skip, Mask, MlpActivation); \
  P template BlockWeights<S> random_block<S>(Rng&, Eigen::Index, int, Eigen::Index);
#define QKVLAB_BLOCK_EXTERN(S) QKVLAB_BLOCK_INSTANCES(extern, S)
QKVLAB_EXTERN_INSTANCES(QKVLAB_BLOCK_EXTERN)

}  // namespace qkvlab
