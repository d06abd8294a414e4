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
//   (‖Σ_i u_i‖² − Σ_i ‖u_i‖²) / (T(T−1)) with u_i = h_i/‖h_i‖ (a zero row counts as 0), from what the
//   backend reduces a sequence to (engine/backend.hpp's state_rows: Σ_i u_i and the count of
//   non-zero rows, each ‖u_i‖² = 1), so only O(d) numbers per sequence leave the device.
// Value spectrum (resformer.eq12): the eigenvalues of C = (1/T) Σ_i v_i v_iᵀ in descending
//   order; when T < width they are those of the T×T Gram matrix V Vᵀ / T (the rest are 0). The
//   backend forms the smaller of the two (state_gram); only it leaves the device.
// First-token ratios (resformer Fig. 10, 19): x_0 / mean(x_1 … x_{T−1}) for the importance a_j
//   (column definition, before normalization), the value norms ‖v_j‖ and the hidden norms ‖h_j‖.
// Cosine matrices: rows of a matrix against each other (heads: H×H over flattened head
//   outputs or patterns; tokens: T×T).
// Cross-layer attention (ResFormer Eq. 2, 3, 6; Fig. 3), layer n against layer m, per token i
//   and head h (g the key/value head h reads; scores s_ij = scale q_h,i·k_n,j, r_ij = scale q_h,i·k_m,j,
//   j ≤ i):
//   Eq. 2  U_i = Σ_j (e^{s_ij} v_n,j + e^{r_ij} v_m,j) / Σ_j (e^{s_ij} + e^{r_ij})  (one causal softmax
//          over the keys of both layers: true cross-layer attention)
//   Eq. 3  U_i = ½ Σ_j A_ij (v_n,j + v_m,j)   (K_m replaced by K_n, which is exactly Eq. 4; A = A_n)
//   Eq. 6  U_i = Σ_j A_ij v_n,j + v_m,i        (layer m's values mapped by the identity)
//   with the heads concatenated (U_i ∈ R^{H·d_v}, before W_O); the mean over the T tokens of
//   cos(Eq. 2, Eq. 3) and of cos(Eq. 2, Eq. 6). A cosine that is not finite is a NumericalError.
#pragma once

#include <Eigen/Dense>
#include <vector>

#include "engine/kernel_types.hpp"

namespace qkvlab::analysis {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

enum class EntropyDefinition { column, row, printed };

// The entropies and the importance are functions of what the attention reduces each head's pattern
// to (engine/kernel_types.hpp's PatternSums, by engine/kernels/pattern_reduction.hpp's one definition,
// in blocks of queries inside the attention or here over a whole pattern): per head h, the column
// sums c_hj = Σ_i A_h,ij, and per query i the mass m_hi = Σ_j A_h,ij and entropy
// e_hi = −Σ_j A_h,ij ln A_h,ij. Then, heads added in order,
//   column   a_j = (Σ_h c_hj) / H        row   (Σ_h Σ_i e_hi) / (H T)        printed   a_i = Σ_h m_hi / (H T)
// One sequence's reductions, each H×T (head h from h·T).
struct HeadSums {
  const double *columns, *mass, *entropy;
  int H, T;
};
// The reductions of a whole pattern (H×T×T, row-major: H blocks of T×T), as the attention's.
struct PatternReductions {
  std::vector<double> columns, mass, entropy;
  int H = 0, T = 0;
  HeadSums view() const { return {columns.data(), mass.data(), entropy.data(), H, T}; }
};
PatternReductions reduce_pattern(const float* pattern, int H, int T);

double attention_entropy(const HeadSums& sums, EntropyDefinition definition);
double attention_entropy(const float* pattern, int H, int T, EntropyDefinition definition);

// The column importance a_j = Σ_i Ā_ij of the head-mean pattern (not normalized).
std::vector<double> token_importance(const HeadSums& sums);
std::vector<double> token_importance(const float* pattern, int H, int T);

// Mean pairwise cosine similarity of T rows from their unit sum (`columns` values) and the count of
// non-zero rows (state_rows' RowSums of one sequence); NaN for T < 2.
double token_similarity(const double* unit_sum, int columns, double nonzero, int T);
// The same of the T rows of X (T×width), reduced by the CPU kernel of state_rows.
double token_similarity(const RowMatrix& X);

// The eigenvalues of a sequence's smaller Gram matrix (m × m, symmetric: state_gram's), descending:
// all of them (top_k = 0), or the top_k largest by Lanczos (core/random_matrix.hpp on AᵀA = the Gram
// matrix, A from its pivoted LDLᵀ). NumericalError when a solver does not converge.
std::vector<double> gram_spectrum(const double* gram, int m, int top_k = 0);
// Eigenvalues of (1/T) Xᵀ X, descending, of length min(T, width), its Gram matrix formed by the CPU
// kernel of state_gram.
std::vector<double> covariance_spectrum(const RowMatrix& X);

// x_0 over the mean of x_1 … x_{n−1}.
double first_ratio(const std::vector<double>& x);

// The cosine of every pair of rows (zero rows: cosine 0).
RowMatrix cosine_matrix(const RowMatrix& X);

// The heads of a token-major tensor (T × heads·width) combined per token:
// concat keeps all heads' entries, mean averages the heads' vectors.
using HeadCombination = engine::HeadCombination;
RowMatrix combine_heads(const float* data, int T, int heads, int width, HeadCombination how);

// One sequence of one attention layer as the record lays it out: q T×H×d_k, k T×G×d_k,
// v T×G×d_v (token-major), pattern H×T×T.
struct AttentionLayer {
  const float *q, *k, *v, *pattern;
  int T, H, G, dk, dv;
};
struct CrossLayerCosines {
  double eq3 = 0, eq6 = 0;  // mean over tokens of cos(Eq. 2, Eq. 3) and cos(Eq. 2, Eq. 6)
};
// Layer n's attention against layer m's keys k_m and values v_m (the layouts of n.k and n.v).
CrossLayerCosines cross_layer_cosines(const AttentionLayer& n, const float* k_m, const float* v_m, double scale);

}  // namespace qkvlab::analysis
