// The linearity defect of Remark 6 (docs/math/qkv.md, qwe.thm8.3; `qkvlab lnorm`). The
// previous sublayer must produce f(x) = N⁻¹(A N(x)) (Lemma 8.2, core/normalize.hpp),
// which is nonlinear. For inputs x = s·g, g ~ N(0, I_d), fit the best linear map W
// by least squares on n_fit = 16 d samples and report the relative error
// ‖W X − f(X)‖_F / ‖f(X)‖_F on as many held-out samples (and in sample), against
// r = s / sqrt(d ε) on 49 log-spaced points of [1e-3, 1e3]. ε = 1e-5 (PyTorch's
// LayerNorm default); T has i.i.d. N(0, 1/d) entries. Streams "lnorm/T" and
// "lnorm/x/I" for the I-th scale.
#pragma once

#include "results/figure.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace qkvlab::synthetic {

struct LnormCurve {
  results::Plot curve;        // table "lnorm": r, s, rel_err_held_out, rel_err_in_sample, points_outside_image
  results::Table parameters;  // d, eps, samples_fit, samples_test
};

// The four sample matrices, the fit's QR and its products: about 10 · 16 d² doubles.
double lnorm_memory_bytes(int d);

// progress(what, done, total) after each scale (may be empty). d ≥ 2; throws
// std::runtime_error when Lemma 8.2's δ_i vanish for the drawn T.
using LnormProgress = std::function<void(const std::string& what, std::size_t done, std::size_t total)>;
LnormCurve lnorm_curve(std::uint64_t seed, int d, const LnormProgress& progress = {});

}  // namespace qkvlab::synthetic
