// The curves behind §8.3.1 (docs/math/qkv.md, qwe.sec8.3.1; `qkvlab rmt`), as tables
// and their figures; the math is core/random_matrix.hpp's:
//   defect_scale  s(u) against ‖u‖/sqrt(d ε) for three spectra Σ, with the limits
//                 1 (small inputs) and 1/m(u) (large inputs);
//   mp_histogram  squared singular values of one d×d N(0, v/d) matrix (v = 1/4,
//                 d = 1024) against the Marchenko–Pastur density;
//   edge_excess   mean |σ_max − 2√v| against d = 64, 128, … up to d_max on log-log
//                 axes, with d^{−2/3};
//   m2_spread     std(m(u)²)·sqrt(d) against d, u uniform on the unit sphere;
//   mp_summary    the KS distance of the histogram's draw to the MP law.
// Streams "rmt/defect_scale", "rmt/mp_histogram", "rmt/sweep/d=D".
#pragma once

#include "results/figure.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace qkvlab::synthetic {

// The panels' names in order: their tables' names, and the files NAME.csv, NAME.svg, NAME.png.
inline const std::vector<std::string> kRmtPanels{"defect_scale", "mp_histogram", "edge_excess", "m2_spread"};

struct RmtCurves {
  std::vector<results::Plot> panels;  // kRmtPanels
  results::Table summary;        // mp_summary
  std::vector<results::Table> tables() const;  // the panels' tables, then the summary
};

// The memory of the largest sweep matrix, its Lanczos workspace and the sphere
// samples: about 4 d_max² doubles.
double rmt_memory_bytes(int d_max);

// progress(what, done, total) as the panels are computed (may be empty). d_max ≥ 64.
using RmtProgress = std::function<void(const std::string& what, std::size_t done, std::size_t total)>;
RmtCurves rmt_curves(std::uint64_t seed, int d_max, const RmtProgress& progress = {});

}  // namespace qkvlab::synthetic
