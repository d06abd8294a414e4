// What the analyses reduce an attention pattern to, one definition for the
// attention that reduces its patterns block by block (attention_reduce.hpp,
// and gpu/kernels/attention.cuh's kernels, which follow it) and for whole
// patterns (analysis/measures.cpp): per query row t, in double,
//   mass_t = Σ_{j≤t} P_tj and entropy_t = −Σ_{j≤t, P_tj≠0} P_tj ln P_tj (j ascending),
//   columns_j += P_tj (rows in ascending t, so a column's sum has a fixed order);
// the entropies only when `entropy` is given (a logarithm per entry costs as much as the softmax).
#pragma once

#include <cstddef>

namespace qkvlab::engine::kernels {

// Rows first … first + rows − 1 of one pattern (row r at P + r·ld, query t = first + r). Compiled
// once (engine/pattern_reduction.cpp, with the CPU kernels' flags), so that the attention's blocks
// and the analyses' whole patterns round alike.
void reduce_pattern_rows(const float* P, std::size_t ld, int first, int rows, double* columns, double* mass,
                         double* entropy);
void reduce_pattern_rows(const double* P, std::size_t ld, int first, int rows, double* columns, double* mass,
                         double* entropy);

}  // namespace qkvlab::engine::kernels
