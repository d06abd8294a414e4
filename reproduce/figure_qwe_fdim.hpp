// qwe-fdim (`qkvlab reproduce qwe-fdim`): the functional dimension of small attention networks with
// free queries against W_Q = I in every layer, over skips × norm × layers at a few small widths
// (fdim/; docs/math/fdim.md). No training: every count is the float rank of a Jacobian at a seeded
// random point, saturated in its inputs, beside the theory's gauge count.
#pragma once

#include "results/figure.hpp"
#include "results/value.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace qkvlab::reproduce {

struct FdimPanel {  // one width: a row per depth, a column per (skips, norm)
  results::Table table;
  results::Figure figure;
  std::string stem;
};

struct FdimFigure {
  results::Value value;  // {"network", "settings": [{d, heads, head_dim, layers, skips, norm, free, identity, ...}]}
  std::vector<FdimPanel> panels;
  std::string notes;  // README.md lines
};

// d = 4 and 6 (H = d/2), L = 1, 2; quick: d = 4, L = 1 only (the tests' --steps runs).
// progress(done, total) after each setting.
FdimFigure qwe_fdim_counts(std::uint64_t seed, bool quick, const std::function<void(int, int)>& progress);

}  // namespace qkvlab::reproduce
