// The per-sequence measures of the analyses of trained models (docs/analysis.md),
// each a function of one sequence's activations, in double. Layouts as the
// activation record gives them (lm/record.hpp), for one sequence:
// a pattern is H×T×T (row i: query i; rows sum to 1, zero above the diagonal),
// a token-major tensor is T×(heads·width).
//
// Attention entropy (resformer.eq11), from the head-mean pattern Ā = (1/H) Σ_h A_h:
//   column   a_j = Σ_i Ā_ij (the attention token j receives), a' = a / Σ a, e = −Σ_j a'_j ln a'_j
//            (the released script's definition)
//   row      the mean over heads and rows of −Σ_j A_ij ln A_ij (each query's own entropy)
//   printed  Eq. 11 as printed: a_i = (1/T) Σ_j Ā_ij, a row mean; since every row of a
//            pattern sums to 1, a_i = 1/T and e = ln T for every pattern: it measures nothing
// Token similarity (resformer.eq13): s = (1/(T(T−1))) Σ_{i≠j} cos(h_i, h_j), computed as
//   (‖Σ_i u_i‖² − Σ_i ‖u_i‖²) / (T(T−1)) with u_i = h_i/‖h_i‖ (a zero row counts as 0).
// Value spectrum (resformer.eq12): the eigenvalues of C = (1/T) Σ_i v_i v_iᵀ in descending
//   order; when T < width they are those of the T×T Gram matrix V Vᵀ / T (the rest are 0).
// First-token ratios (resformer Fig. 10, 19): x_0 / mean(x_1 … x_{T−1}) for the importance a_j
//   (column definition, before normalization), the value norms ‖v_j‖ and the hidden norms ‖h_j‖.
// Cosine matrices: rows of a matrix against each other (heads: H×H over flattened head
//   outputs or patterns; tokens: T×T).
#pragma once

#include <Eigen/Dense>
#include <vector>

namespace qkvlab::analysis {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

enum class EntropyDefinition { column, row, printed };

// pattern: H×T×T, row-major (H blocks of T×T).
double attention_entropy(const float* pattern, int H, int T, EntropyDefinition definition);

// The column importance a_j = Σ_i Ā_ij of the head-mean pattern (not normalized).
std::vector<double> token_importance(const float* pattern, int H, int T);

// Mean pairwise cosine similarity of the T rows of X (T×width, row stride ld).
double token_similarity(const RowMatrix& X);

// Eigenvalues of (1/T) Xᵀ X, descending, of length min(T, width).
std::vector<double> covariance_spectrum(const RowMatrix& X);

// x_0 over the mean of x_1 … x_{n−1}.
double first_ratio(const std::vector<double>& x);

// Euclidean norm of each row.
std::vector<double> row_norms(const RowMatrix& X);

// The cosine of every pair of rows (zero rows: cosine 0).
RowMatrix cosine_matrix(const RowMatrix& X);

// The heads of a token-major tensor (T × heads·width) combined per token:
// concat keeps all heads' entries, mean averages the heads' vectors.
enum class HeadCombination { concat, mean };
RowMatrix combine_heads(const float* data, int T, int heads, int width, HeadCombination how);

}  // namespace qkvlab::analysis
