// The gauge directions of the network of config.hpp: tangent vectors at θ of the parameter
// transformations that leave the function unchanged, each in the kernel of the Jacobian because
// f(g·θ) = f(θ) along a curve g(t) (docs/math/fdim.md, "Gauges"):
//   - Lemma 3.1 of Query-weight elimination, per head: (W_Q, W_K) ↦ (W_Q A, W_K A⁻ᵀ) and
//     (W_V, W_O) ↦ (W_V B, B⁻¹ W_O), A, B ∈ GL(d_h) (W_Q = I removes the first);
//   - the basis of each hidden stream (a residual stream where skips join, else each junction
//     between linear maps): X ↦ X G, writers W ↦ W G, readers W ↦ G⁻¹ W; G ∈ GL(d) without
//     norms, O(d) through RMSNorm or a tied readout, O(d) fixing 1 through LayerNorm; G block
//     diagonal (GL(d_h)^H) where a layer with W_Q = I reads the stream, its W_K^h also ↦ W_K^h G_hᵀ;
//     none where the stream is the input or the output itself;
//   - LayerNorm's centring: every writer's component along 1 is dead on every stream but the output,
//     its basis pinned or not (a tied E's only without a final gain);
//   - with biases: b_K^h (constant over keys), b_V^h against b_O;
//   - ReLU's and ReLU²'s positive scalings (W_1 e_i, b_1,i, e_iᵀ W_2 scaled by s, s^−1 or s^−2), a gated
//     MLP's value (and ReGLU's gate) scalings, a norm gain (and DyT's β) against its readers' rows;
//   - with biases, a translation at every bias that writes a norm-free stream, against the biases of
//     the readers after it (Lemma 9 of the skips-as-gauges note); where nothing can absorb it (a W_Q = I
//     layer's queries, the output, a tied readout) the shifts written since the last such point cancel;
//   - learned skips: X A parts the streams; X U V has GL(d) inside, X + X U V GL(r) inside;
//   - DyT: each stream's scale against the α that read it; at ε = 0, RMSNorm's and LayerNorm's scale.
// Each group is a named term with the number of its directions; the rest of a low-rank skip's
// redundancy is the note's formula, a term with no directions (constructed = false). The groups'
// directions may be dependent: count.hpp predicts their rank (a term of negative dimension says by how
// much they overlap), not their number.
#pragma once

#include "fdim/config.hpp"
#include "fdim/network.hpp"

#include <string>
#include <vector>

namespace qkvlab::fdim {

struct Term {
  std::string name;
  long long dimension = 0;
  bool constructed = true;  // false: a count from the theory's formula, with no directions built
};

// Directions as the columns of a P × k matrix, with the terms they realize (Σ dimension of the
// constructed terms = k).
template <class T> struct Gauges {
  Mat<T> directions;
  std::vector<Term> terms;
};

template <class T> Gauges<T> gauge_directions(const Network& c, const Layout& L, const Vec<T>& theta);

}  // namespace qkvlab::fdim
