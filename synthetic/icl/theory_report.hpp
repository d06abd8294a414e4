// `qkvlab icl theory` as results: one estimate_theory run (theory.hpp) or a sweep
// of them over a grid of (d, n, sigma, w0_scale), each rendered as a terminal
// table, a JSON object, tables (HDF5, CSV) and a figure.
//
// A sweep runs the grid product; every point uses the options' seed exactly as a
// single run does (common random numbers), so a point equals `icl theory` at its
// (d, n, sigma, w0_scale), whatever the order or the threads.
#pragma once

#include "results/figure.hpp"
#include "results/value.hpp"
#include "synthetic/icl/theory.hpp"

#include <array>
#include <functional>
#include <string>
#include <vector>

namespace qkvlab::icl {

// How the prior mean W_0 was given: "zero", "identity" or a matrix file, times `scale`.
struct PriorMeanName {
  std::string w0 = "zero";
  double scale = 1.0;
};

// One run: tables "by_a" (a row per copy width a) and "scalars" (one row).
results::Table theory_by_a_table(const Theory& t);
results::Table theory_scalar_table(const Theory& t);
// c_a, the MHA bound and the SkipV1 value against a (from the by_a table).
results::Figure theory_figure(const Theory& t);
std::string theory_text(const Theory& t, const PriorMeanName& w0);
results::Value theory_json(const Theory& t, const PriorMeanName& w0, const std::string& command_line);

// The axes d, n, sigma, w0_scale; point (i0, i1, i2, i3) has flat index ((i0 N1 + i1) N2 + i2) N3 + i3.
struct TheoryGrid {
  std::array<std::vector<double>, 4> axes;
  static constexpr std::array<const char*, 4> names{"d", "n", "sigma", "w0_scale"};
  std::size_t size() const { return axes[0].size() * axes[1].size() * axes[2].size() * axes[3].size(); }
  double at(std::size_t point, std::size_t axis) const {
    for (std::size_t k = 3; k > axis; --k) point /= axes[k].size();
    return axes[axis][point % axes[axis].size()];
  }
  // The task of a point: W_0 = w0_scale I when identity_prior, else 0. Validated (UsageError), with
  // W_D defined (require_posterior): the sweep builds every point's task before it runs the first.
  Task task(std::size_t point, bool identity_prior) const;
};

struct TheorySweep {
  TheoryGrid grid;
  bool identity_prior = false;
  TheoryOptions options;
  std::vector<Theory> points;  // in flat-index order
};

// progress(done, total) before each point and at the end (may be empty).
TheorySweep run_theory_sweep(const TheoryGrid& grid, bool identity_prior, const TheoryOptions& options,
                             const std::function<void(std::size_t, std::size_t)>& progress = {});

// Tables "points" (a row per point: C, C3, mean lambda, c_a at a = floor(d/2) and d-1, the MHA bound at
// a = d-1 and d, SkipV1 at a = d, each with _se) and "by_a" (a row per point and a).
results::Table sweep_points_table(const TheorySweep& s);
results::Table sweep_by_a_table(const TheorySweep& s);
// Against the first swept axis (order d, n, sigma, w0_scale), SkipV1 at a = d (C + C_3) and the MHA
// bound at a = d−1, one pair of curves per value of the second swept axis; other axes at their first value.
results::Plot sweep_figure(const TheorySweep& s);
std::string sweep_text(const TheorySweep& s);
results::Value sweep_json(const TheorySweep& s, const std::string& command_line);

}  // namespace qkvlab::icl
