// Converting a trained vanilla model into SkipV1Former for uptraining (SkipV1Former §5.1,
// App. B.1, Fig. 3, 8, 10): `qkvlab lm convert CKPT --to skipv1 --method M --out DIR`.
//
// The SkipV1 model keeps every tensor of the vanilla one except, in layers 2 … L (1-based),
// the value projection, which shrinks to the H' = G − round(ρG) own heads (heads H' … G − 1
// carry layer 1's values, the second-half strategy), and, for the *-vo methods and svd, the
// output projection W_O (rows of z's heads, row-vector convention: X W_V is the values, z W_O
// the attention output). Per layer ≥ 2, with k = G / H' source heads per own head:
//   mean-v   own head j = the mean of heads jk … jk + k − 1 of W_V (and of b_V); W_O kept
//            (the paper's method, "a mean pool across every two head projections")
//   mean-vo  as mean-v, and W_O's rows of own head j = the mean of those heads' rows; W_O's rows
//            of the heads that now carry V_1 set to zero (so the model starts without them)
//   top-v    the H' heads of largest ‖W_V,h‖_F, in index order, as the own heads; W_O kept
//   top-vo   the H' heads of largest ‖W_V,h‖_F·‖W_O,h‖_F, their W_V and W_O rows moved to the
//            own slots; W_O's other rows zero (our reading: App. B.1 does not say)
//   svd      W_V W_O (d × d) replaced by its best rank-H'd_h approximation U_r Σ_r V_rᵀ
//            (Eckart–Young): W_V' = U_r Σ_r^½, W_O's own rows = Σ_r^½ V_rᵀ, its other rows zero;
//            b_V W_O is folded into b_O (exact: attention rows sum to 1) and b_V' = 0
// Only vanilla models; the *-vo methods and svd need one key/value head per query head (no GQA),
// the mean methods a ratio that divides the heads evenly. Refusals are UsageErrors.
#pragma once

#include <string>

#include "lm/checkpoint.hpp"

namespace qkvlab::lm {

enum class Conversion { mean_v, mean_vo, top_v, top_vo, svd };
Conversion parse_conversion(const std::string& name);  // UsageError naming the methods
std::string to_string(Conversion method);

// `source`: a vanilla model's configuration and values; returns SkipV1's (ratio ρ, source layer 1).
Checkpoint convert_to_skipv1(const Checkpoint& source, Conversion method, double skip_ratio = 0.5);

}  // namespace qkvlab::lm
