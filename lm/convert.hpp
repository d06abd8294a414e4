// Converting a trained vanilla model into SkipV1Former for uptraining (SkipV1Former §5.1,
// App. B.1, Fig. 3, 8, 10): `qkvlab lm convert CKPT --to skipv1 --method M --out DIR`.
//
// The SkipV1 model keeps every tensor of the vanilla one except, in layers 2 … L (1-based),
// the value projection, which shrinks to the H' = G − round(ρG) own heads (heads H' … G − 1
// carry layer 1's values, the second-half strategy), and, for the methods that say so, the
// output projection W_O (rows of z's heads, row-vector convention: X W_V is the values, z W_O
// the attention output). Per layer ≥ 2, with k = G / H' source heads per own head and
// r = H'·d_h own value columns:
//
// The authors' released converter (Zhoutong-Wu/dense_skip, checkpoint_converting_gpt2.py):
//   released-avg    own head j = the mean of heads j, j + H', …, j + (k−1)H' of W_V; W_O kept
//                   (convert_gpt2_checkpoint_to_skipv1_avg: heads j and H' + j at ρ = ½; the
//                   paper's Mean V, "a mean pool across every two head projections")
//   released-topk   the r columns c of W_V of largest ‖W_V[:,c]‖·‖W_O[c,:]‖, in descending order of
//                   that score, as the own columns, W_O's row c moved with them to the same
//                   place; W_O's rows r … D−1 zero (…_topk; the paper's Top VO)
//   released-topk1  as released-topk, but W_O's rows r … D−1 kept as they were (…_topk1)
//   released-svd    W_V W_O (d × d) replaced by its best rank-r approximation U_r Σ_r V_rᵀ
//                   (Eckart–Young): W_V' = U_r Σ_r^½, W_O's rows 0 … r−1 = Σ_r^½ V_rᵀ, rows r … D−1
//                   zero (…_svd, the paper's SVD); exact here, where the released code uses
//                   torch.svd_lowrank (randomized, q = r, niter = 2)
//   released-topk-as-run, released-svd-as-run
//                   what the released script saves: its loop over the state dict meets a layer's
//                   attn.c_proj.weight after attn.c_attn.weight, and copies it as it was over the W_O
//                   the function had just written (…_topk lines 181 and 191–192, …_topk1 236 and 246–247,
//                   …_svd the same), so W_V' is the method's and W_O stays as it was; …_topk1 as run
//                   is …_topk as run. Biases as in the functions as written (b_V with W_V's columns,
//                   the SVD's folded into b_O), which the released script never meets: its models have
//                   none, and its loader would drop c_attn.bias. With W_O kept, the sign of each of the SVD's columns
//                   changes the function: …-svd-as-run is one of the models the script can save (Eigen's
//                   signs; the script's come from an unseeded torch.svd_lowrank). The four released-*
//                   names above are the functions as written, W_O included
//   mean-v          the same conversion as released-avg (the paper's baseline of Fig. 10)
//   svd             the same conversion as released-svd
// qkvlab's other readings of App. B.1 (no released counterpart):
//   mean-v-adjacent own head j = the mean of the adjacent heads jk … jk + k − 1 of W_V; W_O kept
//   mean-vo         as mean-v-adjacent, and W_O's rows of own head j = the mean of those heads'
//                   rows; W_O's rows of the heads that now carry V_1 zero (the paper's Mean VO)
//   top-v           the H' whole heads of largest ‖W_V,h‖_F, in index order; W_O kept (Top V)
//   top-vo          the H' whole heads of largest ‖W_V,h‖_F·‖W_O,h‖_F, their W_V and W_O rows moved
//                   to the own slots; W_O's other rows zero
// Biases (the released models have none): b_V is averaged, or selected, with W_V's columns; the
// SVD methods fold b_V W_O into b_O (exact: attention rows sum to 1) and set b_V' = 0. Only
// vanilla models; the methods that read W_O's rows with W_V's columns need one key/value head per
// query head (no GQA), the mean methods a ratio that divides the heads evenly. Refusals are
// UsageErrors.
#pragma once

#include <string>
#include <vector>

#include "lm/checkpoint.hpp"

namespace qkvlab::lm {

enum class Conversion {
  mean_v,
  mean_vo,
  top_v,
  top_vo,
  svd,
  mean_v_adjacent,
  released_avg,
  released_topk,
  released_topk1,
  released_svd,
  released_topk_as_run,
  released_svd_as_run
};
const std::vector<std::string>& conversion_names();    // every method's name, in the enum's order
Conversion parse_conversion(const std::string& name);  // UsageError naming the methods
std::string to_string(Conversion method);

// `source`: a vanilla model's configuration and values; returns SkipV1's (ratio ρ, source layer 1).
Checkpoint convert_to_skipv1(const Checkpoint& source, Conversion method, double skip_ratio = 0.5);

}  // namespace qkvlab::lm
